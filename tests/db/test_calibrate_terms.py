"""Per-term calibration end to end, from real dry-runs: five small 2-rank CPU configs (rowwise_adagrad, dim 32, no
rank past the working-set knee, no piece past 10 MiB) dry-run with the torch backend and recorded by `python -m db
dryrun` in a SQLite store; `python -m db calibrate --terms` fits the terms those runs identify and refuses the
others with the reason and the runs that would identify them; the fit is byte-identical twice; a calibration is
written into a config's profile and refused over another device's. The fitter on synthetic numbers:
tests/engine/test_calibrate_terms.py.
"""

from __future__ import annotations

import json

import pytest

import engine
from db.__main__ import main
from db.calibration import term_runs_from_store
from db.store import Store
from engine.calibrate_terms import INTERCEPT, TERMS
from engine.planfile import plan_to_dict
from engine.terms import DEFAULTS, terms_of
from tests.factories import write

# (rows, pooling factors) per config; every table dim 32, batch 64 per rank, 2 ranks
CASES = (((2000, 30000, 8000), (1, 4, 2)), ((50000, 1000), (2, 1)), ((12000, 12000, 3000, 20000), (4, 1, 1, 2)),
         ((40000, 5000, 9000), (1, 2, 4)), ((1500, 25000), (4, 4)))
IDENTIFIED = {"cpu_id_work", "cpu_row_first_decade", "cpu_output_work", "cpu_optimizer_row_work_rowwise_adagrad",
              INTERCEPT}
UNEXERCISED = {"cpu_row_later_decades", "cpu_workset_row_work", *(f"cpu_optimizer_{kind}_{opt}" for opt in
               ("adagrad", "adam") for kind in ("work", "row_work"))}


def config(rows, pfs) -> dict:
    tables = [{"name": f"t{i}", "num_embeddings": r, "embedding_dim": 32, "feature_names": [f"f{i}"]}
              for i, r in enumerate(rows)]
    return {"tables": tables, "constraints": {f"t{i}": {"pooling_factors": [p]} for i, p in enumerate(pfs)},
            "topology": {"world_size": 2, "compute_device": "cpu", "batch_size": 64, "optimizer": "rowwise_adagrad"}}


def db(capsys, *argv) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    """The five configs dry-run and recorded (module-scoped: the dry-runs are the slow part)."""
    tmp = tmp_path_factory.mktemp("terms")
    url = f"sqlite:///{tmp / 'runs.db'}"
    mp = pytest.MonkeyPatch()
    mp.setenv("DATABASE_URL", url)
    for i, (rows, pfs) in enumerate(CASES):
        raw = config(rows, pfs)
        path = write(tmp, raw, f"c{i}.json")
        cfg = engine.parse_config(raw)
        plan = write(tmp, plan_to_dict(engine.plan(cfg)), f"c{i}.plan.json")
        code = main(["dryrun", str(path), "--plan", str(plan), "--backend", "torch", "--iters", "5", "--warmup", "2",
                     "--json"])
        assert code == 0
    yield url, tmp
    mp.undo()


def test_dryruns_are_recorded_with_their_device_and_become_term_runs(recorded):
    url, _ = recorded
    runs, notes = term_runs_from_store(Store(url))
    assert [r.group for r in runs] == [f"c{i}" for i in range(len(CASES))]
    assert notes == [next(n for n in notes if n.startswith("1-minute load average as the runs ended: "))]
    assert f"({len(CASES)} of {len(CASES)} runs)" in notes[0]
    assert len({r.device_name for r in runs}) == 1 and runs[0].device_name and {r.backend for r in runs} == {"torch"}
    for r in runs:
        assert r.features.shape == (2, len(TERMS) - 1) and (r.measured_ms > 0).all()


def test_calibrate_terms_fits_what_the_runs_identify_and_refuses_the_rest(recorded, monkeypatch, capsys, tmp_path):
    url, _ = recorded
    monkeypatch.setenv("DATABASE_URL", url)
    code, out, err = db(capsys, "calibrate", "--terms", "--json", "--out", tmp_path / "fit.json")
    assert code == 0, err
    data = json.loads(out)
    assert data == json.loads((tmp_path / "fit.json").read_text())
    terms = {t["name"]: t for t in data["terms"]}
    # the runs identify these; each is fitted, or refused as too uncertain (a few tiny kernels on a shared machine)
    for name in IDENTIFIED:
        t = terms[name]
        if t["fitted"]:
            assert t["se"] is not None and 0 <= t["se"] <= 0.5 * max(t["value"], t["default"]) or name == INTERCEPT
        else:
            assert t["refused"].startswith("too uncertain: fitted ") and t["identify_with"].startswith("more runs")
    assert terms[INTERCEPT]["fitted"] and terms[INTERCEPT]["value"] >= 0
    for name in UNEXERCISED:
        t = terms[name]
        assert t["value"] == t["default"] and t["se"] is None and t["refused"].startswith("no run exercises it")
    # every table is dim 32: rowwise_adagrad's work per weight is its work per row times 32
    collinear = terms["cpu_optimizer_work_rowwise_adagrad"]
    assert "cannot tell it from cpu_optimizer_row_work_rowwise_adagrad" in collinear["refused"]
    assert "different dims" in collinear["identify_with"]
    assert "more than 1 MiB per step" in terms["cpu_workset_row_work"]["identify_with"]
    assert "optimizer adagrad" in terms["cpu_optimizer_row_work_adagrad"]["identify_with"]
    assert data["values"] == {n: t["value"] for n, t in terms.items() if t["fitted"] and n != INTERCEPT}
    loro = data["leave_one_run_out"]
    assert [r["config"] for r in loro["runs"]] == [f"c{i}" for i in range(len(CASES))]
    assert loro["median_error_before"] > 0 and loro["median_error_after"] > 0

    code, again, _ = db(capsys, "calibrate", "--terms", "--json")
    assert again == out  # the same runs give the same fit, byte for byte

    code, text, _ = db(capsys, "calibrate", "--terms")
    assert code == 0 and f"from {len(CASES)} runs ({2 * len(CASES)} ranks, torch backend)" in text
    assert "note: fitted on torch-backend dry-runs" in text
    assert "rank_step_ms = " in text and "+- " in text and "Leave one run out" in text
    assert "[95% bootstrap interval: 400 resamples of the runs, seed 0]" in text
    for t in terms.values():  # each fitted term's interval, in the JSON and in the text, around its value
        if t["fitted"]:
            low, high = t["interval"]
            assert low <= t["value"] <= high, t
            assert f"{t['name']} = {t['value']:.4g} +- {t['se']:.2g} [{low:.4g}, {high:.4g}] " in text
        else:
            assert t["interval"] is None
    assert "cpu_workset_row_work = 6040 bytes per row past the knee (default 6040): not fitted, default kept: " \
           "no run exercises it" in text


def test_the_terms_go_into_the_profile_and_price_the_plan(recorded, monkeypatch, capsys, tmp_path):
    url, tmp = recorded
    monkeypatch.setenv("DATABASE_URL", url)
    code, out, err = db(capsys, "calibrate", "--terms", "--json", "--config", tmp / "c0.json",
                        "--config-out", tmp_path / "cal.json")
    assert code == 0, err
    values, name = json.loads(out)["values"], json.loads(out)["device_name"]
    raw = json.loads((tmp_path / "cal.json").read_text())
    prof = raw["topology"]["profile"]
    assert prof["device_name"] == name and {k: prof[k] for k in values} == values  # default ddr_mem_bw: no scaling
    priced = terms_of(engine.parse_config(raw).topology).by_name  # what the estimate prices the config with
    assert priced == {**DEFAULTS, **values}

    other = json.loads((tmp / "c0.json").read_text())
    other["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1, "device_name": "Other CPU 9000"}
    code, _, err = db(capsys, "calibrate", "--terms", "--config", write(tmp_path, other, "other.json"),
                      "--config-out", tmp_path / "no.json")
    assert code == 2 and err.count("\n") == 1 and "'Other CPU 9000'" in err and repr(name) in err
    assert "another device" in err and not (tmp_path / "no.json").exists()


def test_bad_input_is_one_line(recorded, monkeypatch, capsys, tmp_path):
    url, _ = recorded
    monkeypatch.setenv("DATABASE_URL", url)
    code, _, err = db(capsys, "calibrate", "--terms", "--device-name", "no such device")
    assert code == 2 and err.count("\n") == 1 and "found 0" in err
    assert "needs at least 2 succeeded runs with per-rank times" in err
    code, _, err = db(capsys, "calibrate", "--terms", "--backend", "fbgemm")  # the runs are torch's
    assert code == 2 and err.count("\n") == 1 and "found 0" in err
    code, _, err = db(capsys, "calibrate", "--terms", "--device", "cuda")
    assert code == 2 and err.count("\n") == 1 and "--device cpu" in err

    store = Store(url)
    runs, _ = term_runs_from_store(store)
    first = store.get_run(runs[0].run_id)
    store.update_run(first.id, device_info={**first.device_info, "device_name": "Other CPU 9000"})
    code, _, err = db(capsys, "calibrate", "--terms")
    assert code == 2 and err.count("\n") == 1 and "on 2 devices" in err and "--device-name" in err
    code, _, err = db(capsys, "calibrate", "--terms", "--device-name", "Other CPU")
    assert code == 2 and err.count("\n") == 1 and f"found 1 (run {first.id})" in err
    store.update_run(first.id, device_info=first.device_info)


def test_dryruns_that_do_not_measure_their_config_are_left_out_with_why(monkeypatch, tmp_path):
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    monkeypatch.setenv("DATABASE_URL", url)
    raw = config(*CASES[1])
    path, plan = write(tmp_path, raw, "c.json"), write(tmp_path, plan_to_dict(engine.plan(engine.parse_config(raw))),
                                                       "p.json")
    for flags in (("--batches", "1"), ("--scale-rows", "0.5")):
        assert main(["dryrun", str(path), "--plan", str(plan), "--backend", "torch", "--iters", "2", "--warmup", "1",
                     "--json", *flags]) == 0
    runs, notes = term_runs_from_store(Store(url))
    assert runs == [] and notes == [
        "run 1 left out: its steps cycled a few batches (big tables look cached); run with fresh ids (--batches 0)",
        "run 2 left out: measured with --scale-rows (smaller tables than its config's)"]


def test_validation_runs_count_where_they_timed_each_rank_and_fit_as_torchrec(monkeypatch, tmp_path):
    """Validation results as engine.validate writes them (each rank's synchronised iteration_ms, and embedding_ms,
    its own work, where recorded), stored by record_result as `db validate` stores them."""
    from db.models import RunKind
    from db.runsink import record_result, store_plan

    store = Store(f"sqlite:///{tmp_path / 'runs.db'}")
    store.upgrade()
    ids = []
    for i, (rows, pfs) in enumerate(CASES[:3]):
        cfg = engine.parse_config(config(rows, pfs))
        plan = engine.plan(cfg)
        token = store_plan(store, cfg, plan.tables, plan, None, f"v{i}")
        run_id = store.create_run(token, RunKind.VALIDATION.value, "gloo", "cpu")
        own = {} if i == 2 else {"embedding_ms": 1.0 + i}
        record_result(store, run_id, {"status": "succeeded", "backend": "gloo", "device": "cpu",
                                      "device_name": "test cpu", "ranks": [
                                          {"rank": r, "iteration_ms": 9.0, **{k: v + r for k, v in own.items()}}
                                          for r in range(2)]})
        ids.append(run_id)
    runs, notes = term_runs_from_store(store)
    assert [(r.run_id, r.backend, r.device_name) for r in runs] == [(ids[0], "torchrec", "test cpu"),
                                                                    (ids[1], "torchrec", "test cpu")]
    assert [list(r.measured_ms) for r in runs] == [[1.0, 2.0], [2.0, 3.0]]  # embedding_ms, not the step
    assert notes == ["1 validation run not used: it recorded synchronised steps only (every rank waits for the "
                     "slowest), no rank's own embedding_ms"]
    assert term_runs_from_store(store, backend="fbgemm")[0] == []
