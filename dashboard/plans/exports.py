"""What the Plan page lets people take away: the plan JSON, TorchRec's text form, a Python snippet that
builds the ShardingPlan for DistributedModelParallel, and the share link of a saved plan.
"""

from __future__ import annotations

import ast
import json
import math
from typing import Any, Optional
from urllib.parse import urlencode, urlsplit, urlunsplit

import engine

# Every value that comes from a user (label, planner, module path, table names) enters the snippet only as a
# Python literal written by `_literal` (repr, checked by ast.literal_eval), never inside a docstring or comment:
# no value can end a string and run as code.
SNIPPET_HEAD = '''"""ShardingPlan for DistributedModelParallel, made by the interactive sharding planner.

PLAN_LABEL and PLANNER say which plan; TABLES holds every table's placement.
"""
from torch.distributed._shard.sharding_spec import EnumerableShardingSpec, ShardMetadata
from torchrec.distributed.types import (
    CacheParams, EmbeddingModuleShardingPlan, ParameterSharding, ShardingPlan,
)

PLAN_LABEL = {what}
PLANNER = {planner}
WORLD_SIZE = {w}
SHARDING_GROUP_SIZE = {group}  # ranks the plan shards over; below WORLD_SIZE, each group holds a replica (2D)
MODULE_PATH = {module_path}  # where the EmbeddingBagCollection sits in the model DMP wraps
DEVICE = {device}  # "cpu" to run the same placement on gloo
LOCAL_WORLD_SIZE = {lws}

# table: (sharding_type, compute_kernel, ranks, shards as ((row, col) offsets, (rows, cols) sizes, rank))
TABLES = {{
'''

SNIPPET_TAIL = '''}}
CACHE_LOAD_FACTORS = {cache}
SHARDING_OPTIONS = {options}  # table: TorchRec options its constraints set (stochastic_rounding, enforce_hbm...)


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
        **SHARDING_OPTIONS.get(name, {{}}),
    )


plan = ShardingPlan({{MODULE_PATH: EmbeddingModuleShardingPlan({{
    name: _parameter_sharding(name, *spec) for name, spec in TABLES.items()
}})}})

'''
DMP_TAIL = "# model = DistributedModelParallel(model, plan=plan, sharders=[EmbeddingBagCollectionSharder()])\n"
# 2D: TorchRec 1.8's DMPCollection takes the group's plan and maps plan rank r of group g to world rank
# r * (WORLD_SIZE // SHARDING_GROUP_SIZE) + g itself (use_inter_host_allreduce=False, the mesh the estimate prices)
DMP_COLLECTION_TAIL = (
    "# from torchrec.distributed.model_parallel import DMPCollection\n"
    "# model = DMPCollection(module=model, device=torch.device(\"cuda\"), plan=plan, world_size=WORLD_SIZE,\n"
    "#                       sharding_group_size=SHARDING_GROUP_SIZE, global_pg=torch.distributed.group.WORLD,\n"
    "#                       sharders=[EmbeddingBagCollectionSharder()], use_inter_host_allreduce=False)\n"
    "# ... and model.sync() after each optimizer step: the all-reduce across groups the plan's estimate prices\n"
)

# the tables declared virtual and their EmbeddingBagConfig keywords (a Python literal): TorchRec 1.8 runs its
# virtual-table kernels only on those, with total_num_buckets and an eviction policy
VIRTUAL_NOTE = '''VIRTUAL_TABLES = {tables}  # table: its EmbeddingBagConfig keywords (policy: class, fields)


def virtual_table_keywords(name):
    """EmbeddingBagConfig(..., **virtual_table_keywords(name)): use_virtual_table=True and the rest."""
    from torchrec.modules import embedding_configs

    kw = dict(VIRTUAL_TABLES.get(name, {{}}))
    if "virtual_table_eviction_policy" in kw:
        cls, fields = kw["virtual_table_eviction_policy"]
        kw["virtual_table_eviction_policy"] = getattr(embedding_configs, cls)(**fields)
    return kw


'''
GRID_NOTE = ("# grid_shard row-splits each piece over one host's ranks, and TorchRec reads the ranks per host\n"
             "# from the launch (LOCAL_WORLD_SIZE, torchrun --nproc-per-node): launch that many ranks per host\n")


def plan_json(plan: engine.Plan) -> str:
    return json.dumps(engine.plan_to_dict(plan), indent=1) + "\n"


def config_json(config: engine.Config) -> str:
    return json.dumps(engine.config_to_dict(config), indent=1) + "\n"


def _in_config_order(plan: engine.Plan, config: engine.Config) -> list[tuple[str, engine.TablePlan]]:
    """The plan's tables in the config's order (as engine.parse_plan reads a plan file)."""
    return [(t.name, plan.tables[t.name]) for t in config.tables if t.name in plan.tables]


def _plain(value: Any) -> Any:
    """`value` as plain str/int/float/bool/None/list/tuple/dict; anything else (a str subclass with its own
    repr, an object, a non-finite float) raises ValueError, so no value can write more than a literal."""
    if value is None or type(value) in (bool, int, str):
        return value
    if type(value) is float and math.isfinite(value):
        return value
    if type(value) in (list, tuple):
        return type(value)(_plain(v) for v in value)
    if type(value) is dict:
        return {_plain(k): _plain(v) for k, v in value.items()}
    raise ValueError(f"cannot write {type(value).__name__} into the snippet; only plain literals are written")


def _literal(value: Any) -> str:
    """A one-line Python literal for `value`: repr escapes quotes, backslashes, newlines, NUL and every
    unprintable character (\\u2028, \\x0c...), and the text is read back to prove it is that value alone."""
    text = repr(_plain(value))
    if "\n" in text or "\r" in text or ast.literal_eval(text) != value:
        raise ValueError("a value did not survive being written as a Python literal")
    return text


def torchrec_text(plan: engine.Plan, config: engine.Config, module_path: str = "") -> str:
    """The plan as TorchRec prints a ShardingPlan (as in the sharding tutorial); names are Python literals."""
    body = ", ".join(f"{_literal(str(name))}: {engine.parameter_sharding_text(tp, config)}"
                     for name, tp in _in_config_order(plan, config))
    return (engine.dmp_collection_comment(config.topology) + engine.virtual_comment(config)
            + f"{{{_literal(str(module_path))}: {{{body}}}}}\n")


def python_snippet(plan: engine.Plan, config: engine.Config, module_path: str = "", what: str = "") -> str:
    """Python that builds this plan's ShardingPlan with TorchRec's own classes (no dependency on us)."""
    cfg = config
    placed = _in_config_order(plan, config)
    topo = cfg.topology
    lines = []
    for name, tp in placed:
        shards = None if tp.shards is None else tuple(
            (tuple(s.offsets), tuple(s.sizes), s.rank) for s in tp.shards)
        row = (tp.sharding_type.value, tp.compute_kernel.value, list(tp.ranks), shards)
        lines.append(f"    {_literal(str(name))}: {_literal(row)},\n")
    # the cache size the plan was made with: the planner's choice (engine.clf) where it chose one, else the typed one
    cache = {n: cfg.constraint(n).cache_load_factor if tp.cache_load_factor is None else tp.cache_load_factor
             for n, tp in placed}
    cache = {n: v for n, v in cache.items() if v is not None}
    options = {n: o for n, _ in placed if (o := engine.sharding_options(cfg.constraint(n)))}
    group = engine.group_topology(topo)  # 2D: the plan is one group's, its placements on the group's hosts
    head = SNIPPET_HEAD.format(what=_literal(str(what or f"{len(placed)} tables")),
                               planner=_literal(str(plan.planner)), w=int(topo.world_size),
                               device=_literal(topo.compute_device.value), module_path=_literal(str(module_path)),
                               lws=int(group.local_world_size), group=int(group.world_size))
    grid = any(tp.sharding_type is engine.ShardingType.GRID_SHARD for _, tp in placed)
    wrap = DMP_COLLECTION_TAIL if engine.replica_count(topo) > 1 else DMP_TAIL
    virtual = {str(t.name): kw for t in cfg.tables if (kw := engine.virtual_table_keywords(t))}
    return (head + "".join(lines) + SNIPPET_TAIL.format(cache=_literal(cache), options=_literal(options))
            + (VIRTUAL_NOTE.format(tables=_literal(virtual)) if virtual else "") + wrap + (GRID_NOTE if grid else ""))


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
