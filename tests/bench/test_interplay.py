"""bench.interplay: the evidence for the pressure ramp, recomputed from the stored --table-costs runs."""

import re

from bench import interplay


def test_the_ramp_predicts_stored_ranks_better_than_their_tables_alone():
    path = interplay.RESULTS / "measured_tables.json"
    plans = interplay.ranks_of(path)
    assert len(plans) > 20 and all(len(p) >= 2 for p in plans)
    fb = [p for p in plans if interplay.backend_of(p) == "fbgemm"]
    ramp, none = ("ramp", 0.5, 16.5), ("none",)
    held = {form: {c: interplay.fit([p for p in fb if p[0].config != c], form) for c in {p[0].config for p in fb}}
            for form in (ramp, none)}
    with_ramp = interplay.score(fb, ramp, lambda p: held[ramp][p[0].config])
    alone = interplay.score(fb, none, lambda p: 0.0)
    assert with_ramp[0] < 0.8 * alone[0]  # median per-rank error, held out per config
    assert with_ramp[2] >= alone[2]  # slowest ranks named
    assert all(a > 0 for a in held[ramp].values())


def test_the_report_lists_every_form_for_each_backend(capsys):
    assert interplay.main([str(interplay.RESULTS / "measured_tables.json")]) == 0
    out = capsys.readouterr().out
    assert out.count("| ramp 0.5-16.5 MiB |") == 2 and "**fbgemm**" in out and "**torch**" in out
    assert re.search(r"as measure-tables' probe ranks fit it\): median \d+\.\d%", out)


def test_pressure_on_touched_bytes_names_fewer_slowest_ranks_than_on_rows():
    """docs/estimator.md "Rows or bytes": over the stored --table-costs runs, the ramp on each piece's touched bytes
    fits the fbgemm ranks no better than on its rows and names fewer slowest ranks, so the engine prices rows."""
    names = ["measured_tables*.json", "measured_pressure*.json", "measured_collectives.json",
             "measured_later_9_11.json", "measured_columns_before.json"]
    paths = sorted({p for n in names for p in interplay.RESULTS.glob(n)})
    fb = [p for path in paths for p in interplay.ranks_of(path) if interplay.backend_of(p) == "fbgemm"]
    assert len(fb) == 190
    scores = {}
    for form in (("ramp", 0.5, 16.5), ("bytes", 0.5, 16.5)):
        held = {c: interplay.fit([p for p in fb if p[0].config != c], form) for c in {p[0].config for p in fb}}
        scores[form[0]] = interplay.score(fb, form, lambda p: held[p[0].config])
    assert scores["bytes"][2] < scores["ramp"][2] - 10  # 140 against 157 of 190
    assert abs(scores["bytes"][0] - scores["ramp"][0]) < 0.005  # 5.4% against 5.5%
