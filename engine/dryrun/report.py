"""The dry-run's result as text: a per-rank table beside the estimates, then the ranking agreement."""

from __future__ import annotations

from engine.errors import human_bytes

from engine.dryrun.types import DryrunResult

HEADER = ("rank", "pieces", "lookups", "measured ms", "estimated ms", "bytes")


def dryrun_summary(res: DryrunResult) -> str:
    ids = "uniform ids" if res.zipf_alpha is None else f"Zipf ids (alpha {res.zipf_alpha:g})"
    lines = [
        f"Kernel dry-run: {res.backend.value} on {res.device.value}, {res.threads} thread(s), {ids}, "
        f"median of {res.iters} step(s) after {res.warmup} warmup",
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
    lines += [f"note: {n}" for n in res.notes]
    return "\n".join(lines)
