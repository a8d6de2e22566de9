"""The dry-run's result as text (a per-rank table beside the estimates, then the ranking agreement) and as the
--json dict; both say which device the estimates are priced for (engine.pricing)."""

from __future__ import annotations

from engine.errors import human_bytes
from engine.evaluate import evaluate
from engine.pricing import Pricing
from engine.types import TablePlan

from engine.dryrun.types import DryrunResult
from engine.dryrun.workload import turns

HEADER = ("rank", "pieces", "lookups", "measured ms", "estimated ms", "bytes")


def dryrun_json(res: DryrunResult, pricing: Pricing | None = None,
                tables: dict[str, TablePlan] | None = None) -> dict:
    """res.as_dict(), plus the device the estimates are for, the pricing note first among the notes and, with
    the plan's tables, each rank's estimated_bytes (HBM + DDR of the plan priced for the device measured)."""
    data = res.as_dict()
    if pricing is None:
        return data
    data.update(pricing.fields())
    data["notes"] = ([pricing.note] if pricing.note else []) + data["notes"]
    if tables is not None:
        est = evaluate(pricing.config, tables, planner="file").ranks
        for r in data["ranks"]:
            r["estimated_bytes"] = est[r["rank"]].hbm_bytes + est[r["rank"]].ddr_bytes
    return data


def dryrun_summary(res: DryrunResult, pricing: Pricing | None = None) -> str:
    ids = (f"Zipf ids (alpha {res.zipf_alpha:g})" if res.zipf_alpha is not None
           else "uniform ids" if res.distribution.value == "uniform"
           else "uniform ids unless a table's zipf_exponent skews them")
    fresh = ("fresh ids every step" if res.batches >= res.iters + res.warmup + len(turns(res.iters))
             else f"{res.batches} distinct batch{'es' if res.batches > 1 else ''} cycled")
    if res.ids.get("source") == "sample":
        i = res.ids
        ids = f"ids of the sample {i['file']}"
        fresh = (f"{i['rows_used']:,} rows in {i['batches']} batch{'es' if i['batches'] > 1 else ''}"
                 + (", cycled" if i["cycled"] else ""))
    else:
        fresh += f" (seed {res.seed})"
    lines = [
        f"Kernel dry-run: {res.backend.value} on {res.device.value}, {res.threads} thread(s), {ids}, "
        f"median of {res.iters} step(s) after {res.warmup} warmup, {res.schedule}, {fresh}",
        "",
        f"{HEADER[0]:>4}  {HEADER[1]:>6}  {HEADER[2]:>9}  {HEADER[3]:>11}  {HEADER[4]:>12}  {HEADER[5]:>11}",
    ]
    for r in res.ranks:
        lines.append(f"{r.rank:>4}  {r.num_pieces:>6}  {r.lookups:>9}  {r.measured_ms:>11.3f}  "
                     f"{r.estimated_ms:>12.3f}  {human_bytes(r.measured_bytes):>11}")
    if res.ranks:
        est = max(res.ranks, key=lambda r: r.estimated_ms)
        lines += ["", f"max rank: measured {res.max_rank_measured_ms:.3f} ms (rank {res.bottleneck_rank}), "
                      f"estimated {est.estimated_ms:.3f} ms (rank {est.rank})"]
    corr = res.estimate_rank_correlation
    lines.append("estimate vs measured rank correlation (Spearman): "
                 + (f"{corr:.2f}" if corr is not None else "n/a (fewer than 3 ranks, or a constant column)"))
    if pricing is not None:
        lines += pricing.lines()
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(lines)
