"""The planning core: configs in, sharding plans out, and the estimates that score them.

Public API: load_config / parse_config, plan, evaluate, the plan-file helpers and the types.
Nothing here imports torch; engine.torchrec_compat and engine.dryrun do, when asked for (torchrec_planner below
imports it when called).
"""

from engine.config import complete_topology, config_to_dict, load_config, parse_config
from engine.errors import ConfigError, EngineError, PlanningError
from engine.evaluate import evaluate
from engine.planfile import load_plan, parse_plan, plan_to_dict, read_plan_file, read_rank_stats
from engine.planner import PlannerSettings, plan
from engine.report import summary, torchrec_format
from engine.types import (
    ComputeKernel,
    Config,
    Constraints,
    DataType,
    Device,
    MemoryParts,
    Optimizer,
    Perf,
    Plan,
    PoolingType,
    RankStats,
    Shard,
    ShardingType,
    TableConfig,
    TablePlan,
    Topology,
)

# ---- what the dashboard uses besides the core (it imports `engine` only, never a submodule) ------
from engine.atomicfile import write_json as write_json_file  # whole or not at all: temp file, fsync, rename
from engine.calibrate import BANDWIDTH_FIELDS, Calibration, apply_calibration
from engine.calibrate import fit as fit_calibration
from engine.config import CONSTRAINT_FIELDS, PROFILE_FIELD, TABLE_FIELDS, TOPOLOGY_FIELDS
from engine.constants import DATA_TYPE_BYTES
from engine.fields import BY_NAME as FIELDS
from engine.fields import CONSTRAINT, WORKLOAD_FIELD
from engine.fields import TABLE as TABLE_FIELD_DECLS
from engine.fields import Field, Kind as FieldKind
from engine.errors import human_bytes, one_line
from engine.jsonsafe import JsonError
from engine.enumerate import pricing_cache_info
from engine.jsonsafe import loads as json_loads
from engine.memory import OUT_OF_MEMORY
from engine.profile import FIXED_COSTS, parse_profile
from engine.replan import read_old_plan
from engine.replan import replan as replan_plan  # (not `replan`: that name is the submodule engine.replan)
from engine.report import has_moved, parameter_sharding_text, placement_text, ranks_list_text
from engine.sweep import ACCELERATORS, WORLD_SIZES, point_config
from engine.validate.types import RunStatus
from engine.widths import dim_note
from engine.workloads import CRITEO_1TB_EMBEDDING_DIM, CRITEO_1TB_MULTI_HOT, CRITEO_1TB_ROWS

# every field a table's constraints may hold: the scalars, and the workload block (no grid column: the grid keeps it)
CONSTRAINT_FIELD_DECLS = (*CONSTRAINT, WORKLOAD_FIELD)


def torchrec_planner():
    """engine.torchrec_compat.torchrec_plan (Config -> Plan: TorchRec's EmbeddingShardingPlanner, scored by our
    estimates), imported now: torch and torchrec load here, and whatever their import raises is raised."""
    from engine.torchrec_compat import torchrec_plan

    return torchrec_plan


__all__ = [
    # the core
    "ComputeKernel", "Config", "ConfigError", "Constraints", "DataType", "Device", "EngineError", "MemoryParts",
    "Optimizer", "Perf", "Plan", "PlannerSettings", "PlanningError", "PoolingType", "RankStats", "Shard",
    "ShardingType", "TableConfig", "TablePlan", "Topology", "complete_topology", "config_to_dict", "evaluate",
    "load_config", "load_plan", "parse_config", "parse_plan", "plan", "plan_to_dict", "read_plan_file",
    "read_rank_stats", "summary", "torchrec_format",
    # for the dashboard
    "ACCELERATORS", "BANDWIDTH_FIELDS", "CONSTRAINT_FIELDS", "Calibration", "CRITEO_1TB_EMBEDDING_DIM",
    "CRITEO_1TB_MULTI_HOT", "CRITEO_1TB_ROWS", "CONSTRAINT_FIELD_DECLS", "DATA_TYPE_BYTES", "FIELDS", "FIXED_COSTS",
    "Field", "FieldKind", "JsonError", "OUT_OF_MEMORY", "PROFILE_FIELD", "RunStatus", "TABLE_FIELDS",
    "TABLE_FIELD_DECLS",
    "TOPOLOGY_FIELDS", "WORLD_SIZES", "apply_calibration", "dim_note", "fit_calibration", "human_bytes", "json_loads",
    "one_line", "parameter_sharding_text", "parse_profile", "point_config", "pricing_cache_info", "read_old_plan",
    "replan_plan",
    "torchrec_planner", "write_json_file",
    # where a table is, and whether it moved (the dashboard's comparisons and the store's)
    "has_moved", "placement_text", "ranks_list_text",
]
