"""On a GPU machine: a single-rank validation on CUDA with nccl (peak memory from the CUDA allocator).
Marked gpu and skipped where CUDA is absent; CI never needs a GPU.
"""

from __future__ import annotations

import json

import pytest

from tests.factories import tutorial, write
from tests.validate.conftest import FAST, run_cli, write_plan


def _cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return torch.cuda.is_available()


pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not _cuda(), reason="needs CUDA")]


def test_single_rank_validation_on_cuda(tmp_path):
    cfg = tutorial()
    cfg["topology"].update(world_size=1, local_world_size=1)
    config = write(tmp_path, cfg)
    plan = write_plan(config, tmp_path / "plan.json")
    p = run_cli("validate", str(config), "--plan", str(plan), "--device", "cuda", "--json", *FAST)
    assert p.returncode == 0, p.stderr[-4000:]
    data = json.loads(p.stdout)
    assert (data["status"], data["backend"], data["device"]) == ("succeeded", "nccl", "cuda")
    (rank,) = data["ranks"]
    assert rank["shards_match"] and rank["iteration_ms"] > 0
    assert rank["peak_bytes"] >= rank["state_bytes"] > 0  # max_memory_allocated covers the weights it holds
