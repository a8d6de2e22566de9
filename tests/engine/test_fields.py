"""engine.fields declares every config field once: the declarations match the engine's types, and README's field
tables are the ones the declarations write (python -m engine.field_tables --readme rewrites them)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import engine
from engine import field_tables
from engine import fields as F
from engine.types import Constraints, TableConfig, Topology
from tests.factories import ROOT, tutorial


def test_declarations_match_the_types():
    assert F.TABLE_FIELDS == tuple(f.name for f in dataclasses.fields(TableConfig))
    assert set(F.CONSTRAINT_FIELDS) | {F.WORKLOAD_FIELD.name} == {f.name for f in dataclasses.fields(Constraints)}
    blocks = (F.PROFILE_FIELD.name, F.CUSTOM_TOPOLOGY_FIELD.name, F.RANK_DEVICES_FIELD.name,
              F.GROUP_FIELD.name)  # written only when given
    internal = ("sync_ms_per_byte",)  # set on a 2D group's topology (engine.replicas), never read from a file
    assert F.TOPOLOGY_FIELDS + blocks + internal == tuple(f.name for f in dataclasses.fields(Topology))


def test_readme_field_tables_are_current():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert field_tables.readme_with_tables(text) == text, \
        "README's field tables are stale: run python -m engine.field_tables --readme"


def test_markdown_prints_a_row_per_field():
    out = subprocess.run([sys.executable, "-m", "engine.field_tables", "--markdown"], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert not out.stderr
    out = out.stdout
    for name in F.BY_NAME:
        assert f"| `{name}` |" in out


def test_defaults_are_computed_from_the_declarations():
    c = Constraints()
    assert F.feature_values(c, "pooling_factors", 3) == (1.0, 1.0, 1.0)
    assert F.feature_values(c, "batch_sizes", 2, 512) == (512, 512)
    assert F.value(c, "cache_load_factor") == 0.2
    assert F.value(Constraints(cache_load_factor=0.5), "cache_load_factor") == 0.5


def test_every_torchrec_kernel_is_planned_or_refused_saying_why():
    """Each EmbeddingComputeKernel of TorchRec 1.8 is ours or refused with its reason (inference, offload, ...), in
    configs and plan files alike; a value TorchRec does not know either stays 'unknown'."""
    from torchrec.distributed.embedding_types import EmbeddingComputeKernel

    theirs = {k.value for k in EmbeddingComputeKernel}
    assert theirs - {k.value for k in engine.ComputeKernel} == set(F.TORCHREC_ONLY_KERNELS)
    for kernel, why in F.TORCHREC_ONLY_KERNELS.items():
        raw = tutorial()
        raw["constraints"] = {"large_table_0": {"compute_kernels": ["fused", kernel]}}
        with pytest.raises(engine.ConfigError) as e:
            engine.parse_config(raw)
        assert str(e.value).startswith(f"constraints.large_table_0.compute_kernels[1]: {kernel!r} {why}; use one of")
    plan = engine.plan_to_dict(engine.plan(engine.parse_config(tutorial())))
    plan["plan"]["large_table_0"]["compute_kernel"] = "quant"
    with pytest.raises(engine.EngineError) as e:
        engine.parse_plan(plan, engine.parse_config(tutorial()))
    assert "'quant' is one of TorchRec's inference kernels" in str(e.value)
    raw = tutorial()
    raw["constraints"] = {"large_table_0": {"compute_kernels": ["warp_speed"]}}
    with pytest.raises(engine.ConfigError, match="unknown value 'warp_speed'; use one of: dense, fused"):
        engine.parse_config(raw)
