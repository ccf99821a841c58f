"""Re-run notebooks top to bottom and save them with their outputs, ready to commit.

    .venv/bin/python tools/run_notebooks.py notebooks/01_dp_intro.ipynb [more.ipynb ...]
    .venv/bin/python tools/run_notebooks.py            # every notebook

A notebook with an instructor source (instructor/NN_*.ipynb, tools/notebook_versions.py) is run
there, whichever of the two paths is given, and its student version in notebooks/ is then built
from that one run.

Outputs are cleared first and the kernel is fresh, so execution counts run 1..N; the same
environment variables as the test run are set (tools/notebook_env.py, which conftest.py
applies too), so strict nbval compares like with like.
"""
import os
import sys
import time
from pathlib import Path

import nbformat
from nbconvert.preprocessors import ExecutePreprocessor

# tools/notebook_env.py: Python puts a script's own folder on sys.path.
from notebook_env import apply_notebook_env
from notebook_versions import INSTRUCTOR, build, executed_notebooks, source_of

ROOT = Path(__file__).resolve().parent.parent

KERNELSPEC = {"name": "python3", "display_name": "Python 3 (dp-course)", "language": "python"}


def run(path):
    path = source_of(Path(path).resolve())
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
            cell.metadata.pop("execution", None)
    nb.metadata["kernelspec"] = KERNELSPEC
    t = time.perf_counter()
    ExecutePreprocessor(timeout=900, kernel_name="python3", allow_errors=False,
                        store_widget_state=True).preprocess(
        nb, {"metadata": {"path": str(path.parent)}})
    # Some cells are expected to raise (tagged raises-exception); everything else must not.
    nbformat.write(nb, path)
    counts = [c.execution_count for c in nb.cells if c.cell_type == "code" and c.source.strip()]
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: execution counts {counts}"
    print(f"{path.relative_to(ROOT)}: {len(counts)} cells in {time.perf_counter() - t:.1f} s")
    if path.parent == INSTRUCTOR:
        print(f"built {build(path).relative_to(ROOT)} from it")


if __name__ == "__main__":
    apply_notebook_env(os.environ)
    paths = sys.argv[1:] or executed_notebooks()
    for p in paths:
        run(p)
