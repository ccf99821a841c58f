"""The bootstrap script the README's two commands use."""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from support import ROOT, load_course

course = load_course()


def test_usage_without_a_command():
    r = subprocess.run([sys.executable, str(ROOT / "course.py")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "course.py lab" in r.stdout and "course.py test" in r.stdout


def test_unknown_command_is_refused():
    r = subprocess.run([sys.executable, str(ROOT / "course.py"), "tset"], capture_output=True,
                       text=True)
    assert r.returncode == 2


def test_stamp_changes_with_the_extras():
    assert course.wanted_stamp(["course"]) != course.wanted_stamp(["course", "test"])


def test_lab_installs_the_course_extra_and_test_adds_the_test_extra(monkeypatch):
    """`lab` must install what the notebooks import (the `course` extra, see
    test_notebook_imports.py); `test` adds the test tools on top."""
    seen = []
    monkeypatch.setattr(course, "ensure_venv", seen.append)
    monkeypatch.setattr(course, "install_lab_settings", lambda: None)
    monkeypatch.setattr(course.subprocess, "call", lambda *a, **k: 0)
    course.lab([])
    course.test([])
    assert seen == [["course"], ["course", "test"]]


def test_readme_commands_and_ci_agree():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 course.py lab" in readme
    assert "python3 course.py test" in readme
    assert "\npython3 course.py test\n" in ci, (
        ".ci/run must call the README's test command verbatim")


def test_venv_lives_at_repo_root():
    assert course.VENV == ROOT / ".venv"


def test_kernel_is_registered_with_an_absolute_interpreter():
    spec = ROOT / ".venv" / "share" / "jupyter" / "kernels" / "python3" / "kernel.json"
    if not spec.exists():
        pytest.fail("the course kernel is not registered in .venv; run `python3 course.py test`")
    argv = json.loads(spec.read_text())["argv"]
    assert Path(argv[0]).is_absolute() and str(ROOT / ".venv") in argv[0]
