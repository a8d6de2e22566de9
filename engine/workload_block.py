"""A table's `workload` block (constraints.TABLE.workload): read and checked at the door, written back, and the miss
rate of a cache read off its miss-ratio curve.

```
"workload": {"from": {"file": "sample.parquet", "rows": 20000, "modified": "2026-11-27T00:10:00Z"},
             "miss_ratio_curve": [{"cache_rows": 10, "lru_miss_rate": 0.61}, ...],
             "miss_ratio_method": "exact", "batch_size": 512, "unique_rows": 9000,
             "unique_rows_per_batch": {"mean": 1200.5, "p99": 1301}, "zipf_exponent": 1.02,
             "pooling_factors": [3.1]}
```
`python -m engine stats CONFIG SAMPLE --apply OUT.json` writes it (docs/stats.md); only `from` and
`miss_ratio_curve` are required.
"""

from __future__ import annotations

import math
from typing import Any

from engine import limits as L
from engine.readers import read_float, read_int, read_object, read_str
from engine.errors import ConfigError
from engine.types import TableConfig, Workload

FIELDS = ("from", "miss_ratio_curve", "miss_ratio_method", "batch_size", "unique_rows", "unique_rows_per_batch",
          "zipf_exponent", "pooling_factors")
FROM_FIELDS = ("file", "rows", "modified")
METHODS = ("exact", "shards")


def _text(v: Any, path: str) -> str:
    v = read_str(v, path)
    if not v.isprintable() or len(v) > L.MAX_NAME_CHARS:
        raise ConfigError(path, f"must be one line of at most {L.MAX_NAME_CHARS} characters")
    return v


def _curve(v: Any, path: str, rows: int) -> tuple[tuple[int, float], ...]:
    if not isinstance(v, list) or not v:
        raise ConfigError(path, "must be a non-empty list of {\"cache_rows\", \"lru_miss_rate\"} points, as "
                          "`python -m engine stats --apply` writes it")
    out: list[tuple[int, float]] = []
    for k, point in enumerate(v):
        at = f"{path}[{k}]"
        d = read_object(point, at, ("cache_rows", "lru_miss_rate"))
        for key in ("cache_rows", "lru_miss_rate"):
            if key not in d:
                raise ConfigError(f"{at}.{key}", "is required")
        c = read_int(d["cache_rows"], f"{at}.cache_rows", 1, rows)
        r = read_float(d["lru_miss_rate"], f"{at}.lru_miss_rate", 0.0, 1.0)
        if out and c <= out[-1][0]:
            raise ConfigError(f"{at}.cache_rows", f"{c} must be above the previous point's {out[-1][0]} (the "
                              "points go from the smallest cache to the largest)")
        if out and r > out[-1][1]:
            raise ConfigError(f"{at}.lru_miss_rate", f"{r:g} is above the smaller cache's {out[-1][1]:g}: an LRU "
                              "cache misses no more when it grows; measure the curve again with python -m engine "
                              "stats")
        out.append((c, r))
    return tuple(out)


def read(v: Any, path: str, table: TableConfig) -> Workload:
    """The block checked against its table (cache sizes at most num_embeddings); ConfigError names the field."""
    d = read_object(v, path, FIELDS)
    for key in ("from", "miss_ratio_curve"):
        if key not in d:
            raise ConfigError(f"{path}.{key}", "is required (python -m engine stats --apply writes it)")
    src = read_object(d["from"], f"{path}.from", FROM_FIELDS)
    for key in FROM_FIELDS:
        if key not in src:
            raise ConfigError(f"{path}.from.{key}", "is required: the sample's file name, its rows and its date")
    method = d.get("miss_ratio_method", "exact")
    if method not in METHODS:
        raise ConfigError(f"{path}.miss_ratio_method", f"must be one of {', '.join(METHODS)}, got {method!r}")
    per_batch = read_object(d.get("unique_rows_per_batch", {}), f"{path}.unique_rows_per_batch", ("mean", "p99"))
    pf = d.get("pooling_factors")
    if pf is not None and (not isinstance(pf, list) or len(pf) != len(table.feature_names)):
        raise ConfigError(f"{path}.pooling_factors", f"must list one number per feature ({len(table.feature_names)})")

    def opt(key: str, value: Any, lo: float, hi: float = math.inf, whole: bool = False) -> Any:
        if value is None:
            return None
        at = f"{path}.{key}"
        if whole:
            return read_int(value, at, int(lo), None if hi == math.inf else int(hi))
        return read_float(value, at, lo, hi)

    return Workload(
        miss_ratio_curve=_curve(d["miss_ratio_curve"], f"{path}.miss_ratio_curve", table.num_embeddings),
        source_file=_text(src["file"], f"{path}.from.file"),
        source_rows=read_int(src["rows"], f"{path}.from.rows", 0),
        source_modified=_text(src["modified"], f"{path}.from.modified"),
        miss_ratio_method=method,
        batch_size=opt("batch_size", d.get("batch_size"), 1, whole=True),
        unique_rows=opt("unique_rows", d.get("unique_rows"), 0, table.num_embeddings, whole=True),
        unique_rows_per_batch_mean=opt("unique_rows_per_batch.mean", per_batch.get("mean"), 0),
        unique_rows_per_batch_p99=opt("unique_rows_per_batch.p99", per_batch.get("p99"), 0),
        zipf_exponent=opt("zipf_exponent", d.get("zipf_exponent"), 0),
        pooling_factors=None if pf is None else tuple(
            read_float(x, f"{path}.pooling_factors[{k}]") for k, x in enumerate(pf)),
    )


def to_dict(w: Workload) -> dict:
    """The block as a config file writes it (read(to_dict(w)) == w)."""
    out: dict[str, Any] = {
        "from": {"file": w.source_file, "rows": w.source_rows, "modified": w.source_modified},
        "miss_ratio_curve": [{"cache_rows": c, "lru_miss_rate": r} for c, r in w.miss_ratio_curve],
        "miss_ratio_method": w.miss_ratio_method,
    }
    if w.batch_size is not None:
        out["batch_size"] = w.batch_size
    if w.unique_rows is not None:
        out["unique_rows"] = w.unique_rows
    per_batch = {k: v for k, v in (("mean", w.unique_rows_per_batch_mean), ("p99", w.unique_rows_per_batch_p99))
                 if v is not None}
    if per_batch:
        out["unique_rows_per_batch"] = per_batch
    if w.zipf_exponent is not None:
        out["zipf_exponent"] = w.zipf_exponent
    if w.pooling_factors is not None:
        out["pooling_factors"] = list(w.pooling_factors)
    return out
