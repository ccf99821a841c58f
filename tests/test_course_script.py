"""The bootstrap script the README's two commands use."""
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import course  # noqa: E402


def test_usage_without_a_command():
    r = subprocess.run([sys.executable, str(ROOT / "course.py")], capture_output=True, text=True)
    assert r.returncode == 2
    assert "course.py lab" in r.stdout and "course.py test" in r.stdout


def test_unknown_command_is_refused():
    r = subprocess.run([sys.executable, str(ROOT / "course.py"), "tset"], capture_output=True, text=True)
    assert r.returncode == 2


def test_stamp_changes_with_pyproject_and_extras():
    a = course.wanted_stamp(["course"])
    assert a == course.wanted_stamp(["course"])
    assert a != course.wanted_stamp(["course", "test"])


def test_readme_commands_and_ci_agree():
    readme = (ROOT / "README.md").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python3 course.py lab" in readme
    assert "python3 course.py test" in readme
    assert "\npython3 course.py test\n" in ci, ".ci/run must call the README's test command verbatim"


def test_venv_lives_at_repo_root():
    assert course.VENV == ROOT / ".venv"


def test_kernel_is_registered_with_an_absolute_interpreter():
    import json
    spec = ROOT / ".venv" / "share" / "jupyter" / "kernels" / "python3" / "kernel.json"
    if not spec.exists():
        pytest.fail("the course kernel is not registered in .venv; run `python3 course.py test`")
    argv = json.loads(spec.read_text())["argv"]
    assert Path(argv[0]).is_absolute() and str(ROOT / ".venv") in argv[0]
