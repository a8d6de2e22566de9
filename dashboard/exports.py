"""What the Plan page lets people take away: the plan JSON, TorchRec's text form, a Python snippet that
builds the ShardingPlan for DistributedModelParallel, and the share link of a saved plan.
"""

from __future__ import annotations

import json
from typing import Optional
from urllib.parse import urlencode, urlsplit, urlunsplit

import engine

SNIPPET_HEAD = '''"""ShardingPlan for DistributedModelParallel: {what}.

Made by the interactive sharding planner ({planner} planner): {n} tables on {w} ranks ({device}).
"""
from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
from torchrec.distributed.types import (
    CacheParams, EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan,
)

MODULE_PATH = {module_path!r}  # where the EmbeddingBagCollection sits in the model DMP wraps
DEVICE = {device!r}  # "cpu" to run the same placement on gloo
LOCAL_WORLD_SIZE = {lws}

# table: (sharding_type, compute_kernel, ranks, shards as ((row, col) offsets, (rows, cols) sizes, rank))
TABLES = {{
'''

SNIPPET_TAIL = '''}}
CACHE_LOAD_FACTORS = {cache!r}


def _placement(rank):
    if DEVICE == "cuda":
        return f"rank:{{rank}}/cuda:{{rank % LOCAL_WORLD_SIZE}}"
    return f"rank:{{rank}}/cpu"


def _parameter_sharding(name, sharding_type, kernel, ranks, shards):
    spec = None
    if shards is not None:
        spec = EnumerableShardingSpec([
            ShardMetadata(shard_offsets=list(o), shard_sizes=list(s), placement=_placement(r))
            for o, s, r in shards
        ])
    load = CACHE_LOAD_FACTORS.get(name)
    return ParameterSharding(
        sharding_type=sharding_type, compute_kernel=kernel, ranks=list(ranks), sharding_spec=spec,
        cache_params=CacheParams(load_factor=load) if load is not None else None,
    )


plan = ShardingPlan({{MODULE_PATH: EmbeddingModuleShardingPlan({{
    name: _parameter_sharding(name, *spec) for name, spec in TABLES.items()
}})}})

# model = DistributedModelParallel(model, plan=plan, sharders=[EmbeddingBagCollectionSharder()])
'''


def plan_json(plan: dict) -> str:
    return json.dumps(plan, indent=1) + "\n"


def config_json(config: dict) -> str:
    return json.dumps(config, indent=1) + "\n"


def _engine_plan(plan: dict, config: dict) -> tuple[engine.Plan, engine.Config]:
    cfg = engine.parse_config(config)
    scored = engine.evaluate(cfg, engine.parse_plan(plan, cfg), planner=str(plan.get("planner", "engine")))
    return scored, cfg


def torchrec_text(plan: dict, config: dict, module_path: str = "") -> str:
    """The plan as TorchRec prints a ShardingPlan (as in the sharding tutorial)."""
    scored, cfg = _engine_plan(plan, config)
    return engine.torchrec_format(scored, cfg, module_path) + "\n"


def python_snippet(plan: dict, config: dict, module_path: str = "", what: str = "") -> str:
    """Python that builds this plan's ShardingPlan with TorchRec's own classes (no dependency on us)."""
    cfg = engine.parse_config(config)
    placed = engine.parse_plan(plan, cfg)
    topo = cfg.topology
    lines = []
    for name, tp in placed.items():
        shards = None if tp.shards is None else tuple(
            (tuple(s.offsets), tuple(s.sizes), s.rank) for s in tp.shards)
        lines.append(f"    {name!r}: ({tp.sharding_type.value!r}, {tp.compute_kernel.value!r}, "
                     f"{list(tp.ranks)!r}, {shards!r}),\n")
    cache = {n: c.cache_load_factor for n, c in cfg.constraints.items() if c.cache_load_factor is not None}
    head = SNIPPET_HEAD.format(what=what or f"{len(placed)} tables", planner=plan.get("planner", "engine"),
                               n=len(placed), w=topo.world_size, device=topo.compute_device.value,
                               module_path=module_path, lws=topo.local_world_size)
    return head + "".join(lines) + SNIPPET_TAIL.format(cache=cache)


def share_link(token: str, public_url: Optional[str], browser_url: Optional[str], base_url_path: str = "") -> str:
    """The share link: under `public_url` (PLANNER_PUBLIC_URL, path kept) when set, else at the root of the
    app the browser is on (its host, Streamlit's server.baseUrlPath)."""
    if public_url:
        return share_url(public_url, token, urlsplit(public_url).path)
    return share_url(browser_url, token, base_url_path)


def share_url(app_url: Optional[str], token: str, base_path: str = "") -> str:
    """The link that opens a saved plan read-only: the app's root with ?plan=TOKEN. Without a known
    app URL (tests, scripts) it is a relative link."""
    query = urlencode({"plan": token})
    if not app_url:
        return f"?{query}"
    parts = urlsplit(app_url)
    path = "/" + base_path.strip("/") + "/" if base_path.strip("/") else "/"
    return urlunsplit((parts.scheme, parts.netloc, path, query, ""))
