"""The set-up a user expects: every package the code imports is declared, pyproject.toml and the requirements files
agree, `pip install .` ships every module and data file with its console commands, and what spawns Python spawns
this interpreter (in .venv, the venv's)."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from engine.validate.script import portable_script
from engine.validate.slurm import slurm_script
from engine.validate.types import Job
from tests.factories import EXAMPLES, ROOT

SHIPPED = ("engine", "db", "dashboard")  # the packages `pip install .` installs
FIRST_PARTY = {*SHIPPED, "bench", "deploy", "tests"}  # deploy: scripts/team.sh, run from the checkout
# pyproject.toml leaves the fbgemm build to the install: the shim (fbgemm-gpu-cpu) on CPU machines, fbgemm-gpu on
# GPU ones; torchrec asks for it by the name fbgemm-gpu either way.
FBGEMM_BUILDS = {"fbgemm-gpu-cpu", "fbgemm-gpu"}
CONSOLE_COMMANDS = {"sharding-planner": "engine.cli:main", "sharding-planner-db": "db.__main__:main"}
IN_PROJECT_VENV = Path(sys.prefix).resolve() == (ROOT / ".venv").resolve()


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def split_requirement(line: str) -> tuple[str, str]:
    """'psycopg[binary]>=3.2' -> ('psycopg', '[binary]>=3.2')."""
    m = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)\s*(.*)", line.strip())
    assert m, f"not a requirement: {line!r}"
    return norm(m.group(1)), m.group(2).replace(" ", "")


def requirements(path: Path) -> dict[str, str]:
    """name -> extras and version specifier of a requirements file, following -r; a local project (the shim) by
    the name its pyproject.toml gives."""
    out: dict[str, str] = {}
    for raw in path.read_text().splitlines():
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        if line.startswith("-r "):
            out.update(requirements(path.parent / line[3:].strip()))
        elif line.startswith((".", "/")):
            project = tomllib.loads((ROOT / line / "pyproject.toml").read_text())["project"]
            out[norm(project["name"])] = f"@{line}"
        else:
            name, spec = split_requirement(line)
            out[name] = spec
    return out


def pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def pyproject_dependencies() -> dict[str, str]:
    return dict(split_requirement(d) for d in pyproject()["project"]["dependencies"])


def third_party_imports(*packages: str) -> dict[str, set[str]]:
    """Top-level module -> the files that import it, for every absolute import (guarded ones too) in packages."""
    found: dict[str, set[str]] = {}
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "__pycache__" in path.parts or path.is_relative_to(ROOT / "tests" / "data"):  # data: fuzz inputs
                continue
            for node in ast.walk(ast.parse(path.read_bytes(), str(path))):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                for top in {n.split(".")[0] for n in names} - FIRST_PARTY - set(sys.stdlib_module_names):
                    found.setdefault(top, set()).add(str(path.relative_to(ROOT)))
    return found


def undeclared(imports: dict[str, set[str]], declared: set[str]) -> list[str]:
    """The imported modules no declared distribution provides, each with the distributions that do and where."""
    providers = importlib.metadata.packages_distributions()
    out = []
    for module, files in sorted(imports.items()):
        dists = {norm(d) for d in providers.get(module, [])}
        if not dists & declared:
            out.append(f"{module} (from {', '.join(sorted(dists)) or 'nothing installed'}; "
                       f"imported by {', '.join(sorted(files)[:3])})")
    return out


def test_every_package_the_code_imports_is_declared():
    shipped = third_party_imports(*SHIPPED)
    assert {"numpy", "pandas", "streamlit", "sqlalchemy", "torch"} <= set(shipped)  # the walk sees the imports
    assert undeclared(shipped, set(requirements(ROOT / "requirements.txt"))) == []
    assert undeclared(shipped, set(pyproject_dependencies()) | FBGEMM_BUILDS) == []
    gpu = set(requirements(ROOT / "requirements-gpu.txt"))
    assert "fbgemm-gpu" in gpu and undeclared(shipped, gpu | FBGEMM_BUILDS) == []  # either build: one fbgemm_gpu
    dev = set(requirements(ROOT / "requirements-dev.txt"))
    assert undeclared(third_party_imports("bench", "deploy", "tests"), dev) == []


def test_the_check_finds_an_undeclared_import(tmp_path):
    """Without its line in requirements.txt, pandas (the dashboard imports it) is reported."""
    text = (ROOT / "requirements.txt").read_text()
    without = "\n".join(ln for ln in text.splitlines() if not ln.startswith("pandas"))
    assert without != text
    (tmp_path / "requirements.txt").write_text(without)
    missing = undeclared(third_party_imports("dashboard"), set(requirements(tmp_path / "requirements.txt")))
    assert [m.split(" ")[0] for m in missing] == ["pandas"]
    assert "dashboard/" in missing[0]


def test_pyproject_and_the_requirements_files_declare_the_same_versions():
    cpu = requirements(ROOT / "requirements.txt")
    gpu = requirements(ROOT / "requirements-gpu.txt")
    deps = pyproject_dependencies()
    assert {n: s for n, s in cpu.items() if n not in FBGEMM_BUILDS} == deps
    assert {n: s for n, s in gpu.items() if n not in FBGEMM_BUILDS} == deps
    assert cpu["fbgemm-gpu"] == "@./packaging/fbgemm-gpu-shim" and cpu["fbgemm-gpu-cpu"] == "==1.8.0"
    assert gpu["fbgemm-gpu"] == "==1.8.0"
    shim = tomllib.loads((ROOT / "packaging/fbgemm-gpu-shim/pyproject.toml").read_text())["project"]
    assert shim["dependencies"] == ["fbgemm-gpu-cpu" + cpu["fbgemm-gpu-cpu"]]
    # the shim stands in for the name torchrec asks for
    assert any(split_requirement(r.split(";")[0])[0] == "fbgemm-gpu" for r in importlib.metadata.requires("torchrec"))
    assert pyproject()["project"]["scripts"] == CONSOLE_COMMANDS


def test_the_wheel_holds_every_module_data_file_and_console_command(tmp_path):
    """`pip install .` installs the wheel built here: every file of engine, db and dashboard (migrations, the
    favicon, the app's .streamlit settings) and nothing else, with the declared dependencies and commands."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    expected = set()
    for package in SHIPPED:
        shutil.copytree(ROOT / package, src / package, ignore=ignore)
        expected |= {p.relative_to(src).as_posix() for p in (src / package).rglob("*") if p.is_file()}
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
                            "-q", "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True,
                           timeout=300, check=False)
    assert build.returncode == 0, build.stdout[-3000:] + build.stderr[-3000:]
    (wheel,) = (tmp_path / "dist").glob("sharding_planner-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = set(z.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = z.read(f"{info}/METADATA").decode()
        entry_points = z.read(f"{info}/entry_points.txt").decode()
    assert {n for n in names if not n.startswith(info + "/")} == expected
    assert {"db/migrations/script.py.mako", "dashboard/assets/favicon.png", "dashboard/.streamlit/config.toml",
            "engine/validate/worker.py", "dashboard/app.py"} <= expected
    requires = [ln.split(":", 1)[1].strip() for ln in metadata.splitlines() if ln.startswith("Requires-Dist:")]
    assert dict(split_requirement(r) for r in requires) == pyproject_dependencies()
    for command, target in CONSOLE_COMMANDS.items():
        assert f"{command} = {target}" in entry_points


def test_the_console_command_plans_as_python_m_engine_does(tmp_path):
    """scripts/install.sh installs the project into .venv with its commands; run from another directory."""
    bindir = Path(sys.executable).parent
    if not (bindir / "sharding-planner").exists():
        assert not IN_PROJECT_VENV, "scripts/install.sh installs the project (pip install -e .) into .venv"
        pytest.skip("the project is not installed in this Python: bash scripts/install.sh installs it in .venv")
    config = str(EXAMPLES / "tutorial.json")
    by_command = subprocess.run([str(bindir / "sharding-planner"), "plan", config, "--json"], cwd=tmp_path,
                                capture_output=True, text=True, timeout=300, check=False)
    assert by_command.returncode == 0, by_command.stderr
    by_module = subprocess.run([sys.executable, "-m", "engine", "plan", config, "--json"], cwd=ROOT,
                               capture_output=True, text=True, timeout=300, check=True)
    a, b = json.loads(by_command.stdout), json.loads(by_module.stdout)
    a.pop("planning_seconds"), b.pop("planning_seconds")
    assert a == b and set(a["plan"]) == {"large_table_0", "large_table_1", "small_table_0", "small_table_1"}
    db_help = subprocess.run([str(bindir / "sharding-planner-db"), "--help"], cwd=tmp_path, capture_output=True,
                             text=True, timeout=120, check=False)
    assert db_help.returncode == 0 and "init" in db_help.stdout, db_help.stderr
    for command in CONSOLE_COMMANDS:  # each runs this venv's Python, whichever python3 is first on PATH
        assert Path((bindir / command).read_text().splitlines()[0][2:]).parent == bindir


def test_job_scripts_run_this_interpreter(tmp_path):
    """Slurm's daemon and a user's shell run the job scripts: they name this interpreter, never a bare python3
    (which would be the system's, without the venv's packages)."""
    job = Job(out_dir=tmp_path / "out", nproc=2)
    assert job.python == sys.executable
    for text in (portable_script(job), slurm_script(job)):
        assert text.count(f"{shlex.quote(sys.executable)} -m ") == 2  # torchrun, then the results gatherer
        assert not re.search(r"(^|[\s(])python3?\s", text)
