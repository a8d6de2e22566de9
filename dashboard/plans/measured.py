"""What a run says about its plan's estimates (pure): per rank, measured over estimated time and memory as
ratios, whether each rank held the plan's shards, the flags a page raises when a ratio leaves 0.8-1.25 (with
what to do), and which constants priced a plan. Estimates are never compared across devices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import lru_cache

import pandas as pd

import engine
from dashboard.plans import calibration as calib
from dashboard.text import ms_text, pct_text

RATIO_LOW, RATIO_HIGH = 0.8, 1.25  # measured / estimated inside this band: the estimate holds
MEASURED_TIME = ("step_ms", "measured_ms", "iteration_ms")  # db.compare.MEASURED_TIME_METRIC first
TIME_ESTIMATE = {"dryrun": "estimated_compute_ms", "validation": "estimated_ms"}  # a dry-run times kernels only
MEASURED_MEMORY = {"dryrun": ("measured_bytes",), "validation": ("step_peak_bytes", "peak_bytes")}  # first present
ESTIMATED_MEMORY = ("estimated_peak_bytes", "estimated_bytes")  # engine.memory's peak where the run carries it
EMBEDDING = "embedding_ms"  # a rank's own embedding work inside the step (engine.validate.embtime; a dry-run's time)
COLUMNS = ["rank", "measured_ms", "embedding_ms", "estimated_ms", "time_ratio", "measured_bytes", "estimated_bytes",
           "memory_ratio", "shards_match", "memory_metric"]  # memory_metric: the measured memory's metric name


def per_rank(metrics: list) -> dict[int, dict[str, float]]:
    """{rank: {metric: value}} from MetricRecords or (rank, name, value, unit) tuples; repeats averaged."""
    sums: dict[int, dict[str, list[float]]] = {}
    for m in metrics:
        rank, name, value = (m.rank, m.name, m.value) if hasattr(m, "name") else tuple(m)[:3]
        if rank is not None and rank >= 0:
            sums.setdefault(int(rank), {}).setdefault(name, []).append(float(value))
    return {r: {n: sum(v) / len(v) for n, v in names.items()} for r, names in sums.items()}


def _first(values: dict, names: tuple[str, ...]) -> float | None:
    return next((values[n] for n in names if n in values), None)


def ratio(measured: float | None, estimated: float | None) -> float | None:
    if measured is None or not estimated or estimated <= 0:
        return None
    return measured / estimated


def run_frame(plan: engine.Plan, metrics: list, kind: str, same_device: bool) -> pd.DataFrame:
    """One row per rank of the plan: measured time, the rank's own embedding work where the run timed it, and
    estimated time (ms), and memory (bytes), measured over
    estimated, and whether the rank held the plan's shards (None: not checked). The estimates are the run's
    own, priced for the device it measured; the plan's stand in only when it was priced for that device
    (same_device), never across devices. A dry-run's time is its kernels' against the estimate's compute."""
    values = per_rank(metrics)
    rows = []
    for r in plan.ranks:
        v = values.get(r.rank, {})
        est_ms = _first(v, (TIME_ESTIMATE.get(kind, "estimated_ms"), "estimated_ms"))
        est_b = _first(v, ESTIMATED_MEMORY)
        if same_device:
            compute = r.perf.fwd_compute + r.perf.bwd_compute
            est_ms = est_ms if est_ms is not None else (compute if kind == "dryrun" else r.cost_ms)
            est_b = est_b if est_b is not None else r.hbm_bytes + r.ddr_bytes
        names = MEASURED_MEMORY.get(kind, ("peak_bytes",))
        meas_ms, meas_b = _first(v, MEASURED_TIME), _first(v, names)
        match = v.get("shards_match")
        rows.append({"rank": r.rank, "measured_ms": meas_ms, "embedding_ms": v.get(EMBEDDING), "estimated_ms": est_ms,
                     "time_ratio": ratio(meas_ms, est_ms), "measured_bytes": meas_b, "estimated_bytes": est_b,
                     "memory_ratio": ratio(meas_b, est_b), "shards_match": None if match is None else match >= 0.5,
                     "memory_metric": next((n for n in names if n in v), None)})
    return pd.DataFrame(rows, columns=COLUMNS)


def span(frame: pd.DataFrame, column: str) -> tuple[float, float] | None:
    """(lowest, highest) ratio over the ranks, or None when no rank has one."""
    values = [float(x) for x in frame[column] if x is not None and not pd.isna(x)]
    return (min(values), max(values)) if values else None


def ratio_text(value: float | None) -> str:
    if value is None:
        return "n/a"
    return f"{value:.0f}x" if value >= 10 else f"{value:.2f}x"


def span_text(s: tuple[float, float] | None) -> str:
    """'44x', '44x-58x' (lowest to highest over the ranks), or 'n/a'."""
    if s is None:
        return "n/a"
    low, high = (ratio_text(x) for x in s)
    return low if low == high else f"{low}-{high}"


def outside(value: float | None) -> bool:
    return value is not None and not (RATIO_LOW <= value <= RATIO_HIGH)


def shards_text(frame: pd.DataFrame) -> str:
    """'all 2 ranks', 'rank 1 differs', or 'not checked' (a dry-run builds the plan's pieces itself)."""
    checked = frame[frame["shards_match"].notna()]
    if checked.empty:
        return "not checked"
    bad = [int(r) for r, ok in zip(checked["rank"], checked["shards_match"]) if not ok]
    if not bad:
        return f"yes, all {len(checked)} ranks"
    return f"no: rank{'s' if len(bad) > 1 else ''} {', '.join(map(str, bad))} differ{'' if len(bad) > 1 else 's'}"


@dataclass(frozen=True)
class Flag:
    """Something a run shows about the estimates, and what to do about it (plain text)."""

    what: str  # "time", "memory" or "shards"
    text: str
    calibrate: bool = False  # calibrating from the stored runs is the cure


def _worst(frame: pd.DataFrame, column: str) -> pd.Series | None:
    rows = frame[frame[column].notna()]
    if rows.empty:
        return None
    far = rows[column].map(lambda x: abs(math.log(x)) if x > 0 else math.inf)
    return rows.loc[far.idxmax()]


def _time_flag(row: pd.Series, kind: str, device: str) -> Flag:
    q = row["time_ratio"]
    what = "the kernels took" if kind == "dryrun" else "a step took"
    side = "optimistic" if q > 1 else "pessimistic"
    text = (f"Time: on rank {int(row['rank'])} {what} {ratio_text(q)} the estimate ({row['measured_ms']:.3g} ms "
            f"measured, {row['estimated_ms']:.3g} ms estimated for {device}). The estimate is {side} on this "
            f"machine: calibrate the bandwidths from the validation runs on {device}, then replan.")
    if kind == "dryrun":
        text += " (A dry-run times the lookup kernels only, against the estimate's compute part.)"
    return Flag("time", text, calibrate=True)


def _memory_flag(row: pd.Series, kind: str, device: str) -> Flag:
    q = row["memory_ratio"]
    text = (f"Memory: rank {int(row['rank'])}'s peak was {ratio_text(q)} the estimate "
            f"({engine.human_bytes(int(row['measured_bytes']))} measured, "
            f"{engine.human_bytes(int(row['estimated_bytes']))} estimated). ")
    if q > 1:
        text += ("Keep that headroom before a run of this plan runs out of memory: raise the HBM reserved for the "
                 "rest of the model on Topology, or plan for more memory per rank.")
        if device == "cpu" and row.get("memory_metric") == "peak_bytes":
            text += (" This run measured the growth of the process's resident set, which also counts the "
                     "framework's buffers and whatever the allocator keeps.")
    else:
        text += "The estimate is conservative here: the plan has more headroom than it shows."
    return Flag("memory", text)


def flags(frame: pd.DataFrame, kind: str, device: str) -> list[Flag]:
    """A flag per ratio that leaves 0.8-1.25 on some rank (the rank furthest out named), and one for shards."""
    out = []
    worst = _worst(frame, "time_ratio")
    if worst is not None and outside(worst["time_ratio"]):
        out.append(_time_flag(worst, kind, device))
    worst = _worst(frame, "memory_ratio")
    if worst is not None and outside(worst["memory_ratio"]):
        out.append(_memory_flag(worst, kind, device))
    bad = [int(r) for r, ok in zip(frame["rank"], frame["shards_match"]) if ok is False]
    if bad:
        out.append(Flag("shards", f"Shards: rank {', '.join(map(str, bad))} held other shards than the plan gives "
                                  "it (the run's error names the first difference)."))
    return out


@lru_cache(maxsize=64)
def _topology_dict(topology: engine.Topology) -> dict:
    """A topology as a config file writes it (engine.config_to_dict): the calibration helpers read that form.
    Shared: callers copy it before changing it."""
    return engine.config_to_dict(engine.Config(tables=(), constraints={}, topology=topology))["topology"]


def profile(config: engine.Config | None, settings: dict | None = None, device: str | None = None) -> str:
    """Which constants price a plan for `device` (default the config's): a calibration (its runs, device and
    R^2) while the config still holds its fit; else TorchRec's default constants or the config's own
    bandwidths, with the config's device profile (engine.profile) when it is for that device."""
    topology = dict(_topology_dict(config.topology)) if config is not None else {}
    device = device or str(topology.get("compute_device") or "cuda")
    topology["compute_device"] = device
    cal = calib.of_settings(settings)
    if cal is not None and calib.holds(cal, topology):
        return f"a calibration from {calib.runs_text(cal)}"
    prof = topology.pop("profile", None)
    own = not calib.has_default_bandwidths(topology)
    text = ("the config's own bandwidths" if own else "TorchRec's default constants") + f" for {device}"
    if isinstance(prof, dict) and prof.get("device") == device:
        hosts = prof.get("hosts")
        source = str(prof.get("source") or "measured").split(":")[0]
        return (f"{text} with the device profile {prof.get('device')}/{prof.get('backend')} on {hosts} host"
                f"{'' if hosts == 1 else 's'} ({source})")
    return text + (" (not calibrated)" if own else "")


def run_device(run) -> str:
    """The device a run's estimates were priced for: the one it measured (device_info's estimated_device)."""
    return str((run.device_info or {}).get("estimated_device") or run.device)


def same_device(config: engine.Config, run) -> bool:
    """Whether the plan's own estimates (priced for its config's device) stand for the run's device."""
    return config.topology.compute_device.value == run_device(run)


def latest_run(runs: list) -> object | None:
    """The run a plan is judged by: its latest succeeded run, else its latest finished one."""
    done = [r for r in runs if r.status.finished]
    ok = [r for r in done if str(r.status) == "succeeded"]
    return (ok or done or [None])[-1]


def _value(v: object) -> float | None:
    return None if v is None or pd.isna(v) else float(v)


def rank_table(frame: pd.DataFrame) -> pd.DataFrame:
    """run_frame for reading: times to 3 significant digits with their unit, ratios (measured / estimated) as
    text, bytes in binary units, shards as yes/no."""
    def size(v: object) -> str:
        return "" if v is None or pd.isna(v) else engine.human_bytes(int(v))

    def ms(v: object) -> str:
        return "" if _value(v) is None else ms_text(_value(v))

    return pd.DataFrame({
        "rank": frame["rank"], "measured": [ms(v) for v in frame["measured_ms"]],
        "embedding work": [ms(v) for v in frame["embedding_ms"]],
        "estimated": [ms(v) for v in frame["estimated_ms"]],
        "time ratio": [ratio_text(None if pd.isna(v) else v) for v in frame["time_ratio"]],
        "measured peak": [size(v) for v in frame["measured_bytes"]],
        "estimated peak": [size(v) for v in frame["estimated_bytes"]],
        "memory ratio": [ratio_text(None if pd.isna(v) else v) for v in frame["memory_ratio"]],
        "shards match": ["" if v is None else ("yes" if v else "NO") for v in frame["shards_match"]]})


@dataclass(frozen=True)
class Slowest:
    """The rank a run measured slowest, its times (ms) and the estimate's error on it."""

    rank: int
    measured_ms: float
    embedding_ms: float | None  # its own embedding work inside the step (None: the run did not time it)
    estimated_ms: float | None

    @property
    def error(self) -> float | None:
        """(estimated - measured) / measured: negative where the estimate is low."""
        return None if self.estimated_ms is None else (self.estimated_ms - self.measured_ms) / self.measured_ms


def slowest(frame: pd.DataFrame) -> Slowest | None:
    """The rank with the largest measured time (the lowest rank of a tie), or None when no rank measured one."""
    rows = frame[frame["measured_ms"].notna()]
    if rows.empty:
        return None
    row = rows.loc[rows["measured_ms"].astype(float).idxmax()]
    return Slowest(int(row["rank"]), float(row["measured_ms"]), _value(row["embedding_ms"]),
                   _value(row["estimated_ms"]))


def slowest_line(frame: pd.DataFrame, kind: str, device: str) -> str:
    """'Slowest rank 1: a step took 12.3 ms (its embedding work 4.56 ms); estimated 10.1 ms for cpu, 17.9% low.'
    (plain text; a dry-run's time is its kernels', against the estimate's compute)."""
    s = slowest(frame)
    if s is None:
        return "No rank measured a time."
    what = "its kernels took" if kind == "dryrun" else "a step took"
    own = "" if s.embedding_ms is None or kind == "dryrun" else f" (its embedding work {ms_text(s.embedding_ms)})"
    if s.error is None:
        return f"Slowest rank {s.rank}: {what} {ms_text(s.measured_ms)}{own}; no estimate for {device} to compare."
    side = "high" if s.error > 0 else "low"
    return (f"Slowest rank {s.rank}: {what} {ms_text(s.measured_ms)}{own}; estimated {ms_text(s.estimated_ms)} for "
            f"{device}, {pct_text(abs(s.error))} {side}.")


def summary_line(frame: pd.DataFrame) -> str:
    """'time 44x-59x · peak memory 9.19x · shards yes, all 2 ranks' (measured / estimated)."""
    return (f"time {span_text(span(frame, 'time_ratio'))} · peak memory {span_text(span(frame, 'memory_ratio'))}"
            f" · shards {shards_text(frame)}")


def combined(frames: dict[str, pd.DataFrame]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """{plan label: run_frame} as one long frame with a "plan" column (for charts.ratio_bars) and as one table
    to read (rank_table rows, plan first)."""
    long = pd.concat([f.assign(plan=label) for label, f in frames.items()], ignore_index=True)
    table = pd.concat([rank_table(f).assign(plan=label) for label, f in frames.items()], ignore_index=True)
    return long, table[["plan", *[c for c in table.columns if c != "plan"]]]


__all__ = [
    "COLUMNS",
    "RATIO_HIGH",
    "RATIO_LOW",
    "EMBEDDING",
    "Flag",
    "Slowest",
    "combined",
    "flags",
    "latest_run",
    "outside",
    "per_rank",
    "profile",
    "rank_table",
    "ratio",
    "ratio_text",
    "run_device",
    "run_frame",
    "same_device",
    "shards_text",
    "slowest",
    "slowest_line",
    "span",
    "span_text",
    "summary_line",
]
