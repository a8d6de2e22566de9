"""The Workload page's measuring reports its progress from the worker process, counted (rows read), never timed:
the real pool runs the real `workload` task on a sample of three chunks, and the server's Task holds each chunk's
progress as the worker reports it, ending at pass 2 of 2, 100% of the rows. The page's line: test_workload_browser
(Chromium) shows it while a larger sample is measured."""

from __future__ import annotations

import json
import time

import engine
from dashboard.serve import planpool, workloadwork

CONFIG = {"tables": [{"name": "t", "num_embeddings": 500, "embedding_dim": 8, "feature_names": ["a", "b"]}],
          "topology": {"world_size": 1, "batch_size": 8}}
ROWS = 150_000  # three chunks of the readers' 65,536 rows


def test_the_pool_task_reports_rows_read_from_its_worker():
    data = engine.generated_sample_bytes(engine.parse_config(CONFIG), ROWS, 1, "parquet")
    pool = planpool.Pool(size=1)
    seen: list[dict] = []
    try:
        task = pool.submit("workload", (json.dumps(CONFIG), data, "parquet", "big.parquet"), ("progress",),
                           "workload", "me")
        while task.live:
            p = task.progress
            if p is not None and (not seen or seen[-1] != p):
                seen.append(dict(p))
            time.sleep(0.005)
        measured, error = task.result(0)
    finally:
        pool.shutdown()
    assert error is None
    ids = sum(f["ids"] for f in measured["stats"]["features"].values())
    assert task.progress == {"pass": 2, "rows": ROWS, "total_rows": ROWS, "ids": ids}
    steps = [(p["pass"], p["rows"]) for p in seen]
    assert steps == sorted(set(steps)) and {r for _, r in steps} <= {65_536, 131_072, ROWS}
    assert all(p["total_rows"] == ROWS for p in seen)
    assert workloadwork.progress_text(task.progress) == \
        f"drawing its features (pass 2 of 2): 100% of {ROWS:,} rows read ({ids:,} ids so far)"
    assert workloadwork.progress_text({"pass": 1, "rows": 65_536, "total_rows": ROWS, "ids": 7}) == \
        f"measuring (pass 1 of 2): 43% of {ROWS:,} rows read (7 ids so far)"
    assert workloadwork.progress_text(None) == ""
