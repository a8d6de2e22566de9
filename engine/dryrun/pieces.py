"""Which pieces of which tables each rank holds under a plan, and the memory they will take.

`--scale-rows F` shrinks every table to floor(rows x F) rows; shard boundaries scale with it, so row-wise
shards still tile their table.
"""

from __future__ import annotations

from engine.types import Config, DataType, Optimizer, ShardingType, TablePlan

from engine.dryrun.types import OPTIMIZER_STATE_BYTES, Piece


def scaled_rows(num_embeddings: int, scale_rows: float) -> int:
    return max(1, int(num_embeddings * scale_rows)) if scale_rows != 1.0 else num_embeddings


def _scale(boundary: int, rows: int, new_rows: int) -> int:
    return boundary * new_rows // rows


def rank_pieces(cfg: Config, tables: dict[str, TablePlan], scale_rows: float = 1.0) -> list[list[Piece]]:
    """pieces[r]: what rank r holds, in config table order then shard order."""
    pieces: list[list[Piece]] = [[] for _ in range(cfg.topology.world_size)]
    for t in cfg.tables:
        tp = tables[t.name]
        weighted = cfg.constraint(t.name).is_weighted
        n = scaled_rows(t.num_embeddings, scale_rows)
        common = dict(table=t.name, sharding_type=tp.sharding_type, pooling=t.pooling, data_type=t.data_type,
                      is_weighted=weighted)
        if tp.sharding_type is ShardingType.DATA_PARALLEL or tp.shards is None:
            for r in tp.ranks:
                pieces[r].append(Piece(rank=r, row_offset=0, rows=n, cols=t.embedding_dim, **common))
            continue
        for s in tp.shards:
            start = _scale(s.offsets[0], t.num_embeddings, n)
            end = _scale(s.offsets[0] + s.sizes[0], t.num_embeddings, n)
            pieces[s.rank].append(Piece(rank=s.rank, row_offset=start, rows=end - start, cols=s.sizes[1], **common))
    return pieces


def element_bytes(data_type: DataType) -> int:
    """Bytes per weight as measured: fbgemm trains fp32 and fp16 on CPU, so every other type runs as 2-byte."""
    return 4 if data_type is DataType.FP32 else 2


def weight_bytes(p: Piece) -> int:
    return p.rows * p.cols * element_bytes(p.data_type)


def optimizer_bytes(p: Piece, optimizer: Optimizer) -> int:
    """fp32 optimizer state as fbgemm allocates it: adagrad one per weight, rowwise one per row, adam two."""
    per_row = {Optimizer.SGD: 0, Optimizer.ADAGRAD: p.cols, Optimizer.ROWWISE_ADAGRAD: 1,
               Optimizer.ADAM: 2 * p.cols}[optimizer]
    return p.rows * per_row * OPTIMIZER_STATE_BYTES


def state_bytes(pieces: list[Piece], optimizer: Optimizer) -> int:
    return sum(weight_bytes(p) + optimizer_bytes(p, optimizer) for p in pieces if not p.empty)


def low_precision_tables(pieces: list[list[Piece]]) -> list[str]:
    """Tables whose data type fbgemm cannot train on CPU (measured as 2-byte weights instead)."""
    names = {p.table for rank in pieces for p in rank if p.data_type not in (DataType.FP32, DataType.FP16)}
    return sorted(names)
