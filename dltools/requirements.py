"""Whether the installed packages are new enough for the course.

The floors are written once, in the course's ``pyproject.toml``. :func:`check_versions` compares
what is installed with them, so that on Colab or Kaggle, which bring their own torch, a release
that is too old is named at once, with the version needed, rather than failing later on a missing
function.
"""
import tomllib
from importlib import metadata

from packaging.requirements import Requirement
from packaging.version import Version

from .paths import course_root

__all__ = ["requirements", "check_versions"]


def requirements(extras=()):
    """The course's requirements (``packaging`` ``Requirement`` objects), read from its
    ``pyproject.toml``: the dependencies, then those of each of ``extras``.

    >>> [str(r) for r in requirements(extras=()) if r.name == "torch"][0].startswith("torch>=")
    True
    """
    try:
        pyproject = course_root() / "pyproject.toml"
        project = tomllib.loads(pyproject.read_text())["project"]
    except FileNotFoundError:   # dltools installed without the course's files: its metadata
        reqs = [Requirement(line) for line in metadata.requires("dltools") or []]
        return [r for r in reqs if r.marker is None
                or any(r.marker.evaluate({"extra": e}) for e in extras)]
    lines = list(project["dependencies"])
    for extra in extras:
        lines += project["optional-dependencies"][extra]
    return [Requirement(line) for line in lines]


def check_versions(extras=(), reqs=None):
    """Every required package's installed version, checked against its floor: the course's
    dependencies, and those of ``extras`` (``"course"``: JupyterLab and what the notebooks import
    besides; Colab and Kaggle have their own front end and need only the dependencies).

    Returns ``{name: version}`` when all are new enough. Otherwise raises ``RuntimeError`` naming
    each package that is missing or too old, the version it needs, and the pip command that
    installs it. ``reqs`` (requirement strings) replaces the course's list.

    >>> sorted(check_versions(reqs=["torch>=2.0", "numpy>=1.0"]))
    ['numpy', 'torch']
    >>> check_versions(reqs=["torch>=999"])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    RuntimeError: torch ... is too old: the course needs torch>=999
    Install what is needed with: pip install "torch>=999"
    """
    reqs = requirements(extras) if reqs is None else [Requirement(r) for r in reqs]
    found, bad = {}, []
    for req in reqs:
        try:
            found[req.name] = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            bad.append((req, f"{req.name} is not installed: the course needs {req}"))
            continue
        # A vendor's build of a release ("2.12.0a0+nv", "2.12.0rc1") counts as that release.
        if not req.specifier.contains(Version(found[req.name]).base_version, prereleases=True):
            bad.append((req, f"{req.name} {found[req.name]} is too old: the course needs {req}"))
    if bad:
        fix = " ".join(f'"{req}"' for req, _ in bad)
        raise RuntimeError("\n".join(why for _, why in bad)
                           + f"\nInstall what is needed with: pip install {fix}")
    return found
