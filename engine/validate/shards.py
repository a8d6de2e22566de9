"""The pieces of each table a rank should hold under a plan, and how the pieces it really holds differ.

A piece is (offsets, sizes) of a table's weight; data_parallel ranks hold the whole table. Empty pieces (a
zero-row shard) are ignored on both sides: TorchRec may or may not materialise them.
"""

from __future__ import annotations

from engine.types import Config, ShardingType, TablePlan

Piece = tuple[tuple[int, int], tuple[int, int]]  # ((row, col) offsets, (rows, cols) sizes)


def expected_pieces(cfg: Config, tables: dict[str, TablePlan], rank: int) -> dict[str, list[Piece]]:
    """Per table, the pieces the plan puts on `rank`, sorted by offsets (tables it gives no piece: [])."""
    out: dict[str, list[Piece]] = {}
    for t in cfg.tables:
        tp = tables[t.name]
        if tp.sharding_type is ShardingType.DATA_PARALLEL or tp.shards is None:
            held = [((0, 0), (t.num_embeddings, t.embedding_dim))] if rank in tp.ranks else []
        else:
            held = [(tuple(s.offsets), tuple(s.sizes)) for s in tp.shards if s.rank == rank]
        out[t.name] = sorted(p for p in held if p[1][0] * p[1][1] > 0)
    return out


def _fmt(pieces: list[Piece]) -> str:
    if not pieces:
        return "nothing"
    return ", ".join(f"{r}x{c} at [{o0}, {o1}]" for (o0, o1), (r, c) in pieces)


def mismatches(expected: dict[str, list[Piece]], actual: dict[str, list[Piece]]) -> list[str]:
    """One line per table whose pieces differ: what the plan says and what the rank holds."""
    out = []
    for table in sorted(set(expected) | set(actual)):
        want = sorted(p for p in expected.get(table, []) if p[1][0] * p[1][1] > 0)
        got = sorted(p for p in actual.get(table, []) if p[1][0] * p[1][1] > 0)
        if want != got:
            out.append(f"{table}: plan {_fmt(want)}; holds {_fmt(got)}")
    return out


def pieces_from_json(data: dict) -> dict[str, list[Piece]]:
    """{table: [{"offsets": [r, c], "sizes": [r, c]}]} (a rank file's local_shards) as pieces."""
    return {t: [(tuple(p["offsets"]), tuple(p["sizes"])) for p in ps] for t, ps in data.items()}


def pieces_to_json(pieces: dict[str, list[Piece]]) -> dict:
    return {t: [{"offsets": list(o), "sizes": list(s)} for o, s in ps] for t, ps in pieces.items()}
