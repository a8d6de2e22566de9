"""Checks at the store's door: every value a caller hands in, turned into a StoreError naming the field.

Configs and plans are validated by the engine (parse_config, parse_plan); a plan without per-rank
estimates gets them from engine.evaluate, so every stored plan can be compared rank by rank.
"""

from __future__ import annotations

import enum
import hashlib
import json
import math
import secrets
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from db.errors import StoreError
from db.models import LABEL_LEN, NAME_LEN, SHORT_LEN, TOKEN_LEN
from engine import ConfigError, config_to_dict, evaluate, parse_config, parse_plan, plan_to_dict

E = TypeVar("E", bound=enum.Enum)
TOKEN_BYTES = 16  # 128 random bits: unguessable, 22 URL-safe characters
TOKEN_ALPHABET = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
MIN_TOKEN_LEN = 16


def type_name(v: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "true/false", type(None): "null",
            int: "a number", float: "a number"}.get(type(v), type(v).__name__)


def new_token() -> str:
    """An unguessable share token that never starts with '-' (it would read as an option on a command line)."""
    while True:
        token = secrets.token_urlsafe(TOKEN_BYTES)
        if not token.startswith("-"):
            return token


def is_token(v: Any) -> bool:
    return isinstance(v, str) and MIN_TOKEN_LEN <= len(v) <= TOKEN_LEN and set(v) <= TOKEN_ALPHABET


def check_token(v: Any, field: str = "token") -> str:
    if not is_token(v):
        raise StoreError(f"{field}: {v!r} is not a share token (expected {MIN_TOKEN_LEN}-{TOKEN_LEN} "
                         "URL-safe characters, as printed by `python -m db save`)")
    return v


def check_str(v: Any, field: str, max_len: int = NAME_LEN, empty_ok: bool = True) -> str:
    if not isinstance(v, str):
        raise StoreError(f"{field}: must be a string, got {type_name(v)}")
    if not empty_ok and not v.strip():
        raise StoreError(f"{field}: must not be empty")
    if "\x00" in v:  # PostgreSQL text cannot hold NUL; refuse it on every backend alike
        raise StoreError(f"{field}: must not contain NUL (\\x00) characters")
    if len(v) > max_len:
        raise StoreError(f"{field}: is {len(v)} characters long; the limit is {max_len}")
    return v


def check_int(v: Any, field: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < minimum:
        raise StoreError(f"{field}: must be an integer >= {minimum}, got {v!r}")
    return v


def check_number(v: Any, field: str, minimum: float | None = None) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise StoreError(f"{field}: must be a finite number, got {v!r}")
    if minimum is not None and v < minimum:
        raise StoreError(f"{field}: must be >= {minimum:g}, got {v!r}")
    return float(v)


def check_enum(v: Any, field: str, cls: type[E]) -> E:
    try:
        return cls(v)
    except ValueError:
        choices = ", ".join(m.value for m in cls)
        raise StoreError(f"{field}: {v!r} is not one of {choices}") from None


def check_json_object(v: Any, field: str) -> dict:
    """A dict that survives JSON on every backend (PostgreSQL's json type rejects NaN and infinity)."""
    if not isinstance(v, dict):
        raise StoreError(f"{field}: must be a JSON object, got {type_name(v)}")
    try:
        json.dumps(v, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise StoreError(f"{field}: cannot be stored as JSON ({e})") from None
    return v


def check_time(v: Any, field: str, optional: bool = False) -> datetime | None:
    if v is None and optional:
        return None
    try:
        t = datetime.fromisoformat(v)
    except (TypeError, ValueError):
        raise StoreError(f"{field}: must be an ISO 8601 time such as 2026-01-31T12:00:00+00:00, "
                         f"got {v!r}") from None
    return t.replace(tzinfo=UTC) if t.tzinfo is None else t.astimezone(UTC)


def content_hash(data: Any) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def normalize_config(config: Any) -> dict:
    """The config with every default written out, as engine.config_to_dict gives it."""
    if not isinstance(config, dict):
        raise StoreError(f"config: must be a JSON object with tables, constraints and topology, "
                         f"got {type_name(config)}")
    try:
        return config_to_dict(parse_config(config))
    except ConfigError as e:
        raise StoreError(f"config: {e}") from None


@dataclass(frozen=True)
class RankEstimate:
    rank: int
    hbm_bytes: int
    ddr_bytes: int
    cost_ms: float


@dataclass(frozen=True)
class PreparedPlan:
    """A plan checked against its config, with what the plans and plan_ranks tables need."""

    config: dict
    plan: dict
    planner: str
    settings: dict
    ranks: tuple[RankEstimate, ...]
    planning_seconds: float
    num_tables: int
    world_size: int

    @property
    def max_rank_cost_ms(self) -> float:
        return max((r.cost_ms for r in self.ranks), default=0.0)

    @property
    def content_hash(self) -> str:
        return content_hash({"config": self.config, "plan": self.plan, "planner": self.planner,
                             "settings": self.settings})


def _ranks(raw: Any, world_size: int) -> tuple[RankEstimate, ...]:
    if not isinstance(raw, list) or not raw:
        raise StoreError(f"plan.ranks: must be a non-empty list of per-rank estimates, got {type_name(raw)}")
    out: list[RankEstimate] = []
    for i, r in enumerate(raw):
        f = f"plan.ranks[{i}]"
        if not isinstance(r, dict):
            raise StoreError(f"{f}: must be an object with rank, hbm_bytes, ddr_bytes and cost_ms")
        rank = check_int(r.get("rank"), f"{f}.rank")
        if rank >= world_size or any(o.rank == rank for o in out):
            raise StoreError(f"{f}.rank: {rank} is outside world_size {world_size} or listed twice")
        out.append(RankEstimate(rank, check_int(r.get("hbm_bytes"), f"{f}.hbm_bytes"),
                                check_int(r.get("ddr_bytes"), f"{f}.ddr_bytes"),
                                check_number(r.get("cost_ms"), f"{f}.cost_ms", 0.0)))
    return tuple(out)


def prepare_plan(config: Any, plan: Any, settings: Any = None, planner: str | None = None,
                 normalize: bool = True) -> PreparedPlan:
    """Validate a plan against its config; a bare placement gets its estimates from engine.evaluate.

    normalize=False keeps a valid config exactly as given (bundles: what was exported comes back).
    """
    norm = normalize_config(config)
    cfg = parse_config(norm)
    if not normalize:
        norm = check_json_object(config, "config")
    if not isinstance(plan, dict):
        raise StoreError(f"plan: must be a JSON object (the plan file), got {type_name(plan)}")
    try:
        tables = parse_plan(plan, cfg)
    except ConfigError as e:
        raise StoreError(f"the plan does not match its config: {e}") from None
    if "ranks" not in plan:
        name = plan.get("planner") if isinstance(plan.get("planner"), str) else "file"
        plan = plan_to_dict(evaluate(cfg, tables, planner=name))
    check_json_object(plan, "plan")
    planner = check_str(planner if planner is not None else plan.get("planner", "file"), "planner", SHORT_LEN,
                        empty_ok=False)
    settings = check_json_object({} if settings is None else settings, "settings")
    world = cfg.topology.world_size
    raw_seconds = plan.get("planning_seconds")  # null for a plan scored by engine.evaluate, not searched
    seconds = 0.0 if raw_seconds is None else check_number(raw_seconds, "plan.planning_seconds", 0.0)
    return PreparedPlan(norm, plan, planner, settings, _ranks(plan["ranks"], world), seconds, len(cfg.tables),
                        world)


def check_labels(label: Any, author: Any, config_name: Any) -> tuple[str, str, str]:
    return (check_str(label, "label", LABEL_LEN), check_str(author, "author", NAME_LEN),
            check_str(config_name, "config_name", NAME_LEN, empty_ok=False))


def check_metrics(metrics: Any, field: str = "metrics") -> list[dict]:
    """(rank, name, value, unit) tuples as rows for the metrics table."""
    if isinstance(metrics, (str, bytes, dict)) or not hasattr(metrics, "__iter__"):
        raise StoreError(f"{field}: must be a list of (rank, name, value, unit) tuples, got {type_name(metrics)}")
    rows = []
    for i, m in enumerate(metrics):
        f = f"{field}[{i}]"
        if not isinstance(m, (tuple, list)) or len(m) != 4:
            raise StoreError(f"{f}: must be a (rank, name, value, unit) tuple, got {m!r}")
        rank, name, value, unit = m
        rows.append({"rank": check_int(rank, f"{f}.rank"),
                     "name": check_str(name, f"{f}.name", NAME_LEN, empty_ok=False),
                     "value": check_number(value, f"{f}.value"), "unit": check_str(unit, f"{f}.unit", SHORT_LEN)})
    return rows
