"""Virtual tables (TorchRec 1.8's BaseEmbeddingConfig use_virtual_table, total_num_buckets and
virtual_table_eviction_policy): the eviction policy block, the checks TorchRec applies to the buckets, and the
bucketed row_wise cut TorchRec's planner makes (sharding_plan._calculate_rw_shard_sizes_and_offsets with num_buckets,
which its kernel's _get_sharded_local_buckets_for_zero_collision reads back rank by rank).
"""

from __future__ import annotations

import math
from typing import Any, NamedTuple

import numpy as np

from engine.errors import ConfigError
from engine.readers import read_bool, read_float, read_int, read_name, type_name

_INT, _FLOAT, _BOOL, _MAP = "int", "float", "bool", "mapping"
_TRIGGER = ("training_id_eviction_trigger_count", _INT)
_TTL = ("eviction_ttl_mins", _INT)
# TorchRec 1.8's policy classes (torchrec/modules/embedding_configs.py) by our type name: (class, its fields and
# kinds); the base class's meta_header_len, embedding_dim and initialized are TorchRec's own state, not options
POLICIES: dict[str, tuple[str, tuple[tuple[str, str], ...]]] = {
    "count_based": ("CountBasedEvictionPolicy", (_TRIGGER, ("eviction_threshold", _INT), ("decay_rate", _FLOAT),
                                                 ("inference_eviction_threshold", _INT))),
    "feature_score_based": ("FeatureScoreBasedEvictionPolicy", (
        ("decay_rate", _FLOAT), _TRIGGER, ("training_id_keep_count", _INT), _TTL,
        ("max_inference_id_num_per_rank", _INT), ("inference_eviction_feature_score_threshold", _FLOAT),
        ("inference_eviction_ttl_mins", _INT), ("feature_score_mapping", _MAP), ("feature_score_default_value", _FLOAT),
        ("enable_auto_feature_score_collection", _BOOL), ("enable_eviction", _BOOL))),
    "timestamp_based": ("TimestampBasedEvictionPolicy", (_TRIGGER, _TTL, ("inference_eviction_ttl_mins", _INT),
                                                         ("max_inference_id_num_per_rank", _INT))),
    "count_timestamp_mixed": ("CountTimestampMixedEvictionPolicy", (
        _TRIGGER, ("eviction_threshold", _INT), ("decay_rate", _FLOAT), _TTL, ("inference_eviction_threshold", _INT),
        ("inference_eviction_ttl_mins", _INT))),
    "feature_l2_norm_based": ("FeatureL2NormBasedEvictionPolicy", (
        _TRIGGER, ("eviction_threshold", _FLOAT), ("inference_eviction_threshold", _FLOAT))),
    "no_eviction": ("NoEvictionPolicy", ()),
}
POLICY_TYPES = {cls: kind for kind, (cls, _) in POLICIES.items()}  # a pasted snippet's class: our type name
MAX_COUNT = 2**62  # counts, thresholds and minutes: non-negative int64


class EvictionPolicy(NamedTuple):
    """A virtual table's eviction policy: its type (a key of POLICIES) and the fields given, in declaration order
    (the rest take TorchRec's defaults)."""

    type: str
    values: tuple[tuple[str, Any], ...] = ()


def _value(kind: str, v: Any, path: str) -> Any:
    if kind == _INT:
        return read_int(v, path, 0, MAX_COUNT)
    if kind == _FLOAT:
        return read_float(v, path, 0.0, math.inf)
    if kind == _BOOL:
        return read_bool(v, path)
    if not isinstance(v, dict):  # feature_score_mapping: feature name -> score
        raise ConfigError(path, f"must be an object of feature names and scores, got {type_name(v)}")
    return tuple((read_name(k, f"{path}.{k}"), read_float(x, f"{path}.{k}", 0.0, math.inf)) for k, x in v.items())


def read_policy(raw: Any, path: str) -> EvictionPolicy:
    """The block {"type": ..., field: value, ...}, each field checked; one line naming the field otherwise."""
    if not isinstance(raw, dict):
        raise ConfigError(path, f'must be an object such as {{"type": "no_eviction"}}, got {type_name(raw)}')
    kind = raw.get("type")
    if kind not in POLICIES:
        raise ConfigError(f"{path}.type", f"must be one of {', '.join(POLICIES)} (TorchRec 1.8's eviction policies), "
                          f"got {kind!r}")
    fields = dict(POLICIES[kind][1])
    unknown = [k for k in raw if k != "type" and k not in fields]
    if unknown:
        raise ConfigError(f"{path}.{unknown[0]}", f"is not a field of {kind}; its fields: "
                          f"{', '.join(fields) or 'none'}")
    return EvictionPolicy(kind, tuple((k, _value(fields[k], raw[k], f"{path}.{k}")) for k in fields if k in raw))


def policy_to_dict(p: EvictionPolicy) -> dict:
    return {"type": p.type, **{k: dict(v) if isinstance(v, tuple) else v for k, v in p.values}}


def keywords(table: Any) -> dict[str, Any]:
    """The virtual-table keywords of a table's EmbeddingBagConfig as plain literals, {} for a table not declared
    virtual: the policy as (TorchRec class name, its fields). The exports and engine.torchrec_compat read these."""
    if not table.use_virtual_table:
        return {}
    out: dict[str, Any] = {"use_virtual_table": True}
    if table.total_num_buckets is not None:
        out["total_num_buckets"] = table.total_num_buckets
    p = table.virtual_table_eviction_policy
    if p is not None:
        fields = policy_to_dict(p)
        del fields["type"]
        out["virtual_table_eviction_policy"] = (POLICIES[p.type][0], fields)
    return out


def keywords_text(table: Any) -> str:
    """keywords() as TorchRec's call reads: use_virtual_table=True, total_num_buckets=64, ...=NoEvictionPolicy()."""
    parts = []
    for k, v in keywords(table).items():
        if isinstance(v, tuple):
            v = f"{v[0]}({', '.join(f'{f}={x!r}' for f, x in v[1].items())})"
        else:
            v = repr(v)
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def buckets_of(table: Any) -> int | None:
    """The buckets TorchRec's planner cuts row_wise by: total_num_buckets of a virtual table (its enumerator's
    _get_num_buckets reads it for those only), else None."""
    return table.total_num_buckets if table.use_virtual_table else None


def bucket_rows(rows: int, buckets: int, parts: int) -> np.ndarray:
    """TorchRec's bucketed row_wise cut: whole buckets of rows / buckets rows, buckets // parts per rank and one
    more on the first buckets % parts ranks."""
    q, extra = divmod(buckets, parts)
    return (rows // buckets) * (q + (np.arange(parts) < extra)).astype(np.int64)


def check_buckets(tables: tuple, constraints: dict, topology: Any) -> None:
    """TorchRec 1.8's rules for a virtual table's buckets, at the door: whole buckets of equal rows (its planner's
    and its kernel's assertion) and, where row_wise may be planned, at least one bucket per rank of the (2D:
    group's) world (its calculate_shard_sizes_and_offsets' ValueError)."""
    from engine.geometry import DEFAULT_SHARDING_TYPES
    from engine.replicas import group_topology
    from engine.types import ShardingType

    ranks = group_topology(topology).world_size
    for i, t in enumerate(tables):
        b = buckets_of(t)
        if b is None:
            continue
        path, rows = f"tables[{i}].total_num_buckets", t.num_embeddings
        if rows % b:
            raise ConfigError(path, f"{b:,} buckets do not cut the {rows:,} rows of table {t.name!r} into whole "
                              f"buckets (TorchRec 1.8 asserts num_embeddings % total_num_buckets == 0): give a "
                              f"divisor of num_embeddings such as {math.gcd(rows, b):,}, or make num_embeddings a "
                              f"multiple of {b:,} such as {-(-rows // b) * b:,}")
        c = constraints.get(t.name)
        types = (c.sharding_types if c is not None else None) or DEFAULT_SHARDING_TYPES[topology.compute_device]
        if b < ranks and ShardingType.ROW_WISE in types:
            raise ConfigError(path, f"{b:,} buckets are fewer than the {ranks:,} ranks of a row_wise split of table "
                              f"{t.name!r}, each of which needs one (TorchRec 1.8 refuses it): give at least "
                              f"{ranks:,} (dividing its {rows:,} rows), or leave row_wise out of "
                              f"constraints.{t.name}.sharding_types")


def bucket_problem(table: Any, shards: tuple, world_size: int) -> str | None:
    """What is wrong with a plan file's row_wise shards of a bucketed virtual table, in words (None: nothing): TorchRec
    1.8's kernel reads rank r's buckets off r itself, so the shard on rank r must hold exactly those rows."""
    b = buckets_of(table)
    if b is None:
        return None
    if b < world_size:
        return (f"cannot cut table {table.name!r}'s {b:,} buckets (tables[].total_num_buckets) over {world_size:,} "
                f"ranks, one at least on each: plan it another way, or give it {world_size:,} buckets or more")
    rows = bucket_rows(table.num_embeddings, b, world_size)
    starts = np.concatenate([[0], np.cumsum(rows)[:-1]])
    for i, s in enumerate(shards):
        want = (int(starts[s.rank]), 0), (int(rows[s.rank]), table.embedding_dim)
        if (tuple(s.offsets), tuple(s.sizes)) != want:
            return (f"shard {i} on rank {s.rank} holds rows {s.offsets[0]:,} to {s.offsets[0] + s.sizes[0]:,}, but "
                    f"rank {s.rank}'s buckets of table {table.name!r} ({b:,} in all, as total_num_buckets cuts them "
                    f"for TorchRec 1.8) are rows {want[0][0]:,} to {want[0][0] + want[1][0]:,}: cut row_wise shards "
                    "as the planner does (offsets {}, sizes {})".format(list(want[0]), list(want[1])))
    return None
