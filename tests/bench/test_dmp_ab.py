"""bench.dmp_ab: two plans of a config in real DMP steps (torchrun, gloo, CPU), alternating in rotated rounds, with
the step and the embedding time compared and the A/A noise beside them."""

import json

from bench import dmp_ab
import engine
from tests.factories import tutorial, write


def test_rounds_rotate_so_each_run_takes_every_position():
    assert [dmp_ab.rotated(i) for i in range(4)] == [("a", "b", "a_again"), ("b", "a_again", "a"),
                                                     ("a_again", "a", "b"), ("a", "b", "a_again")]


def test_two_plans_of_the_tutorial_in_real_steps(tmp_path, capsys):
    raw = tutorial("table_wise")
    raw["topology"]["compute_device"] = "cpu"
    cfg = engine.parse_config(raw)
    config = write(tmp_path, engine.config_to_dict(cfg))
    plan = engine.plan(cfg)
    a = write(tmp_path, engine.plan_to_dict(plan), "a.json")
    swapped = {n: engine.TablePlan(tp.sharding_type, tp.compute_kernel, tuple(1 - r for r in tp.ranks),
                                   tuple(engine.Shard(s.offsets, s.sizes, 1 - s.rank) for s in tp.shards))
               for n, tp in plan.tables.items()}  # the same tables on the other rank
    b = write(tmp_path, engine.plan_to_dict(engine.evaluate(cfg, swapped, planner="file")), "b.json")
    out = tmp_path / "ab.json"
    assert dmp_ab.main([str(config), str(a), str(b), "--rounds", "1", "--iters", "2", "--warmup", "1",
                        "--labels", "ours", "swapped", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("swapped / ours, 1 rounds of `engine validate --iters 2`")
    assert "| step (slowest rank's iteration) |" in text and "| slowest rank's embedding time |" in text
    r = json.loads(out.read_text())
    assert [len(r["series"][k]) for k in dmp_ab.ORDER] == [1, 1, 1]
    run = r["series"]["a"][0]
    assert run["step_ms"] > 0 and len(run["ranks_embedding_ms"]) == 2
    assert run["embedding_ms"] == max(run["ranks_embedding_ms"]) <= run["step_ms"]
    assert r["step_ms"]["verdict"] in ("faster", "slower", "within noise")
