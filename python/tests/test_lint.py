"""make lint (tools/lint) passes on the tree and fails on a misformatted file."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = ROOT / "tools" / "lint"

pytestmark = pytest.mark.skipif(
    shutil.which("clang-format") is None or not (ROOT / ".venv" / "bin" / "ruff").exists(),
    reason="clang-format or ruff not installed (make venv installs both)",
)


def _lint(*files):
    return subprocess.run([str(LINT), *map(str, files)], capture_output=True, text=True)


def test_lint_passes_on_well_formatted_files():
    result = _lint(ROOT / "shardkit" / "base" / "index.h", ROOT / "python" / "shardkit" / "eval.py")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "name, text",
    [
        ("bad.cc", "int   f( int x ){return x;}\n"),  # clang-format
        ("bad.py", "import os\nx=[1,2 ,3]\n"),  # ruff: an unused import, misformatted
    ],
)
def test_lint_fails_on_a_misformatted_or_unclean_file(tmp_path, name, text):
    bad = tmp_path / name
    bad.write_text(text)
    result = _lint(bad)
    assert result.returncode != 0
    assert name in result.stdout + result.stderr
