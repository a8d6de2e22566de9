"""The ranges every numeric field of a config and a plan must lie in (README's tables list them).

Chosen so that every figure the engine computes stays an exact int64 or a finite double, and so that memory
stays bounded: per-table bytes below 2**50 and their sum below 2**56 keep every per-rank byte count far
from int64's 2**63, even with Adam's two moments; bandwidths between 1e3 and 1e12 bytes/ms keep every time
finite; tables x ranks is capped because the planner holds per-rank figures for each table it places.
"""

from __future__ import annotations

MAX_TABLES: int = 100_000
MAX_WORLD_SIZE: int = 16_384
MAX_TABLE_RANK_PAIRS: int = 16_777_216  # tables x world_size: 1,024 tables on 16,384 ranks, 10,000 on 1,677
MAX_NUM_EMBEDDINGS: int = 2**40  # rows per table (1.1e12)
MAX_EMBEDDING_DIM: int = 2**16  # columns per table
MAX_TABLE_BYTES: int = 2**50  # one table's weights (1 PiB)
MAX_TOTAL_BYTES: int = 2**56  # all tables' weights together
MAX_FEATURES_PER_TABLE: int = 1_024
MAX_NAME_CHARS: int = 256  # table and feature names; no control characters
MAX_BATCH_SIZE: int = 2**24  # samples per rank per step
MAX_COMPUTE_SCALE: float = 100.0  # a table's measured / estimated compute (engine.table_costs)
MAX_COLUMN_EXPONENT: float = 1.0  # a column piece costs (its column share)^exponent of its table: never under its share
MAX_POOLING_FACTOR: float = 1e6  # mean ids per sample and feature
MAX_NUM_POOLINGS: float = 1e6
MAX_CAP_BYTES: int = 2**50  # hbm_cap, ddr_cap per rank
MIN_BW: float = 1e3  # bytes/ms (1 MB/s)
MAX_BW: float = 1e12  # bytes/ms (1 PB/s)
MAX_TERM_WORK: float = 1e9  # bytes of work per unit of a CPU cost term (a profile's terms, engine.fields.PROFILE_TERMS)
MAX_SHARDS_PER_TABLE: int = 65_536
MAX_MOVE_BYTES: int = 2**63 - 1  # replan's byte limit: an int64, above any plan's bytes (weights below 2**56)
MAX_TABLE_IDS_PER_STEP: int = 2**40  # one table's ids in one step over all ranks (batch x pooling x ranks)
MAX_TABLE_OUTPUTS_PER_STEP: int = 2**44  # one table's pooled output elements in one step over all ranks
MAX_IDS_PER_STEP: int = 2**44  # all tables together
MAX_OUTPUTS_PER_STEP: int = 2**48  # all tables together: at most 1 PiB of fp32 outputs
MAX_SAMPLE_BYTES: int = 16 * 2**30  # a sample of ids for `python -m engine stats` (16 GiB: about 10^9 ids in Parquet)
