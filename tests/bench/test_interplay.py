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
