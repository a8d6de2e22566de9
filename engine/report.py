"""Plans as text: a per-rank and per-table summary for people, and the text TorchRec prints for a plan."""

from __future__ import annotations

from engine.capacity import ssd_cap_of
from engine.tiers import ssd_by_rank, virtual_comment
from engine.errors import human_bytes
from collections.abc import Sequence

from engine.replicas import dmp_collection_comment, group_topology, report_lines
from engine.types import ComputeKernel, Config, Device, Plan, ShardingType, TablePlan


# ---- where a table is, and whether it moved (the dashboard's and the store's comparisons) --------------------


def placement(tp: TablePlan) -> tuple[ShardingType, ComputeKernel, tuple[int, ...]]:
    """Where a plan puts a table: its sharding type, kernel and ranks."""
    return tp.sharding_type, tp.compute_kernel, tuple(tp.ranks)


def has_moved(before: TablePlan, after: TablePlan) -> bool:
    """Whether a table is placed differently (sharding type, kernel or ranks) in `after` than in `before`."""
    return placement(before) != placement(after)


def ranks_list_text(ranks: Sequence[int]) -> str:
    """'0, 2, 5'; more than six consecutive ranks as '0-15'."""
    ranks = list(ranks)
    if len(ranks) > 6 and all(isinstance(r, int) for r in ranks) and ranks == list(range(ranks[0],
                                                                                       ranks[0] + len(ranks))):
        return f"{ranks[0]}-{ranks[-1]}"
    return ", ".join(str(r) for r in ranks)


def placement_words(sharding_type: str, compute_kernel: str, ranks: Sequence[int]) -> str:
    """'table_wise fused [0, 1]': a placement as a line of text (from a plan file's words)."""
    return f"{sharding_type} {compute_kernel} [{ranks_list_text(ranks)}]"


def placement_text(tp: TablePlan) -> str:
    return placement_words(tp.sharding_type.value, tp.compute_kernel.value, tp.ranks)


def _placement(rank: int, cfg: Config) -> str:
    if cfg.topology.compute_device is Device.CPU:
        return f"rank:{rank}/cpu"
    return f"rank:{rank}/cuda:{rank % group_topology(cfg.topology).local_world_size}"  # 2D: the group's host


def parameter_sharding_text(tp: TablePlan, cfg: Config) -> str:
    if tp.shards is None:
        spec = "None"
    else:
        shards = ", ".join(
            f"ShardMetadata(shard_offsets=[{s.offsets[0]}, {s.offsets[1]}], "
            f"shard_sizes=[{s.sizes[0]}, {s.sizes[1]}], placement={_placement(s.rank, cfg)})"
            for s in tp.shards
        )
        spec = f"EnumerableShardingSpec(shards=[{shards}])"
    return (f"ParameterSharding(sharding_type='{tp.sharding_type.value}', compute_kernel='{tp.compute_kernel.value}', "
            f"ranks={list(tp.ranks)}, sharding_spec={spec})")


def torchrec_format(plan: Plan, cfg: Config, module_path: str = "") -> str:
    """The plan as TorchRec prints a ShardingPlan's module plans (as in the sharding tutorial)."""
    body = ", ".join(f"'{name}': {parameter_sharding_text(tp, cfg)}" for name, tp in plan.tables.items())
    return dmp_collection_comment(cfg.topology) + virtual_comment(cfg) + f"{{'{module_path}': {{{body}}}}}"


def _shard_text(tp: TablePlan) -> str:
    if tp.shards is None:
        return "full copy on every rank"
    sizes = {tuple(s.sizes) for s in tp.shards if s.sizes[0] * s.sizes[1]}
    if len(sizes) == 1:
        (r, c), = sizes
        n = sum(1 for s in tp.shards if s.sizes[0] * s.sizes[1])
        return f"{n} x [{r}, {c}]"
    return ", ".join(f"[{s.sizes[0]}, {s.sizes[1]}]" for s in tp.shards)


def _ranks_text(ranks: tuple[int, ...]) -> str:
    if len(ranks) > 8:
        return f"{ranks[0]}..{ranks[-1]} ({len(ranks)})"
    return ",".join(str(r) for r in ranks)


MEMORY_PART_NAMES = (("weights_bytes", "weights"), ("optimizer_bytes", "optimizer state"), ("cache_bytes", "cache"),
                     ("grad_bytes", "dense gradients"), ("input_bytes", "ids and lengths"), ("output_bytes", "outputs"),
                     ("output_grad_bytes", "output gradients"), ("a2a_bytes", "all-to-all buffers"))


def _memory_lines(plan: Plan) -> list[str]:
    """The step memory of the rank with the largest peak, part by part (engine.memory)."""
    ranks = [r for r in plan.ranks if r.memory is not None]
    if not ranks:
        return []
    r = max(ranks, key=lambda x: x.memory.peak_bytes)
    m = r.memory.as_dict()
    parts = " + ".join(f"{label} {human_bytes(m[k])}" for k, label in MEMORY_PART_NAMES if m[k])
    line = (f"Step memory of rank {r.rank} (largest peak): {human_bytes(m['peak_bytes'])} at the peak = {parts}; "
            f"{human_bytes(m['held_bytes'])} held between steps (docs/estimator.md, Memory)")
    return ["", line]


def summary(plan: Plan, cfg: Config, max_tables: int = 60, max_ranks: int = 64) -> str:
    topo = cfg.topology
    lines = [
        f"Plan by {plan.planner}: {len(cfg.tables)} tables on {topo.world_size} ranks "
        f"({topo.num_hosts} host(s) x {topo.local_world_size}, {topo.compute_device.value}), "
        f"batch {topo.batch_size} per rank",
        *report_lines(cfg, plan),
    ]
    peak = plan.max_rank_cost_ms
    slowest = plan.bottleneck_rank  # a property that walks every rank: once, not once per rank
    lb = plan.lower_bound_ms
    line = f"Slowest rank: {slowest} at {peak:.4f} ms per step"
    if lb:
        line += f"; lower bound {lb:.4f} ms ({peak / lb:.3f}x)"
    if plan.planning_seconds is not None:
        line += f"; planned in {plan.planning_seconds:.3f} s"
    lines += [line, ""]
    header = f"{'rank':>4}  {'HBM used':>12} {'of':>3} {'usable':>11}  {'DDR used':>11}  {'cost ms':>9}  " \
             f"{'compute':>8}  {'comms':>8}  shards"
    lines.append(header)
    shown = [r for r in plan.ranks if r.rank < max_ranks or r.rank == slowest]
    for r in shown:
        comp = r.perf.fwd_compute + r.perf.bwd_compute + r.perf.prefetch_compute
        comms = r.perf.fwd_comms + r.perf.bwd_comms + r.perf.input_dist_comms
        mark = "  <- slowest" if r.rank == slowest and len(plan.ranks) > 1 else ""
        lines.append(f"{r.rank:>4}  {human_bytes(r.hbm_bytes):>12} {'of':>3} {human_bytes(r.hbm_cap_bytes):>11}  "
                     f"{human_bytes(r.ddr_bytes):>11}  {r.cost_ms:>9.4f}  {comp:>8.4f}  {comms:>8.4f}  "
                     f"{r.num_shards}{mark}")
    if len(shown) < len(plan.ranks):
        lines.append(f"... and {len(plan.ranks) - len(shown)} more ranks (use --json for all)")
    lines += _memory_lines(plan) + ssd_lines(plan, cfg)
    lines += ["", f"{'table':<24} {'rows x dim':>14}  {'sharding':<18} {'kernel':<18} {'ranks':<14} shards"]
    for i, (name, tp) in enumerate(plan.tables.items()):
        if i == max_tables:
            lines.append(f"... and {len(plan.tables) - max_tables} more tables (use --json for all)")
            break
        t = cfg.table(name)
        lines.append(f"{name:<24} {t.num_embeddings:>8}x{t.embedding_dim:<5}  {tp.sharding_type.value:<18} "
                     f"{tp.compute_kernel.value:<18} {_ranks_text(tp.ranks):<14} {_shard_text(tp)}")
    counts: dict[ShardingType, int] = {}
    for tp in plan.tables.values():
        counts[tp.sharding_type] = counts.get(tp.sharding_type, 0) + 1
    lines += ["", "Sharding types: " + ", ".join(f"{k.value} {v}" for k, v in counts.items())]
    cached = [(name, tp.cache_note) for name, tp in plan.tables.items() if tp.cache_note][:max_tables]
    lines += [f"Cache of {name}: {note}" for name, note in cached]  # engine.clf: its size, and why
    lines += [f"Note: {n}" for n in plan.notes]
    return "\n".join(lines)


def ssd_lines(plan: Plan, cfg: Config) -> list[str]:
    """key_value's SSD (engine.tiers): the fullest rank's bytes of its SSD; nothing where no table holds SSD."""
    used = ssd_by_rank(cfg, plan.tables)
    if not used.any():
        return []
    free = [ssd_cap_of(cfg.topology, r) - u for r, u in enumerate(used.tolist())]
    r = min(range(len(free)), key=free.__getitem__)
    return [f"SSD (key_value's backing store): {human_bytes(float(used.sum()))} over the ranks; rank {r} holds "
            f"{human_bytes(float(used[r]))} of {human_bytes(ssd_cap_of(cfg.topology, r))}"]
