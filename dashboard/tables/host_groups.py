"""A mixed fleet (topology.custom_topology_data: HBM, DDR and SSD capacities per rank; topology.rank_devices: each
rank's accelerator) as the Topology page edits it: groups of hosts, "hosts 0-1: 80 GiB HBM, h100_80gb; hosts 2-3:
40 GiB, a100_40gb", not one row per rank. Plain Python: the page shows the rows these functions make and hands back
what the user typed.
"""

from __future__ import annotations

import re

import engine

GIB = 2**30
FIELD = "custom_topology_data"
DEVICES_FIELD = "rank_devices"
HOSTS, HBM, DDR, SSD, DEVICE = "hosts", "HBM (GiB)", "DDR (GiB)", "SSD (GiB)", "device"
COLUMNS = (HOSTS, HBM, DDR, SSD, DEVICE)
_RANGE = re.compile(r"^\s*(\d+)\s*(?:-\s*(\d+)\s*)?$")


def _sizes(topo: dict) -> tuple[int, int]:
    """(world_size, local_world_size) of a topology the engine accepts (engine.complete_topology)."""
    return int(topo["world_size"]), int(topo.get("local_world_size") or topo["world_size"])


def per_rank(topo: dict) -> tuple[list[int], list[int], list[int]]:
    """Every rank's HBM, DDR and SSD bytes: its own where custom_topology_data gives them, else the topology's."""
    ws, _ = _sizes(topo)
    custom = topo.get(FIELD) or {}
    return tuple(list(custom.get(k) or [_cap(topo, k)] * ws) for k in ("hbm_cap", "ddr_cap", "ssd_cap"))


def _cap(topo: dict, key: str) -> int:
    """The topology's capacity of one kind, its default where an older session's topology lacks it (ssd_cap)."""
    return int(topo.get(key, engine.FIELDS[key].default))


def per_rank_devices(topo: dict) -> list[str | None]:
    """Every rank's accelerator where topology.rank_devices names them, else None for each."""
    ws, _ = _sizes(topo)
    out: list[str | None] = []
    for g in topo.get(DEVICES_FIELD) or []:
        out += [g["device"]] * int(g["ranks"])
    return out if len(out) == ws else [None] * ws


def hosts_text(hosts: list[int]) -> str:
    """Host numbers as ranges: [0, 1, 2, 5] -> "0-2, 5"."""
    out, start = [], None
    for i, h in enumerate(hosts):
        if start is None:
            start = h
        if i + 1 == len(hosts) or hosts[i + 1] != h + 1:
            out.append(str(start) if start == h else f"{start}-{h}")
            start = None
    return ", ".join(out)


def groups(topo: dict) -> list[dict] | None:
    """The topology's memory as rows of consecutive hosts whose ranks all have the same HBM, DDR, SSD and device:
    {hosts, HBM (GiB), DDR (GiB), SSD (GiB)}, and the device where the topology names devices. None where some host's
    ranks differ among themselves (a host's group cannot say it)."""
    ws, lws = _sizes(topo)
    hbm, ddr, ssd = per_rank(topo)
    dev = per_rank_devices(topo)
    rows: list[tuple] = []
    last = None
    for host in range(ws // lws):
        ranks = range(host * lws, (host + 1) * lws)
        caps = {(hbm[r], ddr[r], ssd[r], dev[r]) for r in ranks}
        if len(caps) > 1:
            return None
        cap, = caps
        if last is not None and cap == last[0]:
            last[1].append(host)
        else:
            last = (cap, [host])
            rows.append(last)
    named = DEVICES_FIELD in topo
    return [{HOSTS: hosts_text(hs), HBM: h / GIB, DDR: d / GIB, SSD: x / GIB, **({DEVICE: kind} if named else {})}
            for (h, d, x, kind), hs in rows]


def parse_hosts(text: object, num_hosts: int) -> list[int] | str:
    """ "0-1, 3" -> [0, 1, 3]; or what is wrong with it, in words."""
    if not isinstance(text, str) or not text.strip():
        return "name its hosts, e.g. 0-1 or 2, 3"
    out: list[int] = []
    for part in text.split(","):
        m = _RANGE.match(part)
        if not m:
            return f"{part.strip()!r} is not a host or a range of hosts such as 0-1"
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            return f"the range {lo}-{hi} runs backwards"
        if hi >= num_hosts:
            return f"host {hi} does not exist: the topology has hosts 0-{num_hosts - 1}"
        out.extend(range(lo, hi + 1))
    return out


def _gib(v: object, what: str) -> float | str:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or v < 0:
        return f"{what} must be a number of GiB, 0 or more"
    return float(v)


def _device(v: object) -> str | None:
    """A group's device cell: None where blank; an accelerator's key; or what is wrong with it (starting "!")."""
    if v is None or (isinstance(v, float) and v != v) or (isinstance(v, str) and not v.strip()):
        return None
    name = str(v).strip()
    if name not in engine.ACCELERATORS:
        return f"!unknown device {name[:40]!r}; known devices: {', '.join(engine.ACCELERATORS)}"
    return name


def with_groups(topo: dict, rows: list[dict]) -> tuple[dict, str | None]:
    """The topology with each group's hosts given its HBM, DDR and SSD (hosts in no group keep the topology's hbm_cap,
    ddr_cap and ssd_cap; a blank SSD, the topology's), as custom_topology_data (an ssd_cap list only where a rank's
    differs), and its device where any group names one, as rank_devices (a group with a
    device and no HBM takes the device's); or the topology unchanged and the first problem, naming its row."""
    ws, lws = _sizes(topo)
    num_hosts = ws // lws
    hbm, ddr, ssd = [_cap(topo, "hbm_cap")] * ws, [_cap(topo, "ddr_cap")] * ws, [_cap(topo, "ssd_cap")] * ws
    devices: list[str | None] = [None] * ws
    owner: dict[int, int] = {}
    for i, row in enumerate(rows, start=1):
        hosts = parse_hosts(row.get(HOSTS), num_hosts)
        kind = _device(row.get(DEVICE))
        if kind is not None and kind.startswith("!"):
            return topo, f"Group {i}: {kind[1:]}."
        given = row.get(HBM)
        if kind is not None and (given is None or (isinstance(given, float) and given != given)):
            given = engine.ACCELERATORS[kind].hbm_gib
        h, d = _gib(given, HBM), _gib(row.get(DDR), DDR)
        x = row.get(SSD)
        x = _cap(topo, "ssd_cap") / GIB if x is None or x != x else _gib(x, SSD)
        problem = next((p for p in (hosts, h, d, x) if isinstance(p, str)), None)
        if problem is None:
            again = next((x for x in hosts if x in owner), None)
            if again is not None:
                problem = f"host {again} is in group {owner[again]} too: give each host one group"
        if problem is not None:
            return topo, f"Group {i}: {problem}."
        for host in hosts:
            owner[host] = i
            for r in range(host * lws, (host + 1) * lws):
                hbm[r], ddr[r], ssd[r], devices[r] = int(round(h * GIB)), int(round(d * GIB)), int(round(x * GIB)), kind
    out = without_groups(topo)
    if owner:
        out[FIELD] = {"hbm_cap": hbm, "ddr_cap": ddr,
                      **({"ssd_cap": ssd} if any(v != _cap(topo, "ssd_cap") for v in ssd) else {})}
    if any(devices):
        missing = next((r // lws for r, k in enumerate(devices) if k is None), None)
        if missing is not None:
            where = f"group {owner[missing]}" if missing in owner else "no group"
            return topo, (f"Host {missing} ({where}) has no device: once one group names a device, every host "
                          "needs one (or clear the device column).")
        out[DEVICES_FIELD] = _runs(devices)
    return out, None


def _runs(devices: list) -> list[dict]:
    """Per-rank devices as rank_devices' groups of consecutive ranks."""
    out: list[dict] = []
    for k in devices:
        if out and out[-1]["device"] == k:
            out[-1]["ranks"] += 1
        else:
            out.append({"ranks": 1, "device": k})
    return out


def without_groups(topo: dict) -> dict:
    return {k: v for k, v in topo.items() if k not in (FIELD, DEVICES_FIELD)}


def keep_groups(before: dict, after: dict) -> dict:
    """`after` (the Topology form's values, which have no per-rank lists) with `before`'s lists while the ranks are
    the same: the form's other inputs do not drop a mixed fleet's capacities."""
    kept = {k: before[k] for k in (FIELD, DEVICES_FIELD) if k in before and k not in after}
    if not kept or _sizes(before)[0] != _sizes(after)[0]:
        return after
    return {**after, **kept}


def summary(topo: dict) -> str:
    """The memory of a mixed fleet in a line: "hosts 0-1: 80 GiB HBM, 512 GiB DDR; hosts 2-3: 40 GiB HBM, ..."."""
    rows = groups(topo)
    if rows is None:
        return "the ranks of a host differ in memory (set per rank in the config file)"
    ssd = "ssd_cap" in (topo.get(FIELD) or {})
    return "; ".join(f"hosts {r[HOSTS]}: {engine.human_bytes(round(r[HBM] * GIB))} HBM, "
                     f"{engine.human_bytes(round(r[DDR] * GIB))} DDR"
                     + (f", {engine.human_bytes(round(r[SSD] * GIB))} SSD" if ssd else "")
                     + (f", {r[DEVICE]}" if r.get(DEVICE) else "") for r in rows)
