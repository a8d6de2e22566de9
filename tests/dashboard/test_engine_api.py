"""The dashboard and the store (db) reach the engine through its public API only: `import engine`, then engine.X
for names engine/__init__.py exports (the store may also write `from engine import X` for an exported X). Any
import of an engine submodule (from engine.sub import ..., import engine.sub), or in the dashboard a from-import
of the package, fails here, naming file:line."""

from __future__ import annotations

import ast
from pathlib import Path

import engine

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "dashboard"


def _engine_imports(source: str, where: str) -> list[str]:
    """'file:line: statement' for each import of the engine other than a plain `import engine`."""
    tree = ast.parse(source, filename=where)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                renamed = alias.name == "engine" and alias.asname not in (None, "engine")
                if alias.name.startswith("engine.") or renamed:
                    as_ = f" as {alias.asname}" if alias.asname else ""
                    bad.append(f"{where}:{node.lineno}: import {alias.name}{as_}")
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None and (
                node.module == "engine" or node.module.startswith("engine.")):
            names = ", ".join(a.name for a in node.names)
            bad.append(f"{where}:{node.lineno}: from {node.module} import {names}")
    return bad


def _engine_names(path: Path) -> set[str]:
    """Every X of `engine.X` in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    return {node.attr for node in ast.walk(tree)
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "engine"}


def _files() -> list[Path]:
    files = sorted(DASHBOARD.rglob("*.py"))
    assert len(files) > 20  # the walk found the dashboard
    return files


def test_the_dashboard_imports_no_engine_submodule():
    bad = [line for path in _files()
           for line in _engine_imports(path.read_text(encoding="utf-8"), str(path.relative_to(ROOT)))]
    assert not bad, "the dashboard imports engine submodules (use `import engine` and engine.X; export X from " \
                    "engine/__init__.py):\n" + "\n".join(bad)


def test_every_engine_name_the_dashboard_uses_is_exported():
    missing = sorted(f"{path.relative_to(ROOT)}: engine.{name}" for path in _files() for name in _engine_names(path)
                     if name not in engine.__all__)
    assert not missing, "not in engine.__all__:\n" + "\n".join(missing)


def test_the_check_sees_submodule_imports():
    source = ("import engine\nfrom engine.errors import human_bytes\nimport engine.types\nfrom engine import plan\n"
              "def f():\n    from engine.replan import replan\nfrom dashboard import views\n")
    found = _engine_imports(source, "dashboard/probe.py")
    assert [line.split(": ", 1)[0] for line in found] == [f"dashboard/probe.py:{n}" for n in (2, 3, 4, 6)]


def test_the_engine_imports_neither_streamlit_nor_the_store():
    bad = []
    for path in sorted((ROOT / "engine").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            mods = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            bad += [f"{path.relative_to(ROOT)}:{node.lineno}: {m}" for m in mods
                    if m.split(".")[0] in ("streamlit", "db", "dashboard")]
    assert not bad, "\n".join(bad)


def _store_imports(path: Path) -> list[str]:
    """'file:line: statement' for each import of the engine by a store (or bench) module other than `import engine`
    or `from engine import X` with X in engine.__all__."""
    return _store_imports_of(path.read_text(encoding="utf-8"), path)


def _store_imports_of(source: str, path: Path) -> list[str]:
    where = str(path.relative_to(ROOT))
    tree = ast.parse(source, filename=where)
    bad = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            bad += [f"{where}:{node.lineno}: import {a.name}" for a in node.names if a.name.startswith("engine.")]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            if node.module.startswith("engine."):
                bad.append(f"{where}:{node.lineno}: from {node.module} import ...")
            elif node.module == "engine":
                bad += [f"{where}:{node.lineno}: from engine import {a.name} (not in engine.__all__)"
                        for a in node.names if a.name not in engine.__all__]
    return bad


def test_the_store_imports_no_engine_submodule():
    files = sorted((ROOT / "db").rglob("*.py"))
    assert len(files) > 15
    bad = [line for path in files for line in _store_imports(path)]
    assert not bad, "the store imports engine submodules (export the name from engine/__init__.py):\n" + \
        "\n".join(bad)


def test_bench_imports_no_engine_submodule():
    """bench/ measures the engine's parts (kernels, cost terms, the re-planner's moves) through the same public API:
    the names it needs are engine/__init__.py's "for bench" group, torch-importing ones behind a call."""
    files = sorted((ROOT / "bench").glob("*.py"))
    assert len(files) > 15
    bad = [line for path in files for line in _store_imports(path)]
    assert not bad, "bench imports engine submodules (export the name from engine/__init__.py):\n" + "\n".join(bad)


def test_every_engine_name_bench_uses_is_exported():
    missing = sorted(f"{path.relative_to(ROOT)}: engine.{name}" for path in sorted((ROOT / "bench").glob("*.py"))
                     for name in _engine_names(path) if name not in engine.__all__)
    assert not missing, "not in engine.__all__:\n" + "\n".join(missing)


def test_the_bench_check_sees_submodule_imports():
    probe = ROOT / "bench" / "probe.py"
    source = "import engine\nfrom engine import atomicfile\nfrom engine.replan import replan\nfrom engine import plan\n"
    lines = _store_imports_of(source, probe)
    assert [line.split(": ", 1)[0] for line in lines] == ["bench/probe.py:2", "bench/probe.py:3"]
