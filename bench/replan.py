"""Re-plan benchmark (issue 13, issue 28 item 15): for bench cases, plan, grow tables 2x (10% of them, every
tenth table; or the three largest, which then no longer fit where they were), then re-plan from the first plan
and plan from scratch; report the bytes each moves (weights and optimizer state) and their slowest ranks.
Target: the re-plan moves at most 20% of what the plan from scratch moves, at a slowest rank within 5% of it.
Figures are the planner's estimates: they do not depend on the machine.

    python -m bench.replan [--out-dir bench/results]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

import engine
from bench.replan_findings import FINDINGS
from bench.suite import criteo_1tb, synthetic

ROOT = Path(__file__).resolve().parents[1]
CASES = {"synthetic-100x16": lambda: synthetic(100, 16, seed=0), "synthetic-200x8": lambda: synthetic(200, 8, seed=0),
         "criteo-1tb-8": lambda: criteo_1tb(8), "criteo-1tb-16": lambda: criteo_1tb(16)}
# seeded cases grown only by their largest tables; rows up to 1e8: tables that need host-DDR kernels
GROWN_CASES = {"synthetic-200x8 seed 1": lambda: synthetic(200, 8, seed=1),
               "synthetic-200x8 seed 2": lambda: synthetic(200, 8, seed=2),
               "synthetic-100x8 seed 3 rows 1e8": lambda: synthetic(100, 8, seed=3, max_rows=1e8),
               "synthetic-100x16 seed 4 rows 1e8": lambda: synthetic(100, 16, seed=4, max_rows=1e8)}
LARGEST = 3  # the growth cases grow this many of the largest tables
# (case, growth): every tenth table of each case, then the largest tables of every case
RUNS = [*((name, "tenth") for name in CASES), *((name, "largest") for name in (*CASES, *GROWN_CASES))]
MOVE_TARGET, STEP_TARGET = 0.20, 1.05


def grow(raw: dict, share: float = 0.1) -> dict:
    out = copy.deepcopy(raw)
    n = len(out["tables"])
    k = max(1, int(n * share))
    for t in out["tables"][::n // k][:k]:
        t["num_embeddings"] *= 2
    return out


def grow_largest(raw: dict, k: int = LARGEST) -> dict:
    """`raw` with its k largest tables (rows x dim; the first of equals) grown 2x."""
    out = copy.deepcopy(raw)
    tables = out["tables"]
    size = [-t["num_embeddings"] * t["embedding_dim"] for t in tables]
    for i in sorted(range(len(tables)), key=lambda i: (size[i], i))[:k]:
        tables[i]["num_embeddings"] *= 2
    return out


GROWTH = {"tenth": ("every tenth table", grow), "largest": (f"the {LARGEST} largest tables", grow_largest)}


def keep_floor(cfg: engine.Config, old: dict[str, engine.OldTable], first: engine.Plan, step_ms: float) -> int:
    """Bytes any plan of the grown config `cfg` whose slowest rank is at most `step_ms` must move off the earlier
    plan `first` (`old`), between ranks. Every layout DMP 1.8 runs gives a grown table's piece either all its rows
    (table_wise, column_wise, table_column_wise) or an even block ceil(rows / ranks) of them (row_wise,
    table_row_wise and grid_shard's row cuts), so a piece keeping b bytes of the earlier rows on its rank takes at
    least g x b bytes of HBM there (g: the growth), up to a row per piece: the new rows come with the old ones.
    So a rank holding O bytes of grown tables, whose other pieces take R of its HBM in the earlier plan, keeps at
    most (usable HBM - R) / g of them and sends the rest away; moving other tables off it to make room moves at
    least as many bytes as it frees. Left out, as keepable: a table with a host-DDR kernel whose costliest piece
    fits under `step_ms` (`engine.replan_ddr_piece_ms`: its weights may stay on their rank in host memory, which
    moves nothing between ranks), and with more than one host a grown table the earlier plan cut by rows (its even
    block over the ranks of one host may become the same block over twice the ranks). Such a table's HBM in the
    earlier plan is taken off R as well (it may leave HBM)."""
    cap = float(cfg.topology.usable_hbm_bytes)
    ddr_ms = engine.replan_ddr_piece_ms(cfg)
    hosts = cfg.topology.world_size // cfg.topology.local_world_size
    held = np.zeros(cfg.topology.world_size)  # bytes of grown tables' earlier pieces per rank
    taken = np.zeros(cfg.topology.world_size)  # the HBM those take, at g x
    free = np.zeros(cfg.topology.world_size)  # HBM other tables' earlier pieces could give up without moving
    for t in cfg.tables:
        o = old.get(t.name)
        if o is None or o.shards is None:
            continue
        per = engine.replan_bytes_per_element(cfg, t.name)
        rows = max(r0 + nr for r0, _, nr, _, _ in o.shards)
        keepable = ddr_ms[t.name] <= step_ms or (hosts > 1 and (o.sharding_type.splits_rows
                                                                   or o.sharding_type.rows_in_host))
        for _, _, nr, nc, rank in o.shards:
            if keepable:
                free[rank] += nr * nc * per
            elif t.num_embeddings > rows:
                held[rank] += nr * nc * per
                taken[rank] += nr * nc * per * t.num_embeddings / rows
    rest = np.array([r.hbm_bytes for r in first.ranks], dtype=np.float64) - held - free
    g = np.divide(taken, held, out=np.ones_like(held), where=held > 0)
    return int(np.maximum(held - np.maximum(cap - rest, 0.0) / g, 0.0).sum())


def run_case(name: str, raw: dict, growth: str = "tenth") -> dict:
    raw = engine.config_to_dict(engine.parse_config(raw))
    first = engine.plan(engine.parse_config(raw))
    old = engine.read_old_plan(engine.plan_to_dict(first))
    start = time.process_time()
    cfg = engine.parse_config(GROWTH[growth][1](raw))
    r = engine.replan_plan(cfg, old)
    s = r.summary()
    return {"case": name, "grown": GROWTH[growth][0], "tables": len(raw["tables"]),
            "ranks": raw["topology"]["world_size"],
            "cpu_s": time.process_time() - start, **{k: s[k] for k in (
                "moved_bytes", "scratch_moved_bytes", "kept_moved_bytes", "step_ms", "scratch_step_ms",
                "kept_step_ms")},
            "floor_bytes": keep_floor(cfg, old, first, STEP_TARGET * s["scratch_step_ms"]),
            "moved_tables": len(s["moved_tables"]), "checkpoint_breaks": len(s["checkpoint_breaks"]),
            "from_scratch": not r.plan.notes[0].startswith("re-planned from the earlier plan"),
            "move_ratio": s["moved_bytes"] / s["scratch_moved_bytes"] if s["scratch_moved_bytes"] else 0.0,
            "step_ratio": s["step_ms"] / s["scratch_step_ms"]}


TRADEOFF_CASE = "criteo-1tb-8"
TRADEOFF_LIMITS = (None, 0.5, 0.45, 0.4, 0.3, 0.2)  # byte limits as shares of what the plan from scratch moves


def tradeoff(raw: dict, limits: tuple = TRADEOFF_LIMITS) -> list[dict]:
    """Bytes moved against the slowest rank: the re-plan of `raw` with its largest tables grown, under byte limits
    (`--max-move-bytes`) set to shares of what the plan from scratch moves; the tables given a kernel with their
    weights in host DDR are named (they stay on their ranks, slower)."""
    raw = engine.config_to_dict(engine.parse_config(raw))
    old = engine.read_old_plan(engine.plan_to_dict(engine.plan(engine.parse_config(raw))))
    cfg = engine.parse_config(grow_largest(raw))
    scratch = engine.plan(cfg)
    total = engine.replan_moved_bytes(cfg, old, scratch.tables).total_bytes
    rows = []
    for share in limits:
        limit = None if share is None else int(share * total)
        try:
            r = engine.replan_plan(cfg, old, max_move_bytes=limit, scratch=scratch)
        except engine.PlanningError as e:
            rows.append({"limit_share": share, "refused": str(e).split(". ")[0]})
            continue
        rows.append({"limit_share": share, "move_ratio": r.moves.total_bytes / total,
                     "step_ratio": r.plan.max_rank_cost_ms / scratch.max_rank_cost_ms,
                     "in_ddr": sorted(n for n, tp in r.plan.tables.items() if tp.compute_kernel.weights_in_ddr
                                      and not old[n].compute_kernel.weights_in_ddr)})
    return rows


def tradeoff_markdown(rows: list[dict]) -> list[str]:
    lines = ["", f"Bytes against speed ({TRADEOFF_CASE}, the {LARGEST} largest tables grown 2x; `--max-move-bytes` "
             "as a share of what the plan from scratch moves; kernels with weights in host DDR keep their tables on "
             "their ranks, slower):", "", "| byte limit | re-plan moves / scratch | step / scratch | "
             "tables moved to a host-DDR kernel |", "|---|---|---|---|"]
    for r in rows:
        limit = "none" if r["limit_share"] is None else f"{r['limit_share']:.0%}"
        if "refused" in r:
            lines.append(f"| {limit} | refused: {r['refused']} | - | - |")
        else:
            lines.append(f"| {limit} | {r['move_ratio']:.1%} | {r['step_ratio']:.3f} | "
                         f"{', '.join(r['in_ddr']) or '-'} |")
    return lines


def markdown(results: dict) -> str:
    gib = 2**30
    lines = [f"Made by `{results['command']}` on {results['date']}. The tables named grown 2x (every tenth: 10% of "
             f"the tables; the {LARGEST} largest: by rows x dim); the re-plan starts from the plan of the original "
             "config (`python -m engine replan NEW --from OLD`, no byte limit); figures are estimates, the same on "
             "any machine. Floor: bytes any plan within 1.05x of the plan from scratch must move (`keep_floor`: a "
             "rank full of grown tables keeps at most its free HBM / 2 of their earlier bytes, their new rows coming "
             "with them; why, below). \"(from scratch)\": the re-plan started from the plan from scratch (relabelled "
             "within each host, tables pulled back home), or is it, where no attempt came within 1.05x.", "",
             "| case | grown 2x | tables x ranks | re-plan moves GiB | kept as is moves GiB | from scratch moves GiB "
             "| moved / scratch (target <= 20%) "
             "| floor / scratch | re-plan step ms | kept step ms | scratch step ms | step / scratch "
             "(target <= 1.05) | tables moving | checkpoint breaks |", "|---" * 14 + "|"]
    for c in results["cases"]:
        kept = "-" if c["kept_moved_bytes"] is None else f"{c['kept_moved_bytes'] / gib:.2f}"
        kept_ms = "-" if c["kept_step_ms"] is None else f"{c['kept_step_ms']:.4g}"
        floor = f"{c['floor_bytes'] / c['scratch_moved_bytes']:.1%}" if c["scratch_moved_bytes"] else "-"
        lines.append(f"| {c['case']} | {c.get('grown', 'every tenth table')} | {c['tables']} x {c['ranks']} | "
                     f"{c['moved_bytes'] / gib:.2f} | {kept} | "
                     f"{c['scratch_moved_bytes'] / gib:.2f} | {c['move_ratio']:.1%}"
                     f"{'' if c['move_ratio'] <= MOVE_TARGET else ' (missed)'}"
                     f"{' (from scratch)' if c.get('from_scratch') else ''} | {floor} | "
                     f"{c['step_ms']:.4g} | {kept_ms} | "
                     f"{c['scratch_step_ms']:.4g} | {c['step_ratio']:.3f}"
                     f"{'' if c['step_ratio'] <= STEP_TARGET else ' (missed)'} | {c['moved_tables']} | "
                     f"{c['checkpoint_breaks']} |")
    if results.get("tradeoff"):
        lines += tradeoff_markdown(results["tradeoff"])
    lines += ["", FINDINGS]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.replan")
    p.add_argument("--out-dir", type=Path, default=ROOT / "bench" / "results")
    args = p.parse_args(argv)
    command = "python -m bench.replan" + "".join(f" {a}" for a in (sys.argv[1:] if argv is None else argv))
    results = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M"), "cases": []}
    for name, growth in RUNS:
        results["cases"].append(run_case(name, {**CASES, **GROWN_CASES}[name](), growth))
        print(f"{name}, {GROWTH[growth][0]} grown: {results['cases'][-1]['move_ratio']:.1%} of the bytes, step x"
              f"{results['cases'][-1]['step_ratio']:.3f}", file=sys.stderr)
    results["tradeoff"] = tradeoff({**CASES, **GROWN_CASES}[TRADEOFF_CASE]())
    args.out_dir.mkdir(parents=True, exist_ok=True)
    engine.write_text_file(args.out_dir / "replan.json", json.dumps(results, indent=1) + "\n")
    engine.write_text_file(args.out_dir / "replan.md", markdown(results))
    print(f"wrote {args.out_dir / 'replan.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
