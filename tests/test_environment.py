"""environment.yml (conda) and pyproject.toml (pip) must install the same packages."""
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _name(req):
    return re.split(r"[<>=!~\[ ;]", req.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _pyproject():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        reqs += extra
    return reqs


def _environment_pip():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.strip() == "- pip:")
    return [line.strip()[2:] for line in lines[start + 1:] if line.strip().startswith("- ")]


def test_same_package_names():
    ours = {_name(r) for r in _pyproject()}
    theirs = {_name(r) for r in _environment_pip() if not r.startswith("-e")}
    assert ours == theirs, (
        f"only in pyproject: {ours - theirs}; only in environment.yml: {theirs - ours}")


def test_same_version_bounds():
    assert sorted(_pyproject()) == sorted(r for r in _environment_pip() if not r.startswith("-e"))


def test_lower_bounds_not_pins():
    for req in _pyproject():
        assert "==" not in req, f"{req}: use a lower bound, not an exact pin"


def test_environment_installs_the_repo_and_python_311():
    text = (ROOT / "environment.yml").read_text()
    assert "python=3.11" in text and "- -e ." in text
