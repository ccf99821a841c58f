"""Every notebook passes strict nbval on an older CPU too.

Training results depend on the CPU's instruction set: ATen and oneDNN pick different kernels, and
floats round differently. The suite's own nbval run (notebooks/*.ipynb, collected by --nbval)
checks the notebooks on this machine's CPU; this test runs the same strict check (same options, same
sanitize file, same notebook environment: see conftest.py) in a child pytest with
``ATEN_CPU_CAPABILITY=default ONEDNN_MAX_CPU_ISA=SSE41``, which makes PyTorch use the kernels of a
CPU without AVX. A saved output that depends on the CPU's arithmetic must be printed at a stable
precision or marked ``NBVAL_IGNORE_OUTPUT``; otherwise this test fails.

    python3 course.py test -m isa              # only this check
    python3 course.py test -m isa -k 01_dp     # one notebook
    python3 course.py test -m "not isa"        # everything else
"""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from notebook_versions import executed_notebooks

ROOT = Path(__file__).resolve().parent.parent
# instructor/NN_*.ipynb where it exists (the student version is its build), else notebooks/NN_*.
NOTEBOOKS = executed_notebooks()
OLD_CPU = {"ATEN_CPU_CAPABILITY": "default", "ONEDNN_MAX_CPU_ISA": "SSE41"}

pytestmark = pytest.mark.isa


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_passes_strict_nbval_on_an_older_instruction_set(notebook):
    env = {**os.environ, **OLD_CPU}
    env.pop("PYTEST_CURRENT_TEST", None)
    env.pop("PYTEST_ADDOPTS", None)
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q",
                           str(notebook.relative_to(ROOT))],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    summary = (proc.stdout.strip().splitlines() or [""])[-1]
    assert proc.returncode == 0 and re.search(r"\d+ passed", summary), (
        f"{notebook.name} fails strict nbval with {OLD_CPU}:\n{proc.stdout[-6000:]}"
        f"\n{proc.stderr[-2000:]}")


def test_the_simulation_really_changes_the_kernels():
    """The environment variables must reach PyTorch, or the check above checks nothing new."""
    code = "import torch; print(torch.backends.cpu.get_cpu_capability())"
    env = {**os.environ}
    native = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                            text=True, check=True).stdout.strip()
    old = subprocess.run([sys.executable, "-c", code], env={**env, **OLD_CPU},
                         capture_output=True, text=True, check=True).stdout.strip()
    assert old == "DEFAULT"
    if native == "DEFAULT":
        pytest.skip("this CPU has no vector extension PyTorch uses: both runs use the same kernels")
