"""The scaling benchmark's results drawn and tabulated: pure functions of the results dict that bench/scale.py
writes to scale.json (plotly figures, the Markdown report, the offline HTML page).
"""

from __future__ import annotations

import html as html_escape

import plotly.graph_objects as go

# What each chart draws: the cell's figure, its target's kind, the title, the y-axis title, the unit and the
# factor from the figure to that unit.
CHARTS = (
    ("wall_s", "wall_s", "Time to plan: the whole `python -m engine plan` process", "wall seconds", "s", 1.0),
    ("peak_rss_bytes", "peak_bytes", "Peak memory of the planning process (its ru_maxrss)", "peak RSS, MB", "MB",
     1e-6),
)
NOTE_CHARS = 160  # an error line in the Markdown table; scale.json keeps it whole


def _planned(cells: list[dict], ranks: int) -> list[dict]:
    return sorted((c for c in cells if c["ranks"] == ranks and c["status"] == "planned"), key=lambda c: c["pairs"])


def _figure(results: dict, key: str, target_kind: str, title: str, y_title: str, unit: str,
            scale: float) -> go.Figure:
    cells = results["cells"]
    fig = go.Figure()
    for ranks in sorted({c["ranks"] for c in cells}):
        planned = _planned(cells, ranks)
        fig.add_trace(go.Scatter(
            x=[c["pairs"] for c in planned], y=[c[key] * scale for c in planned], mode="lines+markers",
            name=f"{ranks:,} ranks", text=[f"{c['tables']:,} tables x {c['ranks']:,} ranks" for c in planned],
            hovertemplate="%{text}<br>%{x:,} pairs<br>%{y:.3g}<extra></extra>"))
    targets = [t for t in results["targets"] if t["what"] == target_kind]
    fig.add_trace(go.Scatter(
        x=[t["tables"] * t["ranks"] for t in targets], y=[t["value"] * scale for t in targets],
        mode="markers+text", name="targets", marker={"symbol": "star", "size": 14, "color": "crimson"},
        text=[f"target: {t['value'] * scale:g} {unit} at {t['tables']:,} x {t['ranks']:,}" for t in targets],
        textposition="top left", hovertemplate="%{text}<extra></extra>"))
    fig.update_xaxes(type="log", title="table-rank pairs (tables x ranks)")
    fig.update_yaxes(type="log", title=y_title)
    fig.update_layout(title=f"{title}, one line per rank count", legend_title="ranks")
    return fig


def figures(results: dict) -> list[go.Figure]:
    """Time and peak memory against table-rank pairs, log-log, one line per rank count (planned cells only),
    the issue's targets drawn as stars (one more trace, named "targets")."""
    return [_figure(results, *chart) for chart in CHARTS]


def html(results: dict) -> str:
    """One page with both charts and plotly.js inlined: it opens offline."""
    divs = [fig.to_html(full_html=False, include_plotlyjs=(i == 0), include_mathjax=False)
            for i, fig in enumerate(figures(results))]
    cmd = html_escape.escape(results["command"])
    return ("<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Planner scaling</title></head><body>\n"
            f"<h1>Planner scaling</h1>\n<p>Made by <code>{cmd}</code> on {html_escape.escape(results['date'])}, "
            f"{results['machine']['cpu_count']} cores.</p>\n" + "\n".join(divs) + "\n</body></html>\n")


def _num(x, fmt: str) -> str:
    return "-" if x is None else format(x, fmt)


def _cost(c: dict) -> str:
    if c["status"] != "planned":
        return "-"
    ratio = f" ({c['ratio']:.3f}x)" if c.get("ratio") is not None else ""
    return f"{c['max_rank_cost_ms']:.4g} / {c['lower_bound_ms']:.4g}{ratio}"


def _refusal(c: dict) -> str:
    inf = c.get("infeasible")
    if inf is None:
        return "-"
    return f"{inf['wall_s']:.2f}" if inf["status"] == "refused" else f"{inf['status']} ({inf['wall_s']:.2f})"


def _deterministic(c: dict) -> str:
    det = c.get("determinism")
    if det is None:
        return "-"
    return "yes" if det["identical"] else f"no ({det['loaded_run']['status']} under load)"


def _short(text: str, chars: int = NOTE_CHARS) -> str:
    return text if len(text) <= chars else text[:chars - 3] + "..."


def _notes(c: dict) -> str:
    parts = [_short(c["error"])] if c["error"] else []
    parts += c.get("notes", [])
    inf = c.get("infeasible")
    if inf is not None:
        parts.append(f"infeasible: {_short(inf['error']) or 'planned'}")
    return "; ".join(parts).replace("|", "\\|").replace("\n", " ")


def _row(c: dict) -> str:
    planned = c["status"] == "planned"
    load = f"{c['load_before'][0]:.1f} / {c['load_after'][0]:.1f}"
    return "| " + " | ".join([
        f"{c['tables']:,}", f"{c['ranks']:,}", f"{c['pairs']:,}", c["status"], f"{c['wall_s']:.2f}",
        f"{c['peak_rss_bytes'] / 1e6:.0f}", _num(c["bytes_per_pair"] if planned else None, ".0f"),
        _cost(c), _refusal(c), _deterministic(c), load, _notes(c)]) + " |"


def _target_lines(results: dict) -> list[str]:
    out = []
    for t in results["targets"]:
        cell = next((c for c in results["cells"] if (c["tables"], c["ranks"]) == (t["tables"], t["ranks"])), None)
        what = f"{t['value']:g} s" if t["what"] == "wall_s" else f"{t['value'] / 1e9:g} GB"
        head = f"- {what} at {t['tables']:,} tables x {t['ranks']:,} ranks: "
        if cell is None or cell["status"] != "planned":
            out.append(head + ("not run" if cell is None else cell["status"]))
            continue
        got = cell["wall_s"] if t["what"] == "wall_s" else cell["peak_rss_bytes"]
        shown = f"{got:.2f} s" if t["what"] == "wall_s" else f"{got / 1e9:.2f} GB"
        out.append(head + f"{shown}, {'met' if got <= t['value'] else 'not met'}")
    return out


def markdown(results: dict) -> str:
    """The report: the command and machine, one row per cell, the targets met or not."""
    m, s = results["machine"], results["settings"]
    head = ("| tables | ranks | pairs | status | wall s | peak MB | bytes per table-rank pair | slowest rank ms / "
            "lower bound | refusal s | deterministic under load | load 1 min before / after | notes |")
    lines = [
        "# Planner scaling", "",
        (f"Made by `{results['command']}` on {results['date']}: {m['cpu_count']} cores, {m['platform']}, "
        f"Python {m['python']}. Each cell runs the whole `python -m engine plan CONFIG --json --out PLAN` process "
        f"(median of {s['repeat']} run(s), timeout {s['timeout_s']:g} s); peak MB is that process's own peak "
        "RSS (ru_maxrss from wait4). 1-minute load average before / after the run: "
        f"{results['load_before'][0]:.2f} / {results['load_after'][0]:.2f}."), "",
        head, "|" + "|".join(["---"] * 12) + "|",
        *(_row(c) for c in results["cells"]), "",
        (f"Refusal s: time to refuse a config whose tables exceed all ranks' HBM and DDR together "
        f"(target <= {s['refusal_target_s']:g} s). Deterministic: the plan (JSON without planning_seconds, sha256) "
        "is the same on a quiet machine and with every core running a busy loop."), "",
        "Targets:", *_target_lines(results)]
    return "\n".join(lines) + "\n"
