"""engine.memory: a rank's step memory part by part, worked out by hand for tiny tables, and what must hold for
any plan (the parts sum to the peak, the peak covers what is held, CPU memory is all DDR)."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import engine
from engine.evaluate import shard_arrays
from engine.memory import StepMemory
from engine.types import ComputeKernel as K
from engine.types import MemoryParts, Shard, TablePlan
from engine.types import ShardingType as S
from tests.factories import tutorial

CPU_RESERVED = int(128 * 2**30 * 0.15) + 1  # ddr_cap - usable_ddr_bytes (int() rounds the usable share down)


def config(rows: int, dim: int, st: str, optimizer: str = "sgd", batch: int = 4, pf: float = 2.0,
           device: str = "cpu", **constraints) -> engine.Config:
    return engine.parse_config({
        "tables": [{"name": "t", "num_embeddings": rows, "embedding_dim": dim}],
        "constraints": {"t": {"sharding_types": [st], "pooling_factors": [pf], **constraints}},
        "topology": {"world_size": 2, "compute_device": device, "batch_size": batch, "optimizer": optimizer}})


def memory(cfg: engine.Config, tables: dict[str, TablePlan]) -> list[MemoryParts]:
    return [r.memory for r in engine.evaluate(cfg, tables).ranks]


def held(cfg: engine.Config, tables: dict[str, TablePlan]) -> list[dict[str, int]]:
    m = StepMemory(cfg)
    for name, tp in tables.items():
        m.add(name, tp, *shard_arrays(cfg, name, tp))
    return m.held_by_rank()


def test_table_wise_by_hand():
    """100 x 8 fp32 on rank 0; 4 bags of 2 ids per rank; int64 ids, lengths and offsets; fp32 outputs."""
    cfg = config(100, 8, "table_wise")
    tw = {"t": TablePlan(S.TABLE_WISE, K.FUSED, (0,), (Shard((0, 0), (100, 8), 0),))}
    weights = 100 * 8 * 4
    kept = (2 * 8 + 2 * 4 + 1) * 8  # the kernel keeps the global batch's 16 ids, 8 lengths' offsets (+1)
    batch = (8 + 4 + 5) * 8  # the rank's KJT: 8 ids, 4 lengths, 5 offsets
    recat = (16 + 8) * 8  # received ids and lengths, recat for the kernel
    offsets = 9 * 8  # the kernel's offsets of this step (the kept ones are freed as they are replaced)
    lookup = 2 * 4 * 8 * 4  # the global batch's 8 bags x 8 columns, fp32
    a2a = 4 * 8 * 4 + lookup  # receive this rank's 4 bags x 8 columns; send a registered copy of the lookup
    owner, other = memory(cfg, tw)
    assert owner == MemoryParts(weights_bytes=weights, input_bytes=batch + recat + offsets, output_bytes=lookup,
                                a2a_bytes=a2a, reserved_bytes=CPU_RESERVED, held_bytes=weights + kept,
                                peak_bytes=weights + batch + recat + offsets + lookup + a2a,
                                peak_ddr_bytes=weights + batch + recat + offsets + lookup + a2a)
    grad = 4 * 8 * 4  # rank 1 holds nothing: its peak is the backward's contiguous gradient and what it sends
    assert other == MemoryParts(input_bytes=batch, output_grad_bytes=2 * grad, reserved_bytes=CPU_RESERVED,
                                peak_bytes=batch + 2 * grad, peak_ddr_bytes=batch + 2 * grad)
    assert held(cfg, tw) == [{"weights_bytes": weights, "optimizer_bytes": 0, "cache_bytes": 0, "grad_bytes": 0,
                              "input_bytes": kept}, {"weights_bytes": 0, "optimizer_bytes": 0, "cache_bytes": 0,
                                                     "grad_bytes": 0, "input_bytes": 0}]


def test_data_parallel_adam_by_hand():
    """10 x 4 fp32 replicated: DDP keeps a gradient bucket; Adam two moments and a step counter; its step's
    sqrt and division are the peak."""
    cfg = config(10, 4, "data_parallel", "adam", batch=2, pf=1.0)
    dp = {"t": TablePlan(S.DATA_PARALLEL, K.DENSE, (0, 1), None)}
    weights, state = 10 * 4 * 4, 2 * 10 * 4 * 4 + 4
    batch = (2 + 2 + 3) * 8
    expected = MemoryParts(weights_bytes=weights, optimizer_bytes=state + 2 * weights, grad_bytes=weights,
                           input_bytes=batch, reserved_bytes=CPU_RESERVED, held_bytes=2 * weights + state,
                           peak_bytes=2 * weights + state + 2 * weights + batch,
                           peak_ddr_bytes=2 * weights + state + 2 * weights + batch)
    assert memory(cfg, dp) == [expected, expected]


@pytest.mark.parametrize("optimizer,state", [("sgd", 0), ("adagrad", 100 * 4 * 4), ("rowwise_adagrad", 100 * 4),
                                             ("adam", 2 * 100 * 4 * 4)])
def test_fused_optimizer_state_is_fbgemms(optimizer, state):
    """fbgemm's momentum is fp32 per element (Adagrad), per row (row-wise Adagrad), two moments (Adam): for each
    100 x 4 column piece, whatever the weights' type."""
    cfg = config(100, 8, "column_wise", optimizer, min_partition=4)
    cw = {"t": TablePlan(S.COLUMN_WISE, K.FUSED, (0, 1),
                         (Shard((0, 0), (100, 4), 0), Shard((0, 4), (100, 4), 1)))}
    assert [h["optimizer_bytes"] for h in held(cfg, cw)] == [state, state]
    assert [h["weights_bytes"] for h in held(cfg, cw)] == [1600, 1600]


def test_row_wise_kernels_see_their_share_of_the_ids():
    """Uniform ids: a piece of 3/4 of the rows receives 3/4 of the global batch's ids, and every bag's length."""
    cfg = config(400, 8, "row_wise", pf=4.0)
    rw = {"t": TablePlan(S.ROW_WISE, K.FUSED, (0, 1), (Shard((0, 0), (300, 8), 0), Shard((300, 0), (100, 8), 1)))}
    global_ids, bags = 2 * 4 * 4, 2 * 4
    assert [h["input_bytes"] for h in held(cfg, rw)] == [(global_ids * 3 // 4 + bags + 1) * 8,
                                                         (global_ids // 4 + bags + 1) * 8]


def test_cuda_places_parts_by_kernel():
    """fused keeps everything in HBM; fused_uvm keeps weights and state in DDR; fused_uvm_caching adds an HBM
    cache of cache_load_factor of the rows and its index state (rows x (4 + 16 x clf) bytes)."""
    one = {"t": TablePlan(S.TABLE_WISE, K.FUSED, (0,), (Shard((0, 0), (1000, 8), 0),))}
    cfg = config(1000, 8, "table_wise", "rowwise_adagrad", device="cuda", compute_kernels=["fused", "fused_uvm",
                                                                                          "fused_uvm_caching"],
                 cache_load_factor=0.5)
    fused = memory(cfg, one)[0]
    assert fused.peak_ddr_bytes == 0 and fused.peak_hbm_bytes == fused.peak_bytes
    assert fused.reserved_bytes == 32 * 2**30 - int(32 * 2**30 * 0.85)
    uvm = memory(cfg, {"t": TablePlan(S.TABLE_WISE, K.FUSED_UVM, (0,), one["t"].shards)})[0]
    assert uvm.peak_ddr_bytes == 1000 * 8 * 4 + 1000 * 4 and uvm.peak_bytes == fused.peak_bytes
    assert uvm.ddr_weights_bytes == 1000 * 8 * 4 and fused.ddr_weights_bytes == 0  # the weights of peak_ddr_bytes
    cached = memory(cfg, {"t": TablePlan(S.TABLE_WISE, K.FUSED_UVM_CACHING, (0,), one["t"].shards)})[0]
    assert cached.cache_bytes == 1000 * 8 * 4 // 2 + 1000 * (4 + 8)
    assert cached.ddr_weights_bytes == 1000 * 8 * 4 and cached.peak_ddr_bytes == uvm.peak_ddr_bytes
    assert cached.peak_bytes == fused.peak_bytes + cached.cache_bytes


def test_plan_files_carry_the_parts_and_reading_ignores_them(tmp_path):
    cfg = engine.parse_config(tutorial())
    data = engine.plan_to_dict(engine.plan(cfg))
    for r in data["ranks"]:
        parts = {k[len("memory_"):]: v for k, v in r.items() if k.startswith("memory_")}
        assert set(parts) == set(MemoryParts().as_dict())
        assert parts["peak_bytes"] == sum(parts[p] for p in ("weights_bytes", "optimizer_bytes", "cache_bytes",
                                                             "grad_bytes", "input_bytes", "output_bytes",
                                                             "output_grad_bytes", "a2a_bytes"))
    edited = json.loads(json.dumps(data))
    edited["ranks"][0]["memory_peak_bytes"] = 1
    again = engine.plan_to_dict(engine.evaluate(cfg, engine.parse_plan(edited, cfg)))
    assert again["ranks"] == data["ranks"]


def test_the_tutorial_keeps_its_hbm_figure():
    """The new parts stand beside hbm_bytes / ddr_bytes, which stay TorchRec's figures (README's example)."""
    plan = engine.plan(engine.parse_config(tutorial()))
    assert [r.hbm_bytes for r in plan.ranks] == [1851392, 1851392]
    assert all(r.memory.peak_bytes > r.memory.held_bytes > 0 for r in plan.ranks)


SHARDINGS = ["table_wise", "row_wise", "column_wise", "table_row_wise", "table_column_wise", "data_parallel"]


@st.composite
def random_config(draw) -> dict:
    n = draw(st.integers(1, 5))
    tables = [{"name": f"t{i}", "num_embeddings": draw(st.integers(1, 5000)),
               "embedding_dim": draw(st.sampled_from([4, 8, 16, 32])), "feature_names": [f"f{i}", f"g{i}"][
                   :draw(st.integers(1, 2))], "data_type": draw(st.sampled_from(["fp32", "fp16"]))} for i in range(n)]
    constraints = {t["name"]: {"sharding_types": [draw(st.sampled_from(SHARDINGS))], "min_partition": 4,
                               "pooling_factors": [draw(st.floats(0.0, 8.0))]} for t in tables}
    topo = {"world_size": draw(st.sampled_from([1, 2, 3, 4])), "compute_device": draw(st.sampled_from(["cpu", "cuda"])),
            "batch_size": draw(st.integers(1, 64)),
            "optimizer": draw(st.sampled_from(["sgd", "adagrad", "rowwise_adagrad", "adam"]))}
    return {"tables": tables, "constraints": constraints, "topology": topo}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_config())
def test_parts_add_up_for_any_plan(raw):
    cfg = engine.parse_config(raw)
    plan = engine.plan(cfg, engine.PlannerSettings(search=False))
    dp_weights = sum(t.weight_bytes for t in cfg.tables if plan.tables[t.name].shards is None)
    model_parallel = sum(t.weight_bytes for t in cfg.tables if plan.tables[t.name].shards is not None)
    weights = 0
    for r in plan.ranks:
        m = r.memory
        parts = m.as_dict()
        assert m.peak_bytes == sum(parts[p] for p in ("weights_bytes", "optimizer_bytes", "cache_bytes", "grad_bytes",
                                                      "input_bytes", "output_bytes", "output_grad_bytes",
                                                      "a2a_bytes"))
        assert m.peak_bytes >= m.held_bytes >= m.weights_bytes >= 0
        assert min(parts.values()) >= 0
        assert m.peak_hbm_bytes + m.peak_ddr_bytes == m.peak_bytes
        if cfg.topology.compute_device is engine.Device.CPU:
            assert m.peak_hbm_bytes == 0
        weights += m.weights_bytes
    assert weights == pytest.approx(model_parallel + dp_weights * cfg.topology.world_size, abs=len(cfg.tables) * 4)


def test_the_summary_shows_the_fullest_ranks_parts():
    cfg = engine.parse_config(tutorial())
    plan = engine.plan(cfg)
    text = engine.summary(plan, cfg)
    fullest = max(plan.ranks, key=lambda r: r.memory.peak_bytes)
    line = next(ln for ln in text.splitlines() if ln.startswith("Step memory of rank"))
    assert line.startswith(f"Step memory of rank {fullest.rank} (largest peak): "
                           "2.84 MiB at the peak = weights 1.25 MiB")
    assert "all-to-all buffers 1.00 MiB" in line and "1.28 MiB held between steps" in line
