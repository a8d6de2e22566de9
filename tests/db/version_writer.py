"""A writer process for the version-race test: saves K plans, each of its own config, under one config name.

python tests/db/version_writer.py URL WORKER K NAME START_AT_EPOCH
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from db.store import Store
from tests.db.storetest import load_example, make_plan


def batch_size(worker: int, i: int) -> int:
    return 1000 + worker * 100 + i  # a different config for every save of every writer


def main(url: str, worker: int, k: int, name: str, start_at: float) -> None:
    work = []
    for i in range(k):  # planned before the start, so that the saves race
        cfg = load_example()
        cfg["topology"]["batch_size"] = batch_size(worker, i)
        work.append((cfg, make_plan(cfg)))
    same = load_example()
    store = Store(url)
    time.sleep(max(0.0, start_at - time.time()))  # every writer starts at once
    store.save_config(same, f"{name}-same")  # one content from every writer: one version in all
    for i, (cfg, plan) in enumerate(work):
        store.save_plan(cfg, plan, label=f"{worker}-{i}", config_name=name)
    store.close()


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
