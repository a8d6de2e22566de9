"""A writer process for the concurrency tests: saves plans, runs and metrics as fast as it can.

python tests/db/concurrent_writer.py URL WORKER N SHARED_RUN_ID START_AT_EPOCH
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from db.store import Store
from tests.db.storetest import load_example, sample


def main(url: str, worker: str, n: int, shared_run: int, start_at: float) -> None:
    store = Store(url)
    cfg, plan = sample()
    time.sleep(max(0.0, start_at - time.time()))  # every writer starts at once
    for i in range(n):
        token = store.save_plan(cfg, plan, label=f"{worker}-{i}", config_name="shared")
        run = store.create_run(token, "dryrun", "fbgemm", "cpu")
        store.add_metrics(run, [(0, "step_ms", float(i), "ms"), (1, "step_ms", float(i), "ms")])
        store.update_run(run, status="succeeded")
        store.update_run(shared_run, log_append=f"{worker}-{i}\n")
        store.add_metrics(shared_run, [(0, "progress", float(i), "count")])
        changed = load_example()  # a new version of one config name, racing the other writer
        changed["topology"]["batch_size"] = 1000 + i * 10 + (0 if worker == "a" else 5)
        store.save_config(changed, "edited")
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
