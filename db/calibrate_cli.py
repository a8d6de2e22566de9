"""`python -m db calibrate`: fit a device profile (fixed costs and bandwidths) to the validation runs stored in
the database DATABASE_URL names, check it by leaving one config out, and write a calibrated config.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from db.calibration import calibrate_from_store, leave_one_out_from_store, terms_from_store
from db.jsonfile import read_json_object, write_json
from db.runsink import open_store
from engine import FIXED_COSTS as FIXED
from engine import Calibration, Device, EngineError, HeldOut, TermFit, apply_calibration, apply_terms, median_error

GIB = 2**30
FIXED_UNITS = {"step_ms": "ms per step", "collective_ms": "ms per collective round",
               "launch_ms": "ms per lookup launch", "piece_ms": "ms per table piece"}


def loo_dict(held: list[HeldOut]) -> dict:
    """Leave-one-config-out errors: per config and over every held-out rank."""
    groups = sorted({h.group for h in held})
    return {"median_error": median_error(held),
            "configs": {g: {"plans": sum(h.group == g for h in held),
                            "runs": sum(len(h.run_ids) for h in held if h.group == g),
                            "median_error": median_error([h for h in held if h.group == g])} for g in groups}}


def text(cal: Calibration, loo: dict | None) -> str:
    prof = cal.profile
    r2 = "n/a" if cal.r2 is None else f"{cal.r2:.3f}"
    err = "" if cal.median_error is None else f", median error {cal.median_error:.0%}"
    cores = f", {prof.cores_per_host:g} cores per host" if prof and prof.cores_per_host else ""
    where = f" ({prof.backend}, {prof.hosts} host{'s' if prof.hosts > 1 else ''}{cores})" if prof else ""
    lines = [f"Calibration of {cal.device.value}{where} from {cal.n_runs} runs (R^2 {r2}{err}):"]
    if prof:
        lines += [f"  {name} = {getattr(prof, name):.4g} {FIXED_UNITS[name]}" for name in FIXED]
    lines += [f"  {name} = {bw:.6g} bytes/ms ({bw * 1000 / GIB:.3g} GiB/s)" for name, bw in cal.patch.items()]
    lines += [f"  note: {n}" for n in cal.notes]
    if loo:
        lines.append("Leave one config out (each config's runs estimated by the fit on the others):")
        lines += [f"  {g}: {c['plans']} plans, median error {c['median_error']:.0%}" for g, c in loo["configs"].items()]
        lines.append(f"  all: median error {loo['median_error']:.0%}")
    return "\n".join(lines)


def terms_text(fit: TermFit) -> str:
    """Each term: value +- standard error [bootstrap interval], unit, default, fitted or refused (why, and which
    runs would fit it); then the leave-one-run-out per-rank error before (the defaults) and after."""
    lines = [f"CPU terms of {fit.device_name or 'an unnamed device'!r} from {len(fit.run_ids)} runs "
             f"({fit.n_ranks} ranks, {fit.backend or 'unknown'} backend), bytes of work at ddr_mem_bw "
             f"{fit.ddr_mem_bw:.6g} bytes/ms; value +- standard error [{fit.level:.0%} bootstrap interval: "
             f"{fit.resamples} resamples of the runs, seed {fit.seed}]:"]
    for t in fit.terms:
        value = f"{t.value:.4g} +- {t.se:.2g}" if t.se is not None else f"{t.value:.4g}"
        if t.interval is not None:
            value += f" [{t.interval[0]:.4g}, {t.interval[1]:.4g}]"
        state = "fitted" if t.fitted else f"not fitted, default kept: {t.refused}; would be fitted from {t.hint}"
        lines.append(f"  {t.name} = {value} {t.unit} (default {t.default:.4g}): {state}")
    h = fit.held_out
    lines.append(f"Leave one run out (each run's ranks predicted by the terms fitted on the other runs): median "
                 f"per-rank error {h['median_error_before']:.0%} with the defaults, {h['median_error_after']:.0%} "
                 "fitted")
    lines += [f"  run {r['run_id']} ({r['config']}): {r['median_error_before']:.0%} before, "
              f"{r['median_error_after']:.0%} after" for r in h["runs"]]
    lines += [f"  note: {n}" for n in fit.notes]
    return "\n".join(lines)


def cmd_terms(args: argparse.Namespace) -> int:
    if Device(args.device) is not Device.CPU:
        raise EngineError("--terms fits the CPU estimate's terms (engine/estimate.py cpu_terms): use --device cpu; "
                          "GPU estimates have no such terms yet")
    fit = terms_from_store(open_store(), args.device_name, args.backend)
    data = fit.as_dict()
    if args.out:
        write_json(Path(args.out), data, "--out")
    if args.config:
        write_json(Path(args.config_out), apply_terms(read_json_object(args.config, "--config"), data), "--config-out")
    print(json.dumps(data, indent=1, default=_plain) if args.json else terms_text(fit))
    return 0


def cmd_calibrate(args: argparse.Namespace) -> int:
    if bool(args.config) != bool(args.config_out):
        raise EngineError("--config and --config-out go together: the config to calibrate and where to write it")
    if args.terms:
        return cmd_terms(args)
    store = open_store()
    device = Device(args.device)
    cal = calibrate_from_store(store, device, args.device_name, args.hosts)
    data = cal.as_dict()
    loo = loo_dict(leave_one_out_from_store(store, device, args.device_name, args.hosts)) if args.leave_one_out \
        else None
    if loo:
        data["leave_one_out"] = loo
    if args.out:
        write_json(Path(args.out), data, "--out")
    if args.config:
        write_json(Path(args.config_out), apply_calibration(read_json_object(args.config, "--config"), cal.as_dict()),
                    "--config-out")
    print(json.dumps(data, indent=1, default=_plain) if args.json else text(cal, loo))
    return 0


def _plain(v: object) -> object:
    if isinstance(v, np.generic):
        return v.item()
    raise TypeError(type(v).__name__)


def register(sub: argparse._SubParsersAction, wrap: Callable) -> None:
    """Add `calibrate` to `python -m db`; `wrap` gives the command the run commands' exit codes."""
    p = sub.add_parser("calibrate", help="fit a device profile (fixed costs and bandwidths) to the stored "
                       "validation runs")
    p.add_argument("--device", choices=[d.value for d in Device], default=Device.CPU.value,
                   help="calibrate from runs on this device (default %(default)s)")
    p.add_argument("--device-name", metavar="TEXT", help="only runs whose device name contains TEXT, e.g. H100")
    p.add_argument("--backend", choices=("fbgemm", "torch", "torchrec"), help="with --terms: only runs whose kernels "
                   "these are: dry-runs of this backend, or torchrec for validation runs (DMP's fbgemm kernels)")
    p.add_argument("--hosts", type=int, metavar="N", help="only runs on N hosts (a profile is for one host count)")
    p.add_argument("--leave-one-out", action="store_true",
                   help="also fit on all configs but one and report the error on the one left out, for each config")
    p.add_argument("--out", metavar="FILE", help="also write the calibration JSON here")
    p.add_argument("--config", metavar="CONFIG.json", help="a config to apply the calibration to (--config-out)")
    p.add_argument("--config-out", metavar="FILE", help="where to write the calibrated config: the fitted bandwidths, "
                   "the profile, and the profile's device as compute_device")
    p.add_argument("--json", action="store_true", help="print the calibration as JSON")
    p.add_argument("--terms", action="store_true",
                   help="fit the CPU estimate's cost terms per device to the stored dry-runs' per-rank times instead "
                   "(each with its uncertainty; terms the runs cannot identify keep their defaults); --config-out "
                   "writes them into the config's profile, never over a profile of another device")
    p.set_defaults(func=wrap(cmd_calibrate))


__all__ = ["cmd_calibrate", "cmd_terms", "loo_dict", "register", "terms_text", "text"]
