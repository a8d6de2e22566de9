"""Our plans priced with CPU terms fitted on this machine, each config left out of its own fit (issue 24):
`python -m bench.measured --fit-from RUN.json ...` plans ours for each config with the terms `db calibrate --terms`
would fit on the other configs' measured ranks of those stored runs (engine.fit_terms over engine.term_run, every
rank priced at the reference DDR bandwidth, as db.calibration does), written into the config's profile
(engine.apply_terms). The measured comparison with TorchRec's plan then tests the planner placing against fitted
terms on configs the fit never saw. Only runs of this machine are read (the platform, CPU, caches and libraries
they recorded): the same plans measured 3-17x apart on two VMs that both call themselves "AMD EPYC", so terms fitted
on another machine are refused, naming what differs.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

from bench.measured import machine_meta as this_machine
from bench.measured import read_run
from bench.rank_error import FIT_BACKEND, PlanRanks, plans_of
import db.calibration
import engine


def fit_sources(paths: Sequence[Path], here: dict | None = None) -> list[PlanRanks]:
    """The measured plans of stored runs of this machine (`here`, default bench.measured.machine_meta()): the platform
    must match, and the CPU, caches and library versions wherever the run recorded them (runs before 2026-11-27
    recorded the platform only). SystemExit with one line naming the file, what differs and the fix where a run was made
    elsewhere or recorded no platform."""
    here = here or this_machine()
    plans: list[PlanRanks] = []
    for path in paths:
        data = read_run(path, "--fit-from ")
        meta = data.get("meta") if isinstance(data.get("meta"), dict) else {}
        differ = [k for k in here if (meta.get(k) or k == "machine") and meta.get(k) != here[k]]
        if differ:
            said = "; ".join(f"its {k} {meta.get(k) or 'unrecorded'!r}, here {here[k]!r}" for k in differ)
            raise SystemExit(f"error: --fit-from {path} was measured on another machine ({said}): terms are fitted "
                             "per machine; measure here first (python -m bench.measured) and fit on that run")
        plans += plans_of(data, str(path))
    return plans


def fitted_config(name: str, config: dict, plans: Sequence[PlanRanks]) -> tuple[dict, dict]:
    """`config` (the case `name`) with the terms fitted on every plan of another config measured with FIT_BACKEND,
    and what the fit was: its values, runs, ranks, configs and leave-one-run-out error. Raises engine.EngineError
    where the other configs cannot identify a fit (engine.fit_terms says which)."""
    ref = db.calibration.REFERENCE_DDR_BW
    others = [p for p in plans if p.config != name and p.backend == FIT_BACKEND]
    runs = [engine.term_run(replace(p.cfg, topology=replace(p.cfg.topology, ddr_mem_bw=ref)), p.tables, p.median, i,
                            p.config, engine.cpu_name(), p.backend) for i, p in enumerate(others)]
    fit = engine.fit_terms(runs, ref)
    out = engine.apply_terms(config, fit.as_dict())
    return out, {"values": fit.values(), "plans": len(others), "ranks": fit.n_ranks,
                 "configs": sorted({p.config for p in others}), "sources": sorted({p.run for p in others}),
                 "leave_one_run_out": fit.held_out, "notes": list(fit.notes)}


__all__ = ["fit_sources", "fitted_config", "this_machine"]
