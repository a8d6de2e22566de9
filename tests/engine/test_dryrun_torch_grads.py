"""The torch fallback's backward (engine.dryrun.torch_backend): each looked-up row's gradient summed over its ids as
fbgemm's fused backward makes it, checked against autograd's sparse gradient of the same lookups, for every pooling,
with and without per-sample weights, and the fused update it feeds against one applied to autograd's gradient."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from engine.dryrun import torch_backend as tb
from engine.types import Optimizer, PoolingType


def _lookups(seed: int, rows: int, bags: int, pooling: PoolingType, weighted: bool, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, 6, (bags,), generator=g)  # empty bags too
    ids = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)[:-1]])
    psw = torch.rand(len(ids), generator=g).to(dtype) if weighted else None
    out_rows = len(ids) if pooling is PoolingType.NONE else bags
    grad = torch.randn(out_rows, 8, generator=g).to(dtype)
    return ids, offsets, psw, grad


def _autograd(weight, ids, offsets, psw, grad, pooling):
    w = weight.clone().requires_grad_()
    out = F.embedding(ids, w, sparse=True) if pooling is PoolingType.NONE else F.embedding_bag(
        ids, w, offsets, mode=pooling.value, sparse=True, per_sample_weights=psw)
    out.backward(grad)
    g = w.grad.coalesce()
    return g.indices()[0], g.values()


@pytest.mark.parametrize("pooling,weighted", [(PoolingType.SUM, False), (PoolingType.SUM, True),
                                              (PoolingType.MEAN, False), (PoolingType.NONE, False)])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_row_gradients_match_autograds_sparse_gradient(pooling, weighted, seed):
    weight = torch.randn(50, 8)
    ids, offsets, psw, grad = _lookups(seed, 50, 40, pooling, weighted)
    rows, v = tb._row_grads(SimpleNamespace(pooling=pooling), ids, offsets, psw, grad)
    ref_rows, ref_v = _autograd(weight, ids, offsets, psw, grad, pooling)
    assert torch.equal(rows, ref_rows) and len(rows) == len(torch.unique(ids))
    torch.testing.assert_close(v, ref_v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opt", list(Optimizer))
def test_the_fused_update_on_row_gradients_is_the_update_on_autograds(opt):
    torch.manual_seed(3)
    start = torch.randn(60, 8)
    ids, offsets, psw, grad = _lookups(7, 60, 50, PoolingType.SUM, True)
    new, ref = start.clone(), start.clone()
    shapes = tb.STATE_PER_ROW[opt](8)
    s_new = [torch.rand((60, *sh)) for sh in shapes]
    s_ref = [x.clone() for x in s_new]
    for _ in range(3):  # state carries from step to step
        rows, v = tb._row_grads(SimpleNamespace(pooling=PoolingType.SUM), ids, offsets, psw, grad)
        tb._update(opt, new, s_new, rows, v, 0.1)
        r_rows, r_v = _autograd(ref, ids, offsets, psw, grad, PoolingType.SUM)
        tb._update(opt, ref, s_ref, r_rows, r_v, 0.1)
    assert not torch.equal(new, start)
    torch.testing.assert_close(new, ref, rtol=1e-5, atol=1e-6)
    for a, b in zip(s_new, s_ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_half_precision_weights_and_an_empty_step():
    weight = torch.randn(30, 8).half()
    ids, offsets, psw, grad = _lookups(4, 30, 20, PoolingType.MEAN, False, torch.float16)
    rows, v = tb._row_grads(SimpleNamespace(pooling=PoolingType.MEAN), ids, offsets, psw, grad)
    ref_rows, ref_v = _autograd(weight.float(), ids, offsets, psw, grad.float(), PoolingType.MEAN)
    assert torch.equal(rows, ref_rows)
    torch.testing.assert_close(v.float(), ref_v, rtol=2e-2, atol=2e-3)
    empty = tb._run(SimpleNamespace(pooling=PoolingType.SUM), lambda: torch.zeros(3, 8),
                    torch.zeros(0, dtype=torch.long), torch.zeros(3, dtype=torch.long), None, torch.ones(3, 8),
                    Optimizer.SGD, weight, [], 0.1)
    before = weight.clone()
    empty()
    assert torch.equal(weight, before)


TINY = {"tables": [{"name": "a", "num_embeddings": 300, "embedding_dim": 16},
                   {"name": "b", "num_embeddings": 200, "embedding_dim": 8}],
        "topology": {"world_size": 2, "compute_device": "cpu", "batch_size": 32, "optimizer": "adam"}}


def test_the_fallback_measures_with_the_heap_kept_and_says_so_and_fbgemm_does_not():
    from engine import parse_config, plan, run_dryrun
    from engine.dryrun import measure
    from engine.dryrun.types import Backend, DryrunSettings

    cfg = parse_config(TINY)
    tables = plan(cfg).tables
    fast = {"iters": 2, "warmup": 0}
    torch_run = run_dryrun(cfg, tables, DryrunSettings(backend=Backend.TORCH, **fast))
    assert torch_run.backend is Backend.TORCH and measure.KEPT_HEAP_NOTE in torch_run.notes
    sgd = parse_config({**TINY, "topology": {**TINY["topology"], "optimizer": "sgd"}})
    fb = run_dryrun(sgd, plan(sgd).tables, DryrunSettings(backend=Backend.FBGEMM, **fast))
    assert fb.backend is Backend.FBGEMM and measure.KEPT_HEAP_NOTE not in fb.notes
    with measure.kept_heap(False) as kept:
        assert kept is False
    with measure.kept_heap(True) as kept:  # glibc on this Linux
        assert kept is True
