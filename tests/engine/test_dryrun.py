"""The kernel dry-run: real fbgemm TBEs (and the torch fallback) built from the tutorial's plans on this CPU.

Timings are never asserted, only that they were taken; lookups and bytes are asserted exactly where the
synthetic batch makes them exact (pooling factor 1: one id per bag).
"""

import argparse
import itertools
import json
import re
import subprocess
import sys

import numpy as np
import pytest

from engine import parse_config, plan, plan_to_dict
from engine.cli import main
from engine.dryrun import Backend, Distribution, DryrunDevice, DryrunSettings, run_dryrun, spearman
from engine.evaluate import evaluate
from tests.factories import EXAMPLES, ROOT, tutorial, write

FAST = dict(iters=2, warmup=1)
GLOBAL_BAGS = 2 * 512  # tutorial: 2 ranks x batch 512, one feature per table, pooling factor 1
DIM = 64


def tutorial_plan(sharding_type):
    cfg = parse_config(tutorial(sharding_type))
    return cfg, plan(cfg).tables


def dryrun(sharding_type, **settings):
    cfg, tables = tutorial_plan(sharding_type)
    return run_dryrun(cfg, tables, DryrunSettings(**{**FAST, **settings}))


def cli(*args):
    proc = subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)
    return proc


def one_line_error(capsys, argv):
    with pytest.raises(SystemExit) as e:
        code = main(argv)
        raise SystemExit(code)
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_cli_json_for_the_tutorial_table_wise_plan(tmp_path):
    plan_file = tmp_path / "plan.json"
    assert cli("plan", EXAMPLES / "tutorial_table_wise.json", "--out", plan_file).returncode == 0
    proc = cli("dryrun", EXAMPLES / "tutorial_table_wise.json", "--plan", plan_file, "--json", "--iters", 2)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert {"backend": "fbgemm", "device": "cpu", "iters": 2, "threads": 1, "distribution": "config", "batches": 6,
            "schedule": "ranks in turns", "estimate_rank_correlation": None}.items() <= out.items()
    # the config says cuda; the dry-run measures on cpu and prices the same placement for cpu (engine.pricing)
    assert (out["estimated_device"], out["config_device"]) == ("cpu", "cuda")
    on_cpu = json.loads((EXAMPLES / "tutorial_table_wise.json").read_text())
    on_cpu["topology"]["compute_device"] = "cpu"
    est = json.loads(cli("estimate", write(tmp_path, on_cpu, "cpu.json"), "--plan", plan_file, "--json").stdout)
    shards = [s for tp in json.loads(plan_file.read_text())["plan"].values() for s in tp["shards"]]
    assert [r["rank"] for r in out["ranks"]] == [0, 1]
    for r, e in zip(out["ranks"], est["ranks"]):
        mine = [s for s in shards if s["rank"] == r["rank"]]
        assert 0 < r["measured_p25_ms"] <= r["measured_ms"]  # the same steps' 25th percentile beside their median
        assert r["estimated_ms"] == pytest.approx(e["cost_ms"])
        assert r["num_pieces"] == len(mine) == 2
        assert r["lookups"] == 2 * GLOBAL_BAGS  # every id of the global batch, for each of its 2 tables
        assert r["weight_bytes"] == sum(s["sizes"][0] * s["sizes"][1] * 4 for s in mine)
        assert r["optimizer_bytes"] == 0  # sgd
        # ids and offsets are int64, outputs fp32: (ids + bags) x 8 + bags x dim x 4, per piece
        assert r["io_bytes"] == 2 * ((GLOBAL_BAGS + GLOBAL_BAGS) * 8 + GLOBAL_BAGS * DIM * 4)
        assert r["measured_bytes"] == r["weight_bytes"] + r["io_bytes"]


def test_text_output_has_a_row_per_rank(capsys, tmp_path):
    plan_file = write(tmp_path, plan_to_dict(plan(parse_config(tutorial("column_wise")))), "plan.json")
    assert main(["dryrun", str(EXAMPLES / "tutorial_column_wise.json"), "--plan", str(plan_file),
                 "--iters", "1", "--warmup", "0", "--backend", "torch"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Kernel dry-run: torch on cpu, 1 thread(s), uniform ids unless a table's zipf_exponent")
    assert "fresh ids every step (seed 0)" in out.splitlines()[0]
    assert re.search(r"rank\s+pieces\s+lookups\s+measured ms\s+estimated ms\s+bytes", out)
    rows = re.findall(r"^\s+(\d)\s+4\s+4096\s+[\d.]+\s+[\d.]+\s+[\d.]+ MiB$", out, re.M)
    assert rows == ["0", "1"]  # 4 column pieces each, every id of the 4 tables' global batches


def test_row_wise_pieces_split_the_global_batch_between_ranks():
    res = dryrun("row_wise")
    lookups = [r.lookups for r in res.ranks]
    assert sum(lookups) == 4 * GLOBAL_BAGS
    assert all(abs(x - 2 * GLOBAL_BAGS) < 0.1 * 2 * GLOBAL_BAGS for x in lookups), lookups
    assert all(r.num_pieces == 4 for r in res.ranks)


def test_zipf_ids_are_skewed_but_hot_rows_are_scattered_over_row_shards():
    from engine.dryrun.workload import global_batch

    cfg = parse_config(tutorial("row_wise"))
    ids = global_batch(cfg, 0, DryrunSettings(distribution=Distribution.ZIPF))[0].ids
    counts = np.bincount(ids, minlength=4096)
    assert counts.max() > 20 * counts.mean()  # skewed: the hottest row is drawn far more often than average
    assert len(np.unique(ids)) < 0.7 * len(np.unique(np.random.default_rng(0).integers(0, 4096, len(ids))))
    res = dryrun("row_wise", distribution=Distribution.ZIPF)
    first, second = (r.lookups for r in res.ranks)
    assert first + second == 4 * GLOBAL_BAGS
    assert 0.5 < first / second < 2  # hashed ids: each row range gets hot and cold rows alike
    assert res.zipf_alpha == 1.1 and res.distribution is Distribution.ZIPF


def test_every_step_draws_fresh_ids_unless_batches_caps_them():
    from engine.dryrun.workload import distinct_batches, global_batch

    cfg = parse_config(tutorial("table_wise"))
    s = DryrunSettings(iters=4, warmup=1)
    steps = [global_batch(cfg, 0, s, k)[0].ids for k in range(3)]
    assert not np.array_equal(steps[0], steps[1]) and not np.array_equal(steps[1], steps[2])
    assert np.array_equal(steps[0], global_batch(cfg, 0, s, 0)[0].ids)  # seeded: the same stream every run
    # 1 warmup, then one turn: its untimed step and its 4 timed ones, each on a batch of its own
    assert distinct_batches(s) == 6 and distinct_batches(DryrunSettings(iters=4, warmup=1, batches=2)) == 2
    res = dryrun("table_wise", batches=1)
    assert res.batches == 1 and res.as_dict()["batches"] == 1 and res.as_dict()["seed"] == 0


def test_the_config_zipf_exponent_skews_only_its_table():
    from engine.dryrun.workload import global_batch

    raw = tutorial("table_wise")
    raw.setdefault("constraints", {}).setdefault("large_table_0", {})["zipf_exponent"] = 1.2
    cfg = parse_config(raw)
    skewed = global_batch(cfg, 0, DryrunSettings())[0].ids
    plain = global_batch(cfg, 1, DryrunSettings())[0].ids
    assert np.bincount(skewed).max() > 20 and np.bincount(plain).max() < 10


def test_data_parallel_replicas_see_the_local_batch():
    res = dryrun("data_parallel")
    full_tables_bytes = (2 * 4096 + 2 * 1024) * DIM * 4
    for r in res.ranks:
        assert r.num_pieces == 4
        assert r.lookups == 4 * 512
        assert r.weight_bytes == full_tables_bytes
        assert r.io_bytes == 4 * ((512 + 512) * 8 + 512 * DIM * 4)


@pytest.mark.parametrize("sharding_type", ["row_wise", "table_column_wise", "data_parallel"])
def test_torch_fallback_gives_the_same_lookups_and_bytes_as_fbgemm(sharding_type):
    fb, pt = (dryrun(sharding_type, backend=b) for b in (Backend.FBGEMM, Backend.TORCH))
    assert (fb.backend, pt.backend) == (Backend.FBGEMM, Backend.TORCH)
    assert [r.lookups for r in fb.ranks] == [r.lookups for r in pt.ranks]
    assert [r.measured_bytes for r in fb.ranks] == [r.measured_bytes for r in pt.ranks]
    assert all(r.measured_ms > 0 for r in fb.ranks + pt.ranks)


MIXED = {
    "tables": [
        {"name": "a", "num_embeddings": 1000, "embedding_dim": 16, "feature_names": ["a1", "a2"],
         "pooling": "mean", "data_type": "fp16"},
        {"name": "b", "num_embeddings": 500, "embedding_dim": 8, "pooling": "none"},
        {"name": "c", "num_embeddings": 300, "embedding_dim": 32, "feature_names": ["c1", "c2"]},
        {"name": "d", "num_embeddings": 2000, "embedding_dim": 64, "data_type": "int8"},
    ],
    "constraints": {
        "c": {"is_weighted": True, "batch_sizes": [64, 128], "pooling_factors": [2.5, 0.3],
              "sharding_types": ["data_parallel"]},
        "d": {"sharding_types": ["row_wise"]},
    },
    "topology": {"world_size": 4, "local_world_size": 2, "compute_device": "cpu", "batch_size": 100},
}


@pytest.mark.parametrize("optimizer,state_per_weight", [("adagrad", 1.0), ("rowwise_adagrad", None)])
def test_mixed_tables_and_optimizer_state(optimizer, state_per_weight):
    data = json.loads(json.dumps(MIXED))
    data["topology"]["optimizer"] = optimizer
    cfg = parse_config(data)
    tables = plan(cfg).tables
    fb, pt = (run_dryrun(cfg, tables, DryrunSettings(backend=b, **FAST)) for b in (Backend.FBGEMM, Backend.TORCH))
    assert [r.lookups for r in fb.ranks] == [r.lookups for r in pt.ranks]
    assert [(r.weight_bytes, r.optimizer_bytes) for r in fb.ranks] == [
        (r.weight_bytes, r.optimizer_bytes) for r in pt.ranks]
    assert any("int8" in n and "d" in n for n in fb.notes)
    for r in fb.ranks:
        # fp32 state: one per weight (adagrad) or one per row (rowwise); weights of a and d are 2-byte
        assert r.optimizer_bytes > 0
        if state_per_weight:
            assert r.optimizer_bytes >= r.weight_bytes
        else:
            assert r.optimizer_bytes < r.weight_bytes / 4


def test_estimates_and_rank_correlation_over_four_ranks():
    cfg = parse_config(MIXED)
    tables = plan(cfg).tables
    res = run_dryrun(cfg, tables, DryrunSettings(**FAST))
    est = evaluate(cfg, tables).ranks
    assert [r.estimated_ms for r in res.ranks] == pytest.approx([e.cost_ms for e in est])
    expected = spearman([e.cost_ms for e in est], [r.measured_ms for r in res.ranks])
    assert res.estimate_rank_correlation == expected
    assert expected is None or -1.0 <= expected <= 1.0


def test_spearman():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 45]) == 1.0
    assert spearman([1, 2, 3], [3, 2, 1]) == -1.0
    assert spearman([1, 2, 2, 3], [1, 2, 3, 4]) == pytest.approx(0.948683, abs=1e-6)
    assert spearman([1, 2], [1, 2]) is None
    assert spearman([1, 1, 1], [1, 2, 3]) is None


def test_scale_rows_shrinks_the_weights_and_says_so():
    full, half = dryrun("row_wise"), dryrun("row_wise", scale_rows=0.5)
    assert [r.weight_bytes for r in half.ranks] == [r.weight_bytes // 2 for r in full.ranks]
    assert [r.lookups for r in half.ranks] != [0, 0] and sum(r.lookups for r in half.ranks) == 4 * GLOBAL_BAGS
    assert any("scaled by 0.5" in n for n in half.notes) and not full.notes


def _recorded_turns(monkeypatch):
    """The (rank object, timed steps) of every turn the dry-run takes, and each rank's count of timed steps, in the
    order they ran (the real measure_ranks, its turns observed, not replaced)."""
    from engine.dryrun import measure

    turns, counts = [], []
    init, turn, result = measure._Timed.__init__, measure._Timed.turn, measure._Timed.result
    made = itertools.count()

    def observed_init(self, *args, **kwargs):
        self.serial = next(made)  # not id(self): a rank freed before the next is built may leave it its id
        init(self, *args, **kwargs)

    def observed_turn(self, timed):
        turns.append((self.serial, timed))
        turn(self, timed)

    def observed_result(self):
        counts.append(len(self.times))
        return result(self)

    monkeypatch.setattr(measure._Timed, "__init__", observed_init)
    monkeypatch.setattr(measure._Timed, "turn", observed_turn)
    monkeypatch.setattr(measure._Timed, "result", observed_result)
    return turns, counts


def test_ranks_are_timed_in_turns_round_the_ranks(monkeypatch):
    turns, counts = _recorded_turns(monkeypatch)
    res = dryrun("table_wise", iters=10)
    assert res.schedule == "ranks in turns" and res.as_dict()["schedule"] == "ranks in turns"
    first, second = turns[0][0], turns[1][0]
    assert first != second
    # 10 timed steps in turns of 4, 4 and 2, taken rank 0, rank 1, rank 0, ...: the machine's drift hits both alike
    assert turns == [(first, 4), (second, 4), (first, 4), (second, 4), (first, 2), (second, 2)]
    assert counts == [10, 10] and all(r.measured_ms > 0 for r in res.ranks)
    assert res.batches == 1 + 10 + 3  # warmup, the timed steps, each turn's untimed step: a fresh batch each
    assert not any("one after another" in n for n in res.notes)


def test_ranks_that_do_not_fit_together_are_timed_one_after_another_and_say_so(monkeypatch):
    turns, counts = _recorded_turns(monkeypatch)
    together = dryrun("table_wise", iters=6)
    apart = dryrun("table_wise", iters=6, max_bytes=2 * 1024 * 1024)  # each rank holds 1.25 MiB, both 2.5
    assert apart.schedule == "one rank after another"
    assert [n for n in apart.notes if "one after another" in n] == [
        "ranks measured one after another: all 2 held at once need 2.50 MiB of weights and optimizer state, over "
        "--max-bytes 2.00 MiB (raise it to measure them in turns, which a drifting machine speed moves less)"]
    ranks = [t[0] for t in turns[4:]]
    assert ranks[0] == ranks[1] != ranks[2] == ranks[3] and [t[1] for t in turns[4:]] == [4, 2, 4, 2]
    assert counts == [6, 6, 6, 6]
    for a, b in zip(together.ranks, apart.ranks):  # the same pieces, batches and bytes; only the order differs
        assert (a.lookups, a.weight_bytes, a.io_bytes) == (b.lookups, b.weight_bytes, b.io_bytes)
        assert b.measured_ms > 0
    asked = dryrun("table_wise", iters=6, turns=False)  # --one-rank-at-a-time
    assert asked.schedule == "one rank after another"
    assert [n for n in asked.notes if "one after another" in n] == [
        "ranks measured one after another (--one-rank-at-a-time)"]
    ranks = [t[0] for t in turns[8:]]
    assert ranks[0] == ranks[1] != ranks[2] == ranks[3] and len(ranks) == 4


def test_the_one_rank_at_a_time_flag_reaches_the_settings():
    from engine.dryrun.command import add_dryrun_arguments, settings_of

    p = argparse.ArgumentParser()
    add_dryrun_arguments(p)
    assert settings_of(p.parse_args(["c.json", "--plan", "p.json"])).turns is True
    assert settings_of(p.parse_args(["c.json", "--plan", "p.json", "--one-rank-at-a-time"])).turns is False


def test_memory_guard_refuses_a_rank_in_one_line(capsys, tmp_path):
    plan_file = write(tmp_path, plan_to_dict(plan(parse_config(tutorial("table_wise")))), "plan.json")
    err = one_line_error(capsys, ["dryrun", str(EXAMPLES / "tutorial_table_wise.json"), "--plan",
                                  str(plan_file), "--max-bytes", "1MiB"])
    # each rank holds a 4096x64 and a 1024x64 fp32 table
    assert "rank 0 needs" in err and "(1310720 bytes)" in err and "--scale-rows" in err


@pytest.mark.parametrize("flags,names", [
    (["--iters", "0"], "--iters"), (["--threads", "0"], "--threads"), (["--scale-rows", "1.5"], "--scale-rows"),
    (["--device", "gpu"], "--device"), (["--max-bytes", "lots"], "--max-bytes"), (["--bogus"], "--bogus"),
    (["--zipf-alpha", "-1"], "--zipf-alpha"),
])
def test_bad_flags_are_one_line_with_exit_2(capsys, tmp_path, flags, names):
    plan_file = write(tmp_path, plan_to_dict(plan(parse_config(tutorial("table_wise")))), "plan.json")
    err = one_line_error(capsys, ["dryrun", str(EXAMPLES / "tutorial_table_wise.json"), "--plan",
                                  str(plan_file), *flags])
    assert names in err


def test_cuda_request_without_cuda_is_one_line(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    plan_file = write(tmp_path, plan_to_dict(plan(parse_config(tutorial("table_wise")))), "plan.json")
    err = one_line_error(capsys, ["dryrun", str(EXAMPLES / "tutorial_table_wise.json"), "--plan",
                                  str(plan_file), "--device", "cuda"])
    assert "torch.cuda.is_available() is False" in err


def test_building_the_cli_does_not_import_torch():
    code = "import sys, engine.cli; engine.cli.build_parser(); print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "False", out.stderr


def test_docs_name_every_flag():
    docs = (ROOT / "docs" / "dryrun.md").read_text()
    help_text = cli("dryrun", "--help").stdout
    flags = set(re.findall(r"--[a-z][a-z-]+", help_text)) - {"--help"}
    assert flags >= {"--plan", "--json", "--device", "--backend", "--iters", "--max-bytes", "--scale-rows"}
    assert sorted(f for f in flags if f not in docs) == []


@pytest.mark.gpu
def test_cuda_dryrun_matches_cpu_lookups():
    import torch

    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    cpu = dryrun("row_wise", backend=Backend.TORCH)
    gpu = dryrun("row_wise", device=DryrunDevice.CUDA)
    assert gpu.device is DryrunDevice.CUDA
    assert [r.lookups for r in gpu.ranks] == [r.lookups for r in cpu.ranks]
    assert [r.measured_bytes for r in gpu.ranks] == [r.measured_bytes for r in cpu.ranks]
    assert all(r.measured_ms > 0 for r in gpu.ranks)
