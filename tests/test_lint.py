"""Every Python file of the repository passes ``ruff check`` with the settings in pyproject.toml
(line length 100, import order, pyflakes, pycodestyle). One test per file, so a failure names it:

    python3 course.py test tests/test_lint.py
    .venv/bin/ruff check --fix .          # fixes the import order; long lines are fixed by hand
"""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from support import under_ci

ROOT = Path(__file__).resolve().parent.parent
SKIPPED_DIRS = {"data", "results", "build", "__pycache__"}


def python_files():
    """The repository's .py files (not the venv, data, caches or other hidden folders)."""
    found = []
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in SKIPPED_DIRS
                         and not d.endswith(".egg-info"))
        found += [Path(folder, f).relative_to(ROOT).as_posix() for f in files if f.endswith(".py")]
    return sorted(found)


@pytest.fixture(scope="module")
def violations():
    """{file: ruff's messages for it}, from one ``ruff check`` of the whole repository."""
    if importlib.util.find_spec("ruff") is None:
        message = "ruff is not installed: `python3 course.py test` installs it (the test extra)"
        if under_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--output-format", "json",
                           "--no-cache", "."], cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode in (0, 1), proc.stderr  # 2: ruff itself failed (e.g. a bad config)
    found = {}
    for v in json.loads(proc.stdout):
        path = Path(v["filename"]).resolve().relative_to(ROOT).as_posix()
        where = f"{path}:{v['location']['row']}:{v['location']['column']}"
        found.setdefault(path, []).append(f"{where}: {v['code']} {v['message']}")
    return found


def test_ruff_sees_a_violation(tmp_path):
    """The settings are read and a long line is reported (so the tests below can fail)."""
    if importlib.util.find_spec("ruff") is None:
        pytest.skip("ruff is not installed")
    bad = tmp_path / "bad.py"
    bad.write_text("x = '" + "a" * 100 + "'\n")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), "--output-format", "concise", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "E501" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("path", python_files())
def test_file_passes_ruff(violations, path):
    assert not violations.get(path), "\n".join(violations[path])
