"""The import contracts in pyproject.toml ([tool.importlinter]) hold: apps are siblings above
`questions`, above `common`; lab.engine is a library (no Django, nothing of ours); the lab's
own modules are layered and acyclic. And the check can fail: a copy of the tree with one
forbidden import added breaks the contract that forbids it."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("common", "questions", "trainer", "lab", "mock")
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    """Run import-linter on the tree at `cwd` (it reads cwd's pyproject.toml and imports the
    packages from cwd); no cache written into the tree."""
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_import_contracts_hold():
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr


def copy_tree(to: Path) -> Path:
    """The root packages' Python files and pyproject.toml, nothing else (no weights)."""
    keep_py = shutil.ignore_patterns("__pycache__", "*.pyc")
    for package in PACKAGES:

        def ignore(folder: str, names: list[str]) -> set[str]:
            skipped = keep_py(folder, names)
            return skipped | {
                n for n in names if not n.endswith(".py") and not (Path(folder) / n).is_dir()
            }

        shutil.copytree(ROOT / package, to / package, ignore=ignore)
    shutil.copy(ROOT / "pyproject.toml", to / "pyproject.toml")
    return to


@pytest.mark.parametrize(
    ("path", "line", "contract", "reported"),
    [
        (
            "lab/engine/_probe.py",
            "import django.conf\n",
            "engine-is-a-library",
            "lab.engine._probe -> django",
        ),
        (
            "common/_probe.py",
            "import trainer.models\n",
            "apps-layers",
            "common._probe -> trainer.models",
        ),
        (
            "lab/broker.py",
            "from lab import services  # noqa\n",
            "lab-layers",
            "lab.broker -> lab.services",
        ),
        (
            "lab/services.py",
            "from lab import views  # noqa\n",
            "lab-acyclic",
            "No cycles are allowed in lab.",
        ),
    ],
)
def test_a_forbidden_import_breaks_its_contract(tmp_path, path, line, contract, reported):
    tree = copy_tree(tmp_path / "tree")
    target = tree / path
    target.write_text((target.read_text() if target.exists() else "") + line)
    result = lint_imports(tree, "--contract", contract)
    output = result.stdout + result.stderr
    assert result.returncode == 1 and "0 kept, 1 broken" in output, output
    assert reported in output, output
