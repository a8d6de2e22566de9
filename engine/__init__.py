"""The planning core: configs in, sharding plans out, and the estimates that score them.

Public API: load_config / parse_config, plan, evaluate, the plan-file helpers and the types.
Nothing here imports torch; engine.torchrec_compat and engine.dryrun do, when asked for.
"""

from engine.config import config_to_dict, load_config, parse_config
from engine.errors import ConfigError, EngineError, PlanningError
from engine.evaluate import evaluate
from engine.planfile import load_plan, parse_plan, plan_to_dict
from engine.planner import PlannerSettings, plan
from engine.report import summary, torchrec_format
from engine.types import (
    ComputeKernel,
    Config,
    Constraints,
    DataType,
    Device,
    Optimizer,
    Plan,
    PoolingType,
    RankStats,
    Shard,
    ShardingType,
    TableConfig,
    TablePlan,
    Topology,
)

__all__ = [
    "ComputeKernel", "Config", "ConfigError", "Constraints", "DataType", "Device", "EngineError", "Optimizer",
    "Plan", "PlannerSettings", "PlanningError", "PoolingType", "RankStats", "Shard", "ShardingType",
    "TableConfig", "TablePlan", "Topology", "config_to_dict", "evaluate", "load_config", "load_plan",
    "parse_config", "parse_plan", "plan", "plan_to_dict", "summary", "torchrec_format",
]
