"""Shared test support: harnesses the tests import, kept out of the test modules themselves.

``tests/`` is on pytest's ``pythonpath`` (pyproject.toml), so tests write
``from support import ...``.
"""
import importlib.util
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def load_course():
    """Import ``course.py`` (the README's bootstrap script: a script at the top, not a package)."""
    spec = importlib.util.spec_from_file_location("course", ROOT / "course.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def under_ci(environ=None):
    """True when the CI variable says so (`.ci/run` sets CI=true): there a missing tool (browser,
    ruff) fails its tests instead of skipping them."""
    environ = os.environ if environ is None else environ
    return environ.get("CI", "").strip().lower() in ("true", "1", "yes")
