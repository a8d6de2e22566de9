"""The planning core: configs in, sharding plans out, and the estimates that score them.

Public API: load_config / parse_config, plan, evaluate, the plan-file helpers and the types; then what the
dashboard and the store use besides (they import `engine` only, never a submodule: tests/test_engine_api.py).
Nothing here imports torch; engine.torchrec_compat and engine.dryrun do, when asked for (torchrec_planner below
imports it when called).
"""

from engine.config import complete_topology, config_to_dict, load_config, parse_config
from engine.errors import ConfigError, EngineError, PlanningError
from engine.evaluate import evaluate
from engine.planfile import load_plan, parse_plan, plan_to_dict, read_plan_file, read_rank_stats
from engine.planner import PlannerSettings, plan
from engine.keep import keep_baseline  # a plan in use kept unless ours is estimably faster (--baseline)
from engine.table_costs import apply_table_costs  # tables measured alone (measure-tables, plan --table-costs)
from engine.fields import PRESSURE_TERM  # the profile term plan --table-costs sets
from engine.table_costs import rank_pieces as pressure_pieces  # each rank's pieces as the pressure sees them
from engine.estimate import column_share  # a column piece's share of its measured table's compute
from engine.table_costs import column_width  # the half-width copy measure-tables dry-runs of a table, or None
from engine.table_costs import column_ratio  # a half-width copy's compute over its table's, from a costs file
from engine.table_costs import gain_margin  # --min-gain auto: the estimate's error on the probe ranks, x sqrt(2)
from engine.table_costs import pressure_fit, probe_fit  # the tables' cost to each other, fitted on the probes
from engine.table_costs import without_table_costs  # a config dict without the table costs applied to it
from engine.table_costs import measured_fixed_costs  # the fixed costs a profile dict prices as measure-tables measured
from engine.workset import pressure as workset_pressure  # how far a working set is up the pressure ramp, 0 to 1
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
from engine.fields import sharding_options
from engine.errors import human_bytes, one_line
from engine.jsonsafe import JsonError
from engine.enumerate import pricing_cache_info
from engine.jsonsafe import loads as json_loads
from engine.memory import OUT_OF_MEMORY
from engine.profile import FIXED_COSTS, parse_profile
from engine.replan import moved_bytes as replan_moved_bytes
from engine.replan import read_old_plan
from engine.replicas import describe as group_line  # 2D: group size and replicas in one line (None without)
from engine.replicas import dmp_collection_comment, group_topology, replica_count
from engine.replan import replan as replan_plan  # (not `replan`: that name is the submodule engine.replan)
from engine.report import has_moved, parameter_sharding_text, placement_text, ranks_list_text
from engine.sweep import ACCELERATORS, WORLD_SIZES, point_config
from engine.fleet import rank_device_names
from engine.sweep import mix_text as sweep_mix_text, parse_mix as parse_sweep_mix
from engine.capacity import ssd_cap_of
from engine.tiers import ssd_by_rank  # each rank's SSD bytes under a plan (key_value's backing store)
from engine.tiers import virtual_comment  # TorchRec-format text: the tables declared virtual
from engine.virtual import keywords as virtual_table_keywords  # their EmbeddingBagConfig keywords, as literals
from engine.virtual import POLICY_TYPES as EVICTION_POLICY_TYPES  # TorchRec's policy classes by our type name
from engine.validate.types import RunStatus
from engine.widths import dim_note
from engine.workloads import CRITEO_1TB_EMBEDDING_DIM, CRITEO_1TB_MULTI_HOT, CRITEO_1TB_ROWS
from engine.stats.command import applied as apply_workload  # the config with the sample's figures written in
from engine.stats.command import progress_text as stats_progress_text  # "42% of N rows read (M ids so far)"
from engine.stats.compute import workload_stats
from engine.stats.sample import SampleError, read_sample, sample_rows


# ---- what the store (db) uses besides the core: files, limits, and the measuring commands it records -----------
from engine.atomicfile import write_text as write_text_file
from engine.dryrun.command import add_dryrun_arguments, dryrun_result
from engine.limits import MAX_WORLD_SIZE
from engine.planfile import MEMORY_PREFIX, PLAN_FORMAT_VERSION
from engine.report import placement_words
from engine.validate.command import EXIT_CODES as RUN_EXIT_CODES
from engine.validate.command import add_validate_arguments, run_validate
from engine.validate.command import say as say_progress
from engine.validate.run import Stopped, stop_on_sigterm
from engine.validate.types import Job as ValidationJob
from engine.validate.types import ValidationResult
from engine.validate.worker import cpu_device_info, cpu_name, machine_identity
# calibration from stored runs: one lookup scalar (engine.calibrate), and each cost term per device (calibrate_terms)
from engine.calibrate import HeldOut, StepObservation, median_error
from engine.calibrate import leave_one_out as calibration_leave_one_out
from engine.calibrate import observation as step_observation
from engine.calibrate_apply import apply_terms
from engine.calibrate_terms import TermFit, TermRun, fit_terms, held_out_predictions, term_run
from engine.calibrate_terms import TERM_DEFAULTS as CPU_TERM_DEFAULTS  # a TermRun's design columns, in order

# ---- what bench/ uses besides: the engine's parts it measures (kernels, cost terms, the re-planner's moves) -------
from engine.constants import BWD_COMPUTE_MULTIPLIER, DDR_MEM_BW, MIN_CW_DIM, OPTIMIZER_STATE_BYTES
from engine.dryrun import Backend as DryrunBackend
from engine.dryrun import DryrunSettings, run_dryrun, spearman
from engine.dryrun.types import SCHEDULE_ONE_BY_ONE, SCHEDULE_TURNS  # how a dry-run ordered its ranks' steps
from engine.pricing import priced_for  # a config priced for the device a dry-run or validation run measures on
from engine.dryrun.pieces import rank_pieces
from engine.dryrun.workload import rank_steps
from engine.estimate import decades as cost_decades
from engine.fitting import nnls
from engine.limits import MAX_CAP_BYTES, MAX_TABLES
from engine.replan import OldTable, Replan
from engine.replan import ddr_piece_ms as replan_ddr_piece_ms
from engine.replan.moves import bytes_per_element as replan_bytes_per_element
from engine.stats.lru import EXACT_MAX_LOOKUPS
from engine.sweep import candidate_topology as sweep_topology  # a sweep point's topology (accelerator, world size)
from engine.workset import distinct_rows, prices_pressure

# every field a table's constraints may hold: the scalars, and the workload block (no grid column: the grid keeps it)
CONSTRAINT_FIELD_DECLS = (*CONSTRAINT, WORKLOAD_FIELD)


def generated_sample_bytes(*args, **kwargs) -> bytes:
    """engine.stats.generate.to_bytes (a seeded sample's bytes), imported when called: importing it here would put
    the module in sys.modules before `python -m engine.stats.generate` runs it, which Python warns about."""
    from engine.stats.generate import to_bytes

    return to_bytes(*args, **kwargs)


def fbgemm_rank():
    """engine.dryrun.fbgemm_backend.FbgemmRank (one rank's fbgemm TBEs, timed as a dry-run times them), imported now:
    torch and fbgemm load here."""
    from engine.dryrun.fbgemm_backend import FbgemmRank

    return FbgemmRank


def measure_tables(cfg: Config, settings: DryrunSettings, reps: int = 3, collectives: bool = True) -> dict:
    """engine.dryrun.table_costs.measure_tables (a measure-tables file's content for a config already priced for the
    device; collectives False: no gloo round timed), imported when called: torch loads then."""
    from engine.dryrun.table_costs import measure_tables as measure

    return measure(cfg, settings, reps, collectives=collectives)


def torchrec_rank_costs(cfg: Config, plan: Plan):
    """Each rank's summed TorchRec `Perf.total` for our plan (engine.torchrec_costs; torch and torchrec load on the
    first call)."""
    from engine.torchrec_costs import torchrec_rank_costs as costs

    return costs(cfg, plan)


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
    "apply_table_costs", "without_table_costs", "measured_fixed_costs", "gain_margin", "PRESSURE_TERM",
    "pressure_pieces", "workset_pressure",
    "column_width", "column_share", "column_ratio",
    "prices_pressure", "keep_baseline", "load_config",
    "load_plan", "parse_config", "parse_plan", "plan",
    "plan_to_dict", "read_plan_file", "read_rank_stats", "summary", "torchrec_format",
    # for the dashboard
    "apply_workload", "generated_sample_bytes", "read_sample", "SampleError", "sample_rows", "stats_progress_text",
    "workload_stats",
    "ACCELERATORS", "BANDWIDTH_FIELDS", "CONSTRAINT_FIELDS", "Calibration", "CRITEO_1TB_EMBEDDING_DIM",
    "CRITEO_1TB_MULTI_HOT", "CRITEO_1TB_ROWS", "CONSTRAINT_FIELD_DECLS", "DATA_TYPE_BYTES", "FIELDS", "FIXED_COSTS",
    "Field", "FieldKind", "JsonError", "OUT_OF_MEMORY", "PROFILE_FIELD", "RunStatus", "TABLE_FIELDS",
    "TABLE_FIELD_DECLS",
    "TOPOLOGY_FIELDS", "WORLD_SIZES", "apply_calibration", "dim_note", "fit_calibration", "human_bytes", "json_loads",
    "one_line", "parameter_sharding_text", "parse_profile", "point_config", "pricing_cache_info", "rank_device_names",
    "parse_sweep_mix", "sweep_mix_text",
    "read_old_plan",
    "replan_moved_bytes", "replan_plan", "sharding_options", "dmp_collection_comment", "virtual_comment",
    "virtual_table_keywords", "group_line", "EVICTION_POLICY_TYPES",
    "group_topology", "replica_count", "ssd_by_rank", "ssd_cap_of",
    "torchrec_planner", "write_json_file",
    # where a table is, and whether it moved (the dashboard's comparisons and the store's)
    "has_moved", "placement_text", "placement_words", "ranks_list_text",
    # for the store
    "MAX_WORLD_SIZE", "MEMORY_PREFIX", "PLAN_FORMAT_VERSION", "RUN_EXIT_CODES", "Stopped", "ValidationJob",
    "ValidationResult", "add_dryrun_arguments", "add_validate_arguments", "dryrun_result", "run_validate",
    "say_progress", "stop_on_sigterm", "write_text_file", "cpu_device_info", "cpu_name", "machine_identity",
    "HeldOut", "StepObservation", "TermFit", "TermRun", "apply_terms", "calibration_leave_one_out", "fit_terms",
    "held_out_predictions", "median_error", "step_observation", "term_run", "CPU_TERM_DEFAULTS",
    # for bench
    "BWD_COMPUTE_MULTIPLIER", "DDR_MEM_BW", "DryrunBackend", "DryrunSettings", "EXACT_MAX_LOOKUPS", "MAX_CAP_BYTES",
    "MAX_TABLES", "MIN_CW_DIM", "OPTIMIZER_STATE_BYTES", "OldTable", "Replan", "cost_decades", "distinct_rows",
    "fbgemm_rank", "nnls", "rank_pieces", "rank_steps", "replan_bytes_per_element", "replan_ddr_piece_ms",
    "run_dryrun", "spearman", "sweep_topology", "measure_tables", "pressure_fit", "probe_fit", "priced_for",
    "SCHEDULE_ONE_BY_ONE", "SCHEDULE_TURNS",
    "torchrec_rank_costs",
]
