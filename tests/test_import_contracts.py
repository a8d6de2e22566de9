"""The import contracts ([tool.importlinter] in pyproject.toml, explained in docs/architecture.md) hold for the
checkout, and they do catch a break: the same contracts run on a throwaway tree that breaks each of them fail."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# import-linter has no `python -m` entry point; this is what its lint-imports script runs, with this interpreter.
LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def lint_imports(cwd: Path) -> subprocess.CompletedProcess:
    """lint-imports in `cwd`: it reads the contracts from cwd's pyproject.toml and finds the packages there first."""
    return subprocess.run([sys.executable, "-c", LINT_IMPORTS, "--no-cache"], cwd=cwd, capture_output=True,
                          text=True, timeout=300)


def importlinter_section() -> str:
    """pyproject.toml's [tool.importlinter] table and its [[tool.importlinter.contracts]], as written."""
    out, inside = [], False
    for line in (ROOT / "pyproject.toml").read_text().splitlines():
        if line.startswith("["):
            inside = line.startswith(("[tool.importlinter]", "[[tool.importlinter."))
        if inside:
            out.append(line)
    assert out, "pyproject.toml has no [tool.importlinter] section"
    return "\n".join(out) + "\n"


def test_the_checkout_keeps_its_import_contracts():
    run = lint_imports(ROOT)
    assert run.returncode == 0, f"lint-imports failed:\n{run.stdout}\n{run.stderr}"
    assert "0 broken" in run.stdout


def test_the_contracts_catch_a_break(tmp_path):
    """A tree with the same package names where engine imports streamlit and dashboard, db imports plotly, a
    dashboard page (app_pages/ has no __init__.py, like the real one) imports bench, dashboard.plans imports
    streamlit and dashboard.tables imports dashboard.ui: every contract is broken."""
    files = {
        "engine/__init__.py": "import streamlit\nimport dashboard\n",
        "db/__init__.py": "import engine\nimport plotly\n",
        "dashboard/__init__.py": "import db\n",
        "dashboard/app_pages/page.py": "import bench\n",
        "dashboard/app.py": "",
        "dashboard/ui/__init__.py": "",
        "dashboard/plans/__init__.py": "import streamlit\n",
        "dashboard/serve/__init__.py": "",
        "dashboard/tables/__init__.py": "import dashboard.ui\n",
        "dashboard/text.py": "",
        "dashboard/lru.py": "",
        "bench/__init__.py": "import dashboard\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "pyproject.toml").write_text(importlinter_section())
    run = lint_imports(tmp_path)
    assert run.returncode != 0, run.stdout
    assert "0 kept" in run.stdout, run.stdout
    for chain in ("engine -> streamlit", "engine -> dashboard", "db -> plotly", "dashboard.app_pages.page -> bench",
                  "dashboard.plans -> streamlit", "dashboard.tables -> dashboard.ui"):
        assert chain in run.stdout, f"{chain!r} not reported:\n{run.stdout}\n{run.stderr}"
