"""A plan in use kept unless ours is estimably faster (engine.keep_baseline, `engine plan --baseline --min-gain`):
ours replaces a slower baseline only past the required gain, a close or equal one stays (evaluated under the same
estimate, with both figures in its notes), a baseline that does not fit is never kept, and the command line says
what is wrong with a flag or a baseline file in one line."""

import json

import pytest

import engine
from tests.engine.test_cli import run
from tests.factories import tutorial, with_changes, write


def _all_on_rank_0(cfg: engine.Config) -> dict:
    return {t.name: engine.TablePlan(engine.ShardingType.TABLE_WISE, engine.ComputeKernel.FUSED, (0,),
                                     (engine.Shard((0, 0), (t.num_embeddings, t.embedding_dim), 0),))
            for t in cfg.tables}


def test_ours_replaces_a_slower_baseline_only_past_the_required_gain():
    cfg = engine.parse_config(tutorial())
    ours = engine.plan(cfg)
    crowded = _all_on_rank_0(cfg)
    base = engine.evaluate(cfg, crowded)
    gain = 1 - ours.max_rank_cost_ms / base.max_rank_cost_ms
    assert gain > 0.2  # four tables on one rank of two: ours is far faster under the estimate

    took = engine.keep_baseline(cfg, ours, crowded, min_gain=0.05)
    assert took.tables == ours.tables and took.ranks == ours.ranks
    [note] = [n for n in took.notes if n.startswith("ours replaces the baseline plan:")]
    assert f"{ours.max_rank_cost_ms:.4g} ms against {base.max_rank_cost_ms:.4g} ms, {gain:.1%} faster" in note
    assert "over the 5.0% --min-gain" in note

    kept = engine.keep_baseline(cfg, ours, crowded, min_gain=round(gain + 0.01, 3))
    assert kept.tables == crowded and kept.ranks == base.ranks  # the baseline, evaluated as it is
    assert kept.max_rank_cost_ms == pytest.approx(base.max_rank_cost_ms)
    assert kept.notes[0].startswith("the baseline plan kept: ours is not estimably faster")
    assert f"{gain:.1%} faster, not over the {gain + 0.01:.1%} --min-gain" in kept.notes[0]


def test_an_equal_baseline_stays_even_with_no_gain_asked():
    cfg = engine.parse_config(tutorial())
    ours = engine.plan(cfg)
    same = engine.parse_plan(engine.plan_to_dict(engine.plan(engine.parse_config(tutorial("table_wise")))), cfg)
    kept = engine.keep_baseline(cfg, ours, same, min_gain=0.0)
    assert kept.tables == same and "0.0% faster, not over the 0.0% --min-gain" in kept.notes[0]


def test_a_baseline_that_does_not_fit_is_never_kept():
    cfg = engine.parse_config(with_changes(tutorial(), hbm_cap=2**21))  # ours fits 1.5 of 1.8 MiB on each rank
    ours = engine.plan(cfg)
    took = engine.keep_baseline(cfg, ours, _all_on_rank_0(cfg), min_gain=0.89)
    assert took.tables == ours.tables
    assert took.notes[-1] == "the baseline plan was not kept: it stores more than ranks 0 hold"


def test_the_command_keeps_the_baseline_file_and_says_why(tmp_path):
    cfg_path = write(tmp_path, tutorial())
    cfg = engine.parse_config(tutorial())
    crowded = write(tmp_path, engine.plan_to_dict(engine.evaluate(cfg, _all_on_rank_0(cfg))), "crowded.json")
    ours = json.loads(run("plan", cfg_path, "--json").stdout)
    replaced = json.loads(run("plan", cfg_path, "--json", "--baseline", crowded, "--min-gain", "6%").stdout)
    assert replaced["plan"] == ours["plan"] and any(n.startswith("ours replaces the baseline plan (--baseline)")
                                                    for n in replaced["notes"])
    kept = json.loads(run("plan", cfg_path, "--json", "--baseline", crowded, "--min-gain", "0.8").stdout)
    assert kept["plan"] == json.loads(crowded.read_text())["plan"]
    assert kept["notes"][0].startswith("the baseline plan (--baseline) kept") and "80.0% --min-gain" in kept["notes"][0]
    text = run("plan", cfg_path, "--baseline", crowded, "--min-gain", "0.8").stdout
    assert "Note: the baseline plan (--baseline) kept" in text


BAD_GAIN = "argument --min-gain: must be auto or a fraction from 0 to under 0.9"


@pytest.mark.parametrize("args, said", [
    (("--min-gain", "0.05"), "--min-gain is the gain ours must show over --baseline PLAN.json: give --baseline too"),
    (("--baseline", "BASE", "--min-gain", "0.95"), BAD_GAIN),
    (("--baseline", "BASE", "--min-gain", "nan"), BAD_GAIN),
    (("--baseline", "BASE", "--min-gain=-1%"), BAD_GAIN),
    (("--baseline", "MISSING"), "does not exist"),
    (("--baseline", "PARTIAL"), "plan.large_table_0: the config's table is not placed"),
])
def test_bad_flags_and_baselines_get_one_line(tmp_path, args, said):
    cfg_path = write(tmp_path, tutorial())
    base = json.loads(run("plan", cfg_path, "--json").stdout)
    paths = {"BASE": write(tmp_path, base, "base.json"), "MISSING": tmp_path / "missing.json",
             "PARTIAL": write(tmp_path, {**base, "plan": {k: v for k, v in base["plan"].items()
                                                         if k != "large_table_0"}}, "partial.json")}
    proc = run("plan", cfg_path, *(str(paths.get(a, a)) for a in args), check=False)
    assert proc.returncode == 2 and said in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr
