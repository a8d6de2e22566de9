"""Config validation at the door: defaults, round trips, and one clear message per mistake."""

import copy

import pytest

import engine
from engine import ConfigError, config_to_dict, parse_config
from engine import constants as C
from engine.types import ComputeKernel, Device, ShardingType
from tests.factories import tutorial


def broken(path_and_value):
    cfg = tutorial("column_wise")
    path, value = path_and_value
    node = cfg
    *parents, last = path
    for key in parents:
        node = node[key]
    if value is DELETE:
        del node[last]
    else:
        node[last] = value
    return cfg


DELETE = object()

CASES = [
    # (where, new value, field named in the message, words in the message)
    (("tables", 0, "embedding_dim"), "64", "tables[0].embedding_dim", "must be an integer"),
    (("tables", 1, "num_embeddings"), 0, "tables[1].num_embeddings", "must be from 1 to 1,099,511,627,776, got 0"),
    (("tables", 1, "num_embeddings"), -5, "tables[1].num_embeddings", "must be from 1 to 1,099,511,627,776, got -5"),
    (("tables", 2, "embedding_dim"), 3.5, "tables[2].embedding_dim", "must be an integer"),
    (("tables", 0, "colour"), "red", "tables[0].colour", "unknown field"),
    (("tables", 0, "pooling"), "max", "tables[0].pooling", "use one of: sum, mean, none"),
    (("tables", 0, "name"), "", "tables[0].name", "must not be empty: give it a name"),
    (("tables", 0, "name"), "   ", "tables[0].name", "must not be blank (only spaces): give it a name"),
    (("tables", 0, "name"), ["t"], "tables[0].name", "must be a non-empty string, got a list"),
    (("tables", 0, "feature_names"), [], "tables[0].feature_names", "non-empty list"),
    (("tables", 3, "name"), "small_table_0", "tables[3].name", "duplicate table name 'small_table_0'"),
    (("tables", 0, "num_embeddings"), DELETE, "tables[0].num_embeddings", "is required"),
    (("constraints", "large_table_0", "sharding_types"), ["diagonal_wise"],
     "constraints.large_table_0.sharding_types[0]", "unknown value 'diagonal_wise'"),
    (("constraints", "large_table_0", "compute_kernels"), "fused", "constraints.large_table_0.compute_kernels",
     "must be a non-empty list"),
    (("constraints", "no_such_table"), {}, "constraints.no_such_table", "no table named 'no_such_table'"),
    (("constraints", "large_table_0", "cache_load_factor"), 1.5, "constraints.large_table_0.cache_load_factor",
     "at most 1"),
    (("constraints", "large_table_0", "pooling_factors"), [1.0, 2.0], "constraints.large_table_0.pooling_factors",
     "has 2 values but the table has 1 features"),
    (("constraints", "large_table_0", "min_partition"), True, "constraints.large_table_0.min_partition",
     "must be an integer"),
    (("topology", "world_size"), DELETE, "topology.world_size", "is required"),
    (("topology", "world_size"), 0, "topology.world_size", "must be from 1 to 16,384"),
    (("topology", "local_world_size"), 3, "topology.local_world_size", "must divide world_size (2)"),
    (("topology", "compute_device"), "tpu", "topology.compute_device", "use one of: cuda, cpu"),
    (("topology", "hbm_cap"), "32GB", "topology.hbm_cap", "must be an integer"),
    (("topology", "inter_host_bw"), 0, "topology.inter_host_bw", "must be from 1000 to 1e+12"),
    (("topology", "gpus"), 8, "topology.gpus", "unknown field"),
    (("extra",), 1, "extra", "unknown field; known fields: tables, constraints, topology"),
]


@pytest.mark.parametrize("where,value,field,words", CASES, ids=[c[2] for c in CASES])
def test_malformed_config_names_the_field(where, value, field, words):
    with pytest.raises(ConfigError) as e:
        parse_config(broken((where, value)))
    assert e.value.field == field
    assert words in str(e.value)
    assert "\n" not in str(e.value)


def test_feature_shared_by_two_tables_is_refused():
    cfg = tutorial()
    cfg["tables"][1]["feature_names"] = ["large_table_feature_0"]
    with pytest.raises(ConfigError, match=r"tables\[1\].feature_names: feature 'large_table_feature_0' is already"):
        parse_config(cfg)


def test_defaults_are_torchrecs():
    cfg = parse_config({"tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 8}],
                        "topology": {"world_size": 4}})
    t, topo = cfg.tables[0], cfg.topology
    assert t.feature_names == ("t",) and t.pooling.value == "sum" and t.data_type.value == "fp32"
    assert topo.local_world_size == 4 and topo.compute_device is Device.CUDA
    assert topo.hbm_cap == C.HBM_CAP_BYTES == 32 * 1024**3 and topo.ddr_cap == 128 * 1024**3
    assert topo.batch_size == 512 and topo.hbm_mem_bw == pytest.approx(897 * 1024**3 / 1000)
    assert cfg.constraint("t").sharding_types is None


def test_round_trip_keeps_everything():
    raw = tutorial("column_wise")
    raw["constraints"]["large_table_0"].update(pooling_factors=[3.5], cache_load_factor=0.3, is_weighted=True)
    cfg = parse_config(raw)
    again = parse_config(copy.deepcopy(config_to_dict(cfg)))
    assert again == cfg
    assert again.constraint("large_table_0").sharding_types == (ShardingType.COLUMN_WISE,)


def test_tutorial_kernel_names_are_accepted_as_aliases():
    raw = tutorial("table_wise")
    raw["constraints"]["large_table_0"]["compute_kernels"] = ["batched_fused"]
    assert parse_config(raw).constraint("large_table_0").compute_kernels == (ComputeKernel.FUSED,)


def test_integral_floats_are_accepted_for_sizes():
    raw = tutorial()
    raw["topology"]["hbm_cap"] = 3.4359738368e10
    assert parse_config(raw).topology.hbm_cap == 34359738368


def test_readme_documents_every_field_and_its_range():
    """README's config tables have a row, with a range column, for every field the reader knows."""
    from engine.config import CONSTRAINT_FIELDS, TABLE_FIELDS, TOPOLOGY_FIELDS
    from tests.factories import ROOT

    rows = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("| `")]
    for field in (*TABLE_FIELDS, *CONSTRAINT_FIELDS, *TOPOLOGY_FIELDS):
        row = next((r for r in rows if f"`{field}`" in r.split("|")[1]), None)
        assert row is not None, f"README has no row for {field}"
        assert len(row.split("|")) == 6, f"README's row for {field} has no range column: {row}"


@pytest.mark.parametrize("where,value,field", [
    (("tables", 0, "num_embeddings"), 2**62, "tables[0].num_embeddings"),
    (("tables", 0, "num_embeddings"), 1e308, "tables[0].num_embeddings"),
    (("tables", 0, "embedding_dim"), 10**15, "tables[0].embedding_dim"),
    (("topology", "world_size"), 10**15, "topology.world_size"),
    (("topology", "batch_size"), 1e30, "topology.batch_size"),
    (("topology", "ddr_mem_bw"), 1e-300, "topology.ddr_mem_bw"),
    (("topology", "hbm_cap"), 2**63, "topology.hbm_cap"),
    (("constraints", "large_table_0", "pooling_factors"), [1e308], "constraints.large_table_0.pooling_factors[0]"),
    (("tables", 0, "name"), "a\nb", "tables[0].name"),
    (("tables", 0, "name"), "x" * 257, "tables[0].name"),
])
def test_numbers_and_names_outside_their_range_name_field_and_range(where, value, field):
    with pytest.raises(ConfigError) as e:
        parse_config(broken((where, value)))
    assert e.value.field == field and "\n" not in str(e.value)
    assert "from" in str(e.value) or "at most" in str(e.value) or "printable" in str(e.value)


def test_complete_topology_writes_every_default_as_config_to_dict_does():
    raw = {"world_size": 4, "local_world_size": 2, "hbm_cap": 80 * 2**30}
    full = engine.complete_topology(raw)
    assert full == engine.config_to_dict(engine.parse_config(
        {"tables": [{"name": "t", "num_embeddings": 10, "embedding_dim": 8}], "topology": raw}))["topology"]
    assert set(full) == set(engine.TOPOLOGY_FIELDS) and full["hbm_cap"] == 80 * 2**30
    assert engine.complete_topology(full) == full
    with pytest.raises(engine.ConfigError, match="topology.local_world_size"):
        engine.complete_topology({"world_size": 4, "local_world_size": 3})
