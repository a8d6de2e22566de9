"""A CPU's identity as runs and fitted terms record it (engine.cpu_name): the model name and, where the kernel
gives them, family, model and stepping. Two machines that both call themselves "AMD EPYC" measured 3-15x apart
(docs/benchmarks.md); their names now differ, so terms fitted on one are refused on the other. Beside the name, a run
records the platform, the caches and the kernels' library versions (engine.machine_identity)."""

from __future__ import annotations

import platform

import pytest

from engine import ConfigError, cpu_name, machine_identity
from engine.calibrate_apply import apply_terms
from tests.engine.test_calibrate_terms import config, fit_terms, synthetic  # noqa: F401 - the fixture

ZEN2 = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 23\nmodel\t\t: 49\nmodel name\t: AMD EPYC\n" \
       "stepping\t: 0\n\nprocessor\t: 1\ncpu family\t: 99\nmodel name\t: not the first\n"
ZEN5 = "processor\t: 0\ncpu family\t: 26\nmodel\t\t: 2\nmodel name\t: AMD EPYC\nstepping\t: 1\n"


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_two_parts_of_one_model_name_get_two_names(tmp_path):
    zen2, zen5 = cpu_name(write(tmp_path, "a", ZEN2)), cpu_name(write(tmp_path, "b", ZEN5))
    assert zen2 == "AMD EPYC (family 23, model 49, stepping 0)"  # the first processor's block only
    assert zen5 == "AMD EPYC (family 26, model 2, stepping 1)"
    assert cpu_name(write(tmp_path, "c", "model name\t: Some CPU\n")) == "Some CPU"  # no more to say
    assert cpu_name(tmp_path / "missing") and cpu_name(write(tmp_path, "d", "flags\t: x\n"))  # platform's name


def test_terms_fitted_on_one_part_are_refused_on_the_other(synthetic, tmp_path):  # noqa: F811
    data = {**fit_terms(synthetic, 1.0).as_dict(), "ddr_mem_bw": 2e7,
            "device_name": cpu_name(write(tmp_path, "a", ZEN2))}
    raw = config("sgd", [32], [1000], [1])
    raw["topology"]["profile"] = {"device": "cpu", "backend": "gloo", "hosts": 1,
                                  "device_name": cpu_name(write(tmp_path, "b", ZEN5))}
    with pytest.raises(ConfigError, match=r"the config's profile is for 'AMD EPYC \(family 26, model 2, stepping 1\)'"
                                          r" but these terms were fitted on 'AMD EPYC \(family 23, model 49, "
                                          r"stepping 0\)': a planner never uses terms fitted on another device"):
        apply_terms(raw, data)


def test_a_machines_identity_adds_its_caches_and_the_kernels_library_versions(tmp_path):
    from engine.validate.worker import cpu_caches, library_versions

    for i, (level, kind, size) in enumerate([("1", "Data", "48K"), ("1", "Instruction", "32K"), ("2", "Unified",
                                                                                               "1024K"),
                                             ("3", "Unified", "32768K"), ("4", "Unified", "junk")]):
        index = tmp_path / f"index{i}"
        index.mkdir()
        for name, text in (("level", level), ("type", kind), ("size", size)):
            (index / name).write_text(text + "\n")
    (tmp_path / "index9").mkdir()  # unreadable: left out
    assert cpu_caches(tmp_path) == {"L1d": 48 * 2**10, "L1i": 32 * 2**10, "L2": 2**20, "L3": 32 * 2**20}
    assert cpu_caches(tmp_path / "missing") == {}
    assert set(library_versions()) >= {"torch", "torchrec"} and library_versions(("no-such-package-x",)) == {}
    ident = machine_identity()
    assert ident["cpu"] == cpu_name() and ident["platform"] == platform.platform()
    assert isinstance(ident["caches"], dict) and ident["libraries"]["torch"].startswith("2.")
