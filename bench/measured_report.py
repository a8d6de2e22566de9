"""The measured-quality benchmark's arithmetic and tables: pair ratios, median and IQR, the A/A noise band, the
estimate's order checks, and the Markdown report. Pure: dicts of dry-run results in, numbers and text out.
"""

from __future__ import annotations

import math
from typing import Optional

import numpy as np

import engine


def median_iqr(values: list[float]) -> tuple[float, float, float]:
    """(median, 25th, 75th percentile), numpy's linear interpolation."""
    if not values:
        raise ValueError("no values")
    q1, med, q3 = np.percentile(np.asarray(values, dtype=float), [25, 50, 75])
    return float(med), float(q1), float(q3)


def ratios(num: list[dict], den: list[dict]) -> list[float]:
    """Pair by pair: the slowest rank's measured ms of `num`'s run over `den`'s."""
    return [a["max_rank_measured_ms"] / b["max_rank_measured_ms"] for a, b in zip(num, den)]


def noise_band(aa: list[float]) -> float:
    """Half-width, in log terms, of the A/A noise: the A/A ratios' quartile furthest from 1. A single pair ratio
    of two identical plans falls outside [exp(-h), exp(h)] about half the time at most; a median of several
    pair ratios far less often, so a median outside it is a difference the noise does not explain."""
    _, q1, q3 = median_iqr(aa)
    return max(abs(math.log(q1)), abs(math.log(q3)))


def next_round(runs: list) -> list:
    """Each round's run paired with the next round's (the last with the first's): ratios(next_round(again), ours) is
    the A/A across rounds."""
    return runs[1:] + runs[:1]


def aa_band(same_round: list[float], across: list[float]) -> float:
    """The noise band of a benchmark whose rounds each run A, B and A again: the wider of the A/A band in the same
    round and across rounds (summarize says why); one round has only the first."""
    return max(noise_band(same_round), noise_band(across)) if len(same_round) > 1 else noise_band(same_round)


def verdict(ab_median: float, band: float) -> str:
    """'faster', 'slower' (ours vs TorchRec's, beyond the A/A band) or 'within noise'."""
    x = math.log(ab_median)
    return "faster" if x < -band else "slower" if x > band else "within noise"


def per_rank_median(runs: list[dict]) -> list[float]:
    """Each rank's median measured ms over a plan's runs."""
    n = len(runs[0]["ranks"])
    return [float(np.median([r["ranks"][k]["measured_ms"] for r in runs])) for k in range(n)]


def argmax(values: list[float]) -> int:
    return int(max(range(len(values)), key=lambda k: values[k]))


def rank_check(runs: list[dict]) -> dict:
    """Does the estimate name the measured slowest rank of one plan, and how do the ranks' orders agree."""
    est = [r["estimated_ms"] for r in runs[0]["ranks"]]  # the same plan: the same estimate in every run
    meas = per_rank_median(runs)
    return {"estimated_ms": est, "measured_median_ms": meas, "estimated_slowest": argmax(est),
            "measured_slowest": argmax(meas), "names_slowest": argmax(est) == argmax(meas),
            "estimated_spread": max(est) / min(est) if min(est) > 0 else None,
            "measured_spread": max(meas) / min(meas) if min(meas) > 0 else None,
            "spearman": engine.spearman(est, meas)}


def order_check(ours: list[dict], theirs: list[dict], ab_median: float) -> dict:
    """The estimate's order of the two plans (slowest estimated rank) against the measured one (median pair ratio)."""
    est_ratio = max(r["estimated_ms"] for r in ours[0]["ranks"]) / max(r["estimated_ms"] for r in theirs[0]["ranks"])
    return {"estimated_ratio": est_ratio, "matches": (est_ratio < 1) == (ab_median < 1) and est_ratio != 1}


def summarize(series: dict) -> dict:
    """Numbers of one config from its runs: {"ours": [...], "torchrec": [...] or [], "ours_again": [...]}.

    The noise band is the wider of two A/A bands: ours again over ours in the same round, and ours again of the next
    round over ours (the last round's over the first's). A machine can hand two runs of the same plan in one round
    the same state (on fc-v595 m0's slowest rank measured 7 or 11 ms by round, ours and ours again alike, TorchRec's
    plan in the same round not), which the same-round pair cannot see and the pair of two plans does; the pair
    across rounds sees it. Where the machine's state only drifts with time, the pair across rounds is further apart
    than a round's pairs and its band wider than needed: verdicts then err toward "within noise", both ways."""
    ours, theirs, again = series["ours"], series["torchrec"], series["ours_again"]
    aa = ratios(again, ours)
    across = ratios(next_round(again), ours)
    band = aa_band(aa, across)
    out = {"aa": dict(zip(("median", "q1", "q3"), median_iqr(aa))), "aa_ratios": aa,
           "aa_across": dict(zip(("median", "q1", "q3"), median_iqr(across))), "aa_across_ratios": across,
           "band_same_round": noise_band(aa), "band": band, "ours_ranks": rank_check(ours)}
    if theirs:
        ab = ratios(ours, theirs)
        out["ab"] = dict(zip(("median", "q1", "q3"), median_iqr(ab)))
        out.update(ab_ratios=ab, ours_faster=sum(x < 1 for x in ab), pairs=len(ab),
                   verdict=verdict(out["ab"]["median"], out["band"]), torchrec_ranks=rank_check(theirs),
                   order=order_check(ours, theirs, out["ab"]["median"]))
        out["balance_bound"] = balance_bound(out["torchrec_ranks"]["measured_median_ms"])
    return out


def balance_bound(ranks_ms: list[float]) -> float:
    """A plan's mean rank over its slowest, measured: the ratio to it that moving its work between ranks could give
    at best, were the work the same wherever it ran (it is not quite: a rank's tables slow each other down, so a
    placement that keeps large working sets apart can beat it)."""
    return float(np.mean(ranks_ms) / max(ranks_ms)) if ranks_ms and max(ranks_ms) > 0 else 1.0


def _q(s: dict) -> str:
    return f"{s['median']:.3f} ({s['q1']:.3f}-{s['q3']:.3f})"


def _aa(s: dict) -> str:
    """The same-round A/A, and the A/A across rounds where the summary has it (runs summarized before it had not)."""
    return _q(s["aa"]) + (f"; across rounds {_q(s['aa_across'])}" if "aa_across" in s else "")


def _yn(x: Optional[bool]) -> str:
    return "-" if x is None else "yes" if x else "no"


def _rho(x: Optional[float]) -> str:
    return "n/a" if x is None else f"{x:.2f}"


def _ranks(rc: dict) -> str:
    return f"{_yn(rc['names_slowest'])} (est. {rc['estimated_slowest']}, meas. {rc['measured_slowest']})"


HEAD = ("| config | ranks | tables | optimizer | ids | backend | ours / TorchRec measured, median (IQR) "
        "| ours faster | A/A median (IQR), same round; across rounds | verdict | estimate says ours / TorchRec "
        "| estimate's order right "
        "| estimate names slowest rank: ours / TorchRec | Spearman est. vs meas.: ours / TorchRec "
        "| measured spread slowest/fastest rank: ours / TorchRec | TorchRec's mean rank / its slowest (balancing it "
        "gives at best) | load 1-min before -> after | notes |")


def row_markdown(r: dict) -> str:
    """One config's row of the table."""
    s, cfg = r.get("summary"), r["config"]
    ids = "uniform" if r["zipf_alpha"] is None else f"zipf {r['zipf_alpha']}"
    cells = [r["name"], str(cfg["topology"]["world_size"]), str(len(cfg["tables"])), cfg["topology"]["optimizer"],
             ids, "/".join(r.get("backends", [])) or "-"]
    if not s:
        return "| " + " | ".join(cells + ["-"] * 11 + [r.get("error", "")]) + " |"
    load = f"{r['load_before'][0]:.1f} -> {r['load_after'][0]:.1f}"
    o = s["ours_ranks"]
    if "ab" not in s:
        cells += ["identical plans", "-", _aa(s), "-", "1.000", "-", _ranks(o), _rho(o["spearman"]),
                  f"{o['measured_spread']:.2f}", "-", load]
    else:
        t = s["torchrec_ranks"]
        cells += [_q(s["ab"]), f"{s['ours_faster']} of {s['pairs']}", _aa(s), s["verdict"],
                  f"{s['order']['estimated_ratio']:.3f}", _yn(s["order"]["matches"]),
                  f"{_ranks(o)} / {_ranks(t)}", f"{_rho(o['spearman'])} / {_rho(t['spearman'])}",
                  f"{o['measured_spread']:.2f} / {t['measured_spread']:.2f}",
                  f"{s['balance_bound']:.3f}" if "balance_bound" in s else "-", load]
    return "| " + " | ".join(cells + ["; ".join(r.get("notes", []))]) + " |"


def table_markdown(rows: list[dict], baseline: str = "TorchRec") -> str:
    """The table of configs; `baseline` names the plan ours is compared with (TorchRec's, by default)."""
    head = HEAD.replace("TorchRec", baseline)
    return "\n".join([head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"] + [row_markdown(r) for r in rows])


def tally(rows: list[dict]) -> str:
    """How many configs ours is faster / slower beyond the A/A noise, within it, identical, not measured."""
    verdicts = [r["summary"].get("verdict", "identical plans") if r.get("summary") else "not measured"
                for r in rows]
    parts = [f"{verdicts.count(v)} {label}" for v, label in (
        ("faster", "ours faster beyond the A/A noise"), ("slower", "ours slower beyond the noise"),
        ("within noise", "within the noise"), ("identical plans", "identical plans"),
        ("not measured", "not measured")) if verdicts.count(v)]
    return f"{len(rows)} configs: " + ", ".join(parts) + "."


__all__ = ["aa_band", "balance_bound", "median_iqr", "next_round", "noise_band", "order_check", "rank_check", "ratios",
           "summarize", "table_markdown", "tally", "verdict"]
