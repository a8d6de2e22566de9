"""`python -m engine dryrun --ids SAMPLE`: a real dry-run (torch backend, CPU, tiny tables) replaying a generated
sample's ids, checked against a direct count on the sample's rows as pyarrow reads them; and the refusals."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest

from engine import atomicfile
from engine.cli import main
from engine.config import parse_config
from engine.dryrun import DryrunSettings, run_dryrun
from engine.planfile import parse_plan
from engine.stats.generate import to_bytes
from tests.engine.test_stats import CONFIG, PLAN
from tests.factories import ROOT, write

GLOBAL = 2 * 32  # world_size x batch_size of CONFIG: rows per step
ROWS = 2 * GLOBAL + 20  # two whole global batches, and 20 rows no step uses


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("ids")
    cfg = parse_config(CONFIG)
    sample = d / "sample.parquet"
    atomicfile.write_bytes(sample, to_bytes(cfg, ROWS, seed=3, fmt="parquet"))
    return write(d, CONFIG), write(d, PLAN, "plan.json"), sample, pq.read_table(sample).to_pydict()


def cli(*args):
    return subprocess.run([sys.executable, "-m", "engine", *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=300)


def folded(columns: dict, features: list[str], rows: range, num: int) -> list[int]:
    """A table's ids in the given rows, sample by sample, folded as TorchRec folds them."""
    return [i % num for r in rows for f in features for i in columns[f][r]]


def test_dryrun_replays_the_sample_rows_in_order_and_cycles(files):
    config, plan, sample, columns = files
    proc = cli("dryrun", config, "--plan", plan, "--ids", sample, "--backend", "torch", "--json", "--iters", 3,
               "--warmup", 1)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    # 4 steps, 2 whole global batches in the sample: they are read, and the steps cycle through them
    assert out["ids"] == {"source": "sample", "file": "sample.parquet", "bytes": sample.stat().st_size,
                          "rows_used": 2 * GLOBAL, "batches": 2, "cycled": True}
    assert any("cycle" in n for n in out["notes"])
    used = range(2 * GLOBAL)
    for t in CONFIG["tables"]:
        ids = folded(columns, t["feature_names"], used, t["num_embeddings"])
        assert out["ids_seen"][t["name"]] == {"lookups": len(ids), "distinct_rows": len(set(ids))}, t["name"]
    # what each rank's pieces look up in step 0, counted on the sample: t0 row-wise (rows [0, 500) on rank 0,
    # [500, 1000) on rank 1) sees the global batch in its rows, t1 data-parallel its rank's 32 rows, t2
    # column-wise every id of the global batch
    step0 = range(GLOBAL)
    for rank in (0, 1):
        t0 = [i for i in folded(columns, ["a", "b"], step0, 1000) if rank * 500 <= i < (rank + 1) * 500]
        t1 = folded(columns, ["c"], range(rank * 32, (rank + 1) * 32), 50)
        t2 = folded(columns, ["d"], step0, 200)
        assert out["ranks"][rank]["lookups"] == len(t0) + len(t1) + len(t2)
        assert out["ranks"][rank]["measured_ms"] > 0
        # the rank's own embedding work, under the name validation runs give it too
        assert out["ranks"][rank]["embedding_ms"] == out["ranks"][rank]["measured_ms"]


def test_batches_caps_the_rows_read_and_a_long_sample_does_not_cycle(files):
    config, plan, sample, columns = files
    cfg, tables = parse_config(CONFIG), parse_plan(PLAN, parse_config(CONFIG))
    one = run_dryrun(cfg, tables, DryrunSettings(backend="torch", iters=1, warmup=0, ids=str(sample), batches=1))
    assert one.ids == {"source": "sample", "file": "sample.parquet", "bytes": sample.stat().st_size,
                       "rows_used": GLOBAL, "batches": 1, "cycled": False}
    ids = folded(columns, ["d"], range(GLOBAL), 200)
    assert one.ids_seen["t2"] == {"lookups": len(ids), "distinct_rows": len(set(ids))}
    # no warmup, one turn: its untimed step and its timed one, two batches, and the sample holds two
    two = run_dryrun(cfg, tables, DryrunSettings(backend="torch", iters=1, warmup=0, ids=str(sample)))
    assert (two.ids["batches"], two.ids["cycled"], two.batches) == (2, False, 2)
    three = run_dryrun(cfg, tables, DryrunSettings(backend="torch", iters=1, warmup=1, ids=str(sample)))
    assert (three.ids["batches"], three.ids["cycled"], three.batches) == (2, True, 2)  # it ran out
    synthetic = run_dryrun(cfg, tables, DryrunSettings(backend="torch", iters=1, warmup=0, seed=5))
    assert synthetic.as_dict()["ids"] == {"source": "synthetic", "seed": 5, "distribution": "config",
                                          "zipf_alpha": None, "batches": 2}
    assert "ids_seen" not in synthetic.as_dict()


def refusal(capsys, argv) -> str:
    with pytest.raises(SystemExit) as e:
        raise SystemExit(main(argv))
    err = capsys.readouterr().err
    assert e.value.code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    return err


def test_bad_samples_are_refused_in_one_line_naming_the_feature_and_row(files, tmp_path, capsys):
    config, plan, _, _ = files
    base = ["dryrun", str(config), "--plan", str(plan), "--backend", "torch", "--ids"]
    header = "a,b,c,d\n"
    good = "1 2,3,4,5\n" * 40
    wrong = write(tmp_path, "a,b,c,e\n" + good, "wrong.csv")
    assert "feature 'd'" in refusal(capsys, base + [str(wrong)])
    negative = write(tmp_path, header + good + "1,2 -7,3,4\n" + good, "negative.csv")
    err = refusal(capsys, base + [str(negative)])
    assert "feature 'b' row 40" in err and "negative" in err
    words = write(tmp_path, header + good + "1,2,x,4\n" + good, "words.csv")
    assert "feature 'c' row 40" in refusal(capsys, base + [str(words)])
    short = write(tmp_path, header + "1,2,3,4\n" * 10, "short.csv")
    err = refusal(capsys, base + [str(short)])
    assert "has 10 rows; one step needs 64" in err
    assert "does not exist" in refusal(capsys, base + [str(tmp_path / "missing.parquet")])


def test_db_dryrun_stores_the_ids_block_and_each_rank_embedding_time(files, tmp_path):
    config, plan, sample, _ = files
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    proc = subprocess.run([sys.executable, "-m", "db", "dryrun", str(config), "--plan", str(plan), "--ids", str(sample),
                           "--backend", "torch", "--json", "--iters", "1", "--warmup", "0"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), "DATABASE_URL": url})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    from db.store import Store

    store = Store(url)
    (summary,) = store.list_plans()
    (run,) = store.runs_for_plan(summary.token)
    assert run.device_info["ids"] == out["ids"] == {"source": "sample", "file": "sample.parquet",
                                                     "bytes": sample.stat().st_size, "rows_used": 2 * GLOBAL,
                                                     "batches": 2, "cycled": False}
    stored = {(m.rank, m.name): m.value for m in store.metrics(run.id)}
    for r in out["ranks"]:
        assert stored[(r["rank"], "embedding_ms")] == stored[(r["rank"], "step_ms")] == r["measured_ms"]
