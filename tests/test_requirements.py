"""dltools.requirements: the course's version floors come from pyproject.toml, and a package that is
missing or too old is named with the version it needs."""
import tomllib

import pytest

from dltools.requirements import check_versions, requirements
from support import ROOT


def test_floors_are_pyprojects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert [str(r) for r in requirements()] == project["dependencies"]
    with_course = [str(r) for r in requirements(extras=("course",))]
    assert with_course == project["dependencies"] + project["optional-dependencies"]["course"]


def test_every_installed_package_is_new_enough():
    versions = check_versions(extras=("course",))
    assert set(versions) == {r.name for r in requirements(extras=("course",))}


def test_too_old_and_missing_packages_are_named_with_what_they_need():
    with pytest.raises(RuntimeError) as err:
        check_versions(reqs=["numpy>=1.0", "torch>=999.1", "no-such-package-here>=1.2"])
    lines = str(err.value).splitlines()
    assert lines[0].startswith("torch ") and lines[0].endswith("is too old: the course needs "
                                                                  "torch>=999.1")
    assert lines[1] == ("no-such-package-here is not installed: the course needs "
                        "no-such-package-here>=1.2")
    assert lines[2] == ('Install what is needed with: pip install "torch>=999.1" '
                        '"no-such-package-here>=1.2"')
    assert len(lines) == 3   # numpy is new enough: not named
