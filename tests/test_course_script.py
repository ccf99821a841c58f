"""The bootstrap script the README's two commands use."""
import json
import os
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
    assert "unknown command 'tset': choose lab, test, grade or slides" in r.stdout


def test_stamp_changes_with_the_extras():
    assert course.wanted_stamp(["course"]) != course.wanted_stamp(["course", "test"])


def test_lab_installs_the_course_extra_and_test_adds_the_test_extra(monkeypatch):
    """`lab` must install what the notebooks import (the `course` extra, see
    test_notebook_imports.py); `test` adds the test tools and nbgrader on top (the tests build
    and grade notebooks); `grade` and `slides` add nbgrader (slides leave out its answer cells)."""
    seen = []
    monkeypatch.setattr(course, "ensure_venv", seen.append)
    monkeypatch.setattr(course, "install_lab_settings", lambda: None)
    monkeypatch.setattr(course.subprocess, "call", lambda *a, **k: 0)
    course.lab([])
    course.test([])
    course.grade([])
    course.slides([])
    assert seen == [["course"], ["course", "instructor", "test"], ["course", "instructor"],
                    ["course", "instructor"]]


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


def test_a_shared_environment_is_named_by_dp_course_venv(tmp_path, monkeypatch):
    monkeypatch.setenv("DP_COURSE_VENV", str(tmp_path / "class-env"))
    shared = load_course()
    assert shared.VENV == tmp_path / "class-env"
    assert shared.PY.is_relative_to(tmp_path / "class-env")
    assert shared.LAB_OVERRIDES.is_relative_to(tmp_path / "class-env")


def test_a_read_only_environment_is_used_as_it_is(tmp_path, monkeypatch):
    """A student cannot write to the class's environment: an up-to-date one is used without
    writing anything, an out-of-date one stops with what to do instead of failing mid-install."""
    env = tmp_path / "class-env"
    monkeypatch.setenv("DP_COURSE_VENV", str(env))
    shared = load_course()
    shared.PY.parent.mkdir(parents=True)
    shared.PY.write_text("")
    shared.LAB_OVERRIDES.parent.mkdir(parents=True)
    shared.LAB_OVERRIDES.write_bytes(shared.LAB_SETTINGS.read_bytes())
    installs = []
    monkeypatch.setattr(shared, "run", installs.append)
    monkeypatch.setattr(shared.os, "access", lambda path, mode: False)   # as a student sees it
    shared.STAMP.write_text(shared.wanted_stamp(["course"]) + "\n")

    def files():
        return {p: p.stat().st_mtime_ns for p in env.rglob("*")}

    before = files()
    shared.ensure_venv(["course"])
    shared.install_lab_settings()
    assert installs == [] and files() == before   # nothing written
    shared.LAB_OVERRIDES.write_text("{}")   # other settings, in an environment the student cannot
    monkeypatch.setattr(shared.shutil, "copyfile", lambda *a: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied")))   # write to: said, and lab starts anyway
    shared.install_lab_settings()
    with pytest.raises(SystemExit) as stop:
        shared.ensure_venv(["course", "test"])   # the class's environment has no test tools
    assert f"DP_COURSE_VENV={env} python3 course.py test" in str(stop.value)
    assert "unset DP_COURSE_VENV" in str(stop.value) and installs == []


def _made_environment(path, monkeypatch):
    """course.py on an environment at ``path`` (DP_COURSE_VENV) that has a Python; its installs
    are recorded, not run."""
    monkeypatch.setenv("DP_COURSE_VENV", str(path))
    course = load_course()
    course.PY.parent.mkdir(parents=True)
    course.PY.write_text("")
    installs = []
    monkeypatch.setattr(course, "run", lambda cmd, **kw: installs.append(cmd))
    monkeypatch.setattr(course, "register_kernel", lambda: None)
    return course, installs


def test_a_class_environment_that_another_user_owns_is_not_reinstalled(tmp_path, monkeypatch):
    """A teacher's environment made group-writable: a student whose copy of the course differs
    is told what to do, not given a reinstall of the whole class's environment."""
    shared, installs = _made_environment(tmp_path / "class-env", monkeypatch)
    shared.STAMP.write_text("0" * 64 + " course\n")          # another version of the course
    assert os.access(shared.VENV, os.W_OK)                  # writable, as for the group
    owner = shared.VENV.stat().st_uid
    monkeypatch.setattr(shared.os, "geteuid", lambda: owner + 1, raising=False)   # a student
    with pytest.raises(SystemExit, match="not yours to change") as stop:
        shared.ensure_venv(["course"])
    assert "git pull" in str(stop.value) and installs == []
    monkeypatch.setattr(shared.os, "geteuid", lambda: owner, raising=False)       # the teacher
    shared.ensure_venv(["course"])
    assert installs and shared.installed_covers(["course"])


def test_an_environment_with_the_test_tools_also_serves_lab(tmp_path, monkeypatch):
    """`course.py test` then `course.py lab`: no second install (offline it would fail)."""
    fresh, installs = _made_environment(tmp_path / "env", monkeypatch)
    fresh.STAMP.write_text(fresh.wanted_stamp(["test", "course"]) + "\n")
    fresh.ensure_venv(["course"])
    fresh.ensure_venv(["course", "test"])
    assert installs == []
    fresh.STAMP.write_text(fresh.wanted_stamp(["course"]) + "\n")   # lab first, then test
    fresh.ensure_venv(["course", "test"])
    assert installs and fresh.installed_covers(["course", "test"])
    fresh.STAMP.write_text("0" * 64 + " course,test\n")   # another pyproject.toml
    assert not fresh.installed_covers(["course"])


@pytest.mark.parametrize("case", ["missing parent", "a file", "a folder that is not one"])
def test_a_shared_environment_path_that_cannot_be_one_is_named(tmp_path, monkeypatch, case):
    """Sweep 3 (V1, V2, V6): DP_COURSE_VENV naming a path whose folder is missing, a file, or
    a folder of other things ended in venv's raw tracebacks (or would start an install there)."""
    where = {"missing parent": tmp_path / "no" / "such" / "venv", "a file": tmp_path / "old.pt",
             "a folder that is not one": tmp_path / "data"}[case]
    if case == "a file":
        where.write_text("weights")
    if case == "a folder that is not one":
        where.mkdir()
        (where / "notes.txt").write_text("mine")
    monkeypatch.setenv("DP_COURSE_VENV", str(where))
    course = load_course()
    installs = []
    monkeypatch.setattr(course, "run", lambda cmd, **kw: installs.append(cmd))
    if case == "missing parent":   # as under /proc, or a folder the user may not write in
        monkeypatch.setattr(course.venv.EnvBuilder, "create", lambda self, path: (_ for _ in ())
                            .throw(FileNotFoundError(2, "No such file or directory", str(path))))
    with pytest.raises(SystemExit) as stop:
        course.ensure_venv(["course"])
    said = str(stop.value)
    assert str(where) in said and "DP_COURSE_VENV" in said and installs == [], said
    if case == "a file":
        assert where.read_text() == "weights"
