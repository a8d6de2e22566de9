"""A real 2-rank gloo validation run replaying a sample's ids (`--ids`), recorded by `python -m db validate`: the
result and the stored run say which ids were used, and each rank trained on its own rows of each global batch
(counted here on the sample). Rank 0 holds a large table looked up 40 times a sample, rank 1 a tiny one looked up
once. Bad samples are refused before anything starts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from db.store import Store
from tests.factories import write
from tests.validate.conftest import run_cli, run_db_cli

BATCH = 256  # per rank
GLOBAL = 2 * BATCH
SAMPLE_ROWS = 3 * GLOBAL + 100  # three whole global batches; the 5 steps cycle through them
BIG, SMALL = (100_000, 64, 40), (100, 8, 1)  # rows, dim, ids per sample
CONFIG = {
    "tables": [{"name": "big", "num_embeddings": BIG[0], "embedding_dim": BIG[1], "feature_names": ["big_f"]},
               {"name": "small", "num_embeddings": SMALL[0], "embedding_dim": SMALL[1], "feature_names": ["small_f"]}],
    "constraints": {"big": {"pooling_factors": [BIG[2]]}, "small": {"pooling_factors": [SMALL[2]]}},
    "topology": {"world_size": 2, "local_world_size": 2, "compute_device": "cpu", "batch_size": BATCH},
}
PLAN = {"plan": {
    "big": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [0],
            "shards": [{"offsets": [0, 0], "sizes": [BIG[0], BIG[1]], "rank": 0}]},
    "small": {"sharding_type": "table_wise", "compute_kernel": "fused", "ranks": [1],
              "shards": [{"offsets": [0, 0], "sizes": [SMALL[0], SMALL[1]], "rank": 1}]}}}


def sample_arrays(seed: int = 11) -> dict[str, np.ndarray]:
    """Uneven bags (empty ones included) and ids past num_embeddings (folded by TorchRec)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, (rows, _, pf) in (("big_f", BIG), ("small_f", SMALL)):
        lengths = rng.integers(0, 2 * pf + 1, SAMPLE_ROWS).astype(np.int64)
        out[f"{name}.lengths"] = lengths
        out[f"{name}.values"] = rng.integers(0, rows + rows // 2, int(lengths.sum())).astype(np.int64)
    return out


@pytest.fixture(scope="module")
def heavy_run(tmp_path_factory) -> tuple[Path, dict, str]:
    """(out-dir, the --json result, the database URL) of one run with --ids."""
    d = tmp_path_factory.mktemp("ids")
    sample = d / "sample.npz"
    np.savez(sample, **sample_arrays())
    url = f"sqlite:///{d / 'runs.db'}"
    p = run_db_cli(url, "validate", str(write(d, CONFIG)), "--plan", str(write(d, PLAN, "plan.json")), "--json",
                   "--iters", "4", "--warmup", "1", "--ids", str(sample), "--out-dir", str(d / "run"))
    assert p.returncode == 0, p.stderr[-4000:]
    return d / "run", json.loads(p.stdout), url


def test_the_result_and_the_stored_run_say_which_ids_were_used(heavy_run):
    out_dir, result, url = heavy_run
    ids = {"source": "sample", "file": "sample.npz", "bytes": (out_dir.parent / "sample.npz").stat().st_size,
           "rows_used": 3 * GLOBAL, "batches": 3, "cycled": True}
    assert result["status"] == "succeeded" and result["ids"] == ids
    store = Store(url)
    (plan,) = store.list_plans()
    (run,) = store.runs_for_plan(plan.token)
    assert run.device_info["ids"] == ids


def test_each_rank_trains_on_its_rows_of_each_global_batch(heavy_run):
    out_dir, _, _ = heavy_run
    arrays = sample_arrays()
    for rank in (0, 1):
        data = json.loads((out_dir / "ranks" / f"rank{rank}.json").read_text())
        rows = slice(rank * BATCH, (rank + 1) * BATCH)  # its share of step 0's global batch, every feature
        assert data["batch_ids"] == sum(int(arrays[f"{f}.lengths"][rows].sum()) for f in ("big_f", "small_f"))
        assert data["ids"]["source"] == "sample"


def test_a_bad_sample_is_refused_before_anything_starts(tmp_path):
    cfg, plan = write(tmp_path, CONFIG), write(tmp_path, PLAN, "plan.json")
    arrays = sample_arrays()
    arrays["small_f.values"][5] = -3
    bad = tmp_path / "bad.npz"
    np.savez(bad, **arrays)
    p = run_cli("validate", str(cfg), "--plan", str(plan), "--ids", str(bad), "--out-dir", str(tmp_path / "run"))
    row = int(np.searchsorted(np.cumsum(arrays["small_f.lengths"]), 5, side="right"))
    assert p.returncode == 2 and p.stderr.count("\n") == 1, p.stderr
    assert f"feature 'small_f' row {row}: id -3 is negative" in p.stderr
    assert not (tmp_path / "run").exists()
    renamed = {k.replace("small_f", "other"): v for k, v in sample_arrays().items()}
    np.savez(tmp_path / "renamed.npz", **renamed)
    p = run_cli("validate", str(cfg), "--plan", str(plan), "--ids", str(tmp_path / "renamed.npz"))
    assert p.returncode == 2 and "has no column for feature 'small_f'" in p.stderr and p.stderr.count("\n") == 1


def test_each_rank_records_its_own_embedding_time_beside_the_step(heavy_run):
    """Rank 0 looks up 40 ids of 64 floats per sample, rank 1 one id of 8: about 300x the bytes. The step times are
    synchronised (each rank waits for the other in the all-to-alls); the embedding times are not."""
    _, result, url = heavy_run
    heavy, light = result["ranks"]
    for r in (heavy, light):
        assert r["embedding_forward_ms"] > 0 and r["embedding_backward_ms"] > 0 and r["embedding_optimizer_ms"] >= 0
        assert 0 < r["embedding_ms"] < r["iteration_ms"]
    assert heavy["embedding_ms"] > 1.5 * light["embedding_ms"], (heavy, light)
    assert heavy["embedding_backward_ms"] > light["embedding_backward_ms"], (heavy, light)
    store = Store(url)
    (plan,) = store.list_plans()
    (run,) = store.runs_for_plan(plan.token)
    stored = {(m.rank, m.name): (m.value, m.unit) for m in store.metrics(run.id)}
    for r in (heavy, light):
        assert stored[(r["rank"], "embedding_ms")] == (r["embedding_ms"], "ms")


def test_the_job_passes_the_sample_to_every_rank_and_keeps_it_in_its_spec(tmp_path):
    """The ranks get --ids with the absolute path (slurm and script jobs read job.json on the nodes)."""
    from engine.validate.types import Job

    job = Job(out_dir=tmp_path, nproc=2, ids=str(tmp_path / "sample.npz"))
    args = job.worker_args()
    assert args[args.index("--ids") + 1] == str(tmp_path / "sample.npz")
    job.write_spec()
    assert Job.read_spec(tmp_path) == job
    assert "--ids" not in Job(out_dir=tmp_path, nproc=2).worker_args()
