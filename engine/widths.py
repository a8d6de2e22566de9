"""Column widths: TorchRec's column-wise block, the multiple of 4 fbgemm's fused kernels need, and the notes a plan
carries when a width explains what the user sees (a table kept whole on every rank, a column split into one piece).

fbgemm's fused kernels (SplitTableBatchedEmbeddingBagsCodegen, TorchRec's FUSED, FUSED_UVM, FUSED_UVM_CACHING)
assert that every piece's width is a multiple of 4; the dense kernel (DenseTableBatchedEmbeddingBagsCodegen,
which TorchRec runs data_parallel tables with) has no such rule.
"""

from __future__ import annotations

from typing import Optional

from engine import constants as C
from engine.types import ComputeKernel, Config, ShardingType, TablePlan

FUSED_WIDTH_MULTIPLE = 4  # fbgemm construct_split_state: "embedding_dim must be a multiple of 4"
# The smallest column-wise width the width search tries (FBGEMM rows are 4-float aligned; narrower
# shards pay the quarter-block penalty and repeat the input read once more per shard).
MIN_SEARCH_CW_DIM = 32
MAX_NAMED = 5  # tables named in one note


def runs_fused(cols: int) -> bool:
    """Whether fbgemm's fused kernels take a piece this many columns wide."""
    return cols % FUSED_WIDTH_MULTIPLE == 0


def cw_block(dim: int, min_partition: Optional[int]) -> int:
    """TorchRec 1.8's column-wise block (sharding_plan._find_base_dim): the first width from min_partition (128
    when absent) up that divides the dim and is a multiple of 4, else the whole dim."""
    lo = min_partition or C.MIN_CW_DIM
    return next((w for w in range(lo, dim) if dim % w == 0 and runs_fused(w)), dim)


def cw_widths(dim: int, min_partition: Optional[int], world_size: int) -> list[int]:
    """Widths the planner tries, widest first: the user's min_partition as TorchRec reads it when given, else
    TorchRec's default block plus the widths (multiples of 4, at least MIN_SEARCH_CW_DIM) that cut the dim into
    2..world_size pieces."""
    widths = {cw_block(dim, min_partition)}
    if min_partition is None:
        for k in range(2, min(world_size, dim // MIN_SEARCH_CW_DIM) + 1):
            if dim % k == 0 and runs_fused(dim // k) and dim // k >= MIN_SEARCH_CW_DIM:
                widths.add(dim // k)
    return sorted(widths, reverse=True)


def two_piece_width(dim: int) -> Optional[int]:
    """The widest min_partition that cuts the dim into more than one piece (None when no width can)."""
    return next((w for w in range(dim // 2, 0, -1) if dim % w == 0 and runs_fused(w)), None)


def dim_note(dim: int) -> Optional[str]:
    """What a dim that is not a multiple of 4 means for the plan (None when it is one)."""
    if not isinstance(dim, int) or dim < 1 or runs_fused(dim):
        return None
    down, up = dim - dim % FUSED_WIDTH_MULTIPLE, dim + FUSED_WIDTH_MULTIPLE - dim % FUSED_WIDTH_MULTIPLE
    near = f"{down} or {up}" if down else f"{up}"
    return (f"dim {dim} is not a multiple of 4, which fbgemm's fused kernels need: the table can only be "
            f"data_parallel (dense kernel, a full copy on every rank); a dim of {near} can be sharded")


def _named(names: list[str]) -> str:
    shown = ", ".join(names[:MAX_NAMED])
    return shown + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")


def plan_notes(cfg: Config, tables: dict[str, TablePlan]) -> list[str]:
    """Notes on the plan's widths: tables kept data_parallel for their dim, pieces a fused kernel cannot run
    (a plan made elsewhere), and column splits the user asked for that gave one piece."""
    dense, broken, single = [], [], []
    for t in cfg.tables:
        tp = tables.get(t.name)
        if tp is None:
            continue
        if tp.sharding_type is ShardingType.DATA_PARALLEL or tp.shards is None:
            if not runs_fused(t.embedding_dim):
                dense.append(f"{t.name} (dim {t.embedding_dim})")
            continue
        if tp.compute_kernel is not ComputeKernel.DENSE:
            bad = next((s.sizes[1] for s in tp.shards if s.sizes[0] and not runs_fused(s.sizes[1])), None)
            if bad is not None:
                broken.append(f"{t.name} ({bad} columns)")
        asked = cfg.constraint(t.name).sharding_types or ()
        if tp.sharding_type.has_width and tp.sharding_type in asked and len({s.offsets[1] for s in tp.shards}) == 1:
            single.append(single_piece_note(cfg, t.name, tp.sharding_type))
    notes = []
    if dense:
        notes.append(f"data_parallel with the dense kernel because fbgemm's fused kernels need a dim that is a "
                     f"multiple of 4: {_named(dense)}; a multiple of 4 lets the planner shard them")
    if broken:
        notes.append(f"will not run: fbgemm's fused kernels need piece widths that are multiples of 4, and "
                     f"{_named(broken)} {'has' if len(broken) == 1 else 'have'} a piece that is not; plan these "
                     "tables data_parallel (this planner does) or give them a dim that is a multiple of 4")
    return notes + single


def single_piece_note(cfg: Config, name: str, st: ShardingType) -> str:
    """Why a column split of the table gave one piece, and the min_partition that gives more."""
    dim = cfg.table(name).embedding_dim
    mp = cfg.constraint(name).min_partition
    given = mp if mp is not None else C.MIN_CW_DIM
    if given >= dim:
        why = f"min_partition {given}{'' if mp is not None else ' (the default)'} >= dim {dim}"
    else:
        why = f"no width from min_partition {given} up below dim {dim} divides it and is a multiple of 4"
    if len(cw_widths(dim, mp, cfg.topology.world_size)) > 1:
        why += " (the planner also tried narrower pieces: one piece cost less)"
    width = two_piece_width(dim)
    if width is None:
        cure = f"dim {dim} has no narrower width that is a multiple of 4 and divides it"
    else:
        cure = f"set constraints.{name}.min_partition to {width} for {dim // width} pieces"
    return f"{st.value} on {name} gave one piece because {why}; {cure}"
