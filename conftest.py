"""Test-wide settings and the end-of-run summary of the notebook checks.

The notebook kernels started by nbval inherit this process's environment, so the notebook settings
(tools/notebook_env.py, on pytest's pythonpath) are applied here, before any kernel starts. This
file sits at the top of the repository, not in tests/: pytest loads a conftest only for the paths
it is given and their parents, and `python3 course.py test notebooks/01_dp_intro.ipynb` must get the
same settings as the whole suite.
"""
import os
import re
import time
from pathlib import Path

from notebook_env import apply_notebook_env
from notebook_versions import INSTRUCTOR, STUDENT

apply_notebook_env(os.environ)


def pytest_ignore_collect(collection_path, config):
    """A student notebook built from an instructor source (tools/notebook_versions.py) is not run
    by nbval: its source is, and tests/test_versions.py checks that it is the source's build."""
    path = Path(collection_path)
    if path.suffix == ".ipynb" and path.parent == STUDENT and (INSTRUCTOR / path.name).is_file():
        return True
    return None

# Per notebook: {"native"|"older CPU": [start, end, failed]}, filled as the tests run.
_NOTEBOOK_RUNS = {}
_ISA_TEST = re.compile(r"test_notebooks_isa\.py::\w+\[(?P<stem>[^\]]+)\]$")


def _notebook_run(nodeid):
    """(notebook stem, which run) for a test item of a notebook check, else None."""
    path = nodeid.split("::", 1)[0]
    if path.endswith(".ipynb"):  # in the child pytest of the older-CPU check, the env says so
        old_cpu = os.environ.get("ATEN_CPU_CAPABILITY") == "default"
        return Path(path).stem, "older CPU" if old_cpu else "native"
    m = _ISA_TEST.search(nodeid)
    return (m["stem"], "older CPU") if m else None


def pytest_runtest_logstart(nodeid, location):
    key = _notebook_run(nodeid)
    if key:
        run = _NOTEBOOK_RUNS.setdefault(key[0], {}).setdefault(key[1], [time.monotonic(), 0, False])
        run[1] = time.monotonic()


def pytest_runtest_logreport(report):
    key = _notebook_run(report.nodeid)
    if key and key[1] in _NOTEBOOK_RUNS.get(key[0], {}):
        run = _NOTEBOOK_RUNS[key[0]][key[1]]
        run[1] = time.monotonic()  # nbval's kernel starts in the first cell's setup: counted
        run[2] = run[2] or report.failed


def pytest_terminal_summary(terminalreporter):
    """One line per notebook checked in this run: its wall time and result, natively and on the
    simulated older CPU (tests/test_notebooks_isa.py)."""
    if not _NOTEBOOK_RUNS:
        return
    terminalreporter.section("notebooks (wall time, this machine and its load)")
    for stem in sorted(_NOTEBOOK_RUNS):
        parts = [f"{which} {end - start:5.0f} s {'FAILED' if failed else 'passed'}"
                 for which, (start, end, failed) in sorted(_NOTEBOOK_RUNS[stem].items(),
                                                          key=lambda kv: kv[0] != "native")]
        terminalreporter.write_line(f"{stem:32} " + "; ".join(parts))
