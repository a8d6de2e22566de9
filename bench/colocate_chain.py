"""A config of N tables chained by colocate (t0 with t1, t1 with t2, ...): one co-located group of N tables, the
case of issue 23 item 7. `python -m bench.colocate_chain 10000 > chain.json`, then time
`python -m engine plan chain.json --no-search --time-budget 1` (bench/results/colocate_chain.md)."""

from __future__ import annotations

import json
import sys


def chain(n: int, world: int = 8) -> dict:
    return {"tables": [{"name": f"t{i}", "num_embeddings": 1000 + i, "embedding_dim": 16} for i in range(n)],
            "constraints": {f"t{i}": {"colocate": [f"t{i + 1}"]} for i in range(n - 1)},
            "topology": {"world_size": world, "local_world_size": world}}


if __name__ == "__main__":
    json.dump(chain(int(sys.argv[1]) if len(sys.argv) > 1 else 10_000), sys.stdout)
