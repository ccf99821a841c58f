"""Notebook 04's conclusions must not depend on the seeds it happened to use.

The notebook's experiment takes its seeds from ``COURSE_SEED`` (0, 1, 2 by default). Here it runs
top to bottom with another seed set; every assertion in it must still hold. Outputs are not
compared (they change with the seeds): a cell that raises fails the test. The browser test
(tests/test_browser.py) runs it with a third seed set, 3, 4, 5, in the same way: one run of the
notebook fewer in the test suite.
"""
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parent.parent / "notebooks" / "04_multi_gpu_resnet.ipynb"


@pytest.mark.parametrize("seed", [6])
def test_notebook04_assertions_hold_for_other_seeds(seed, monkeypatch):
    monkeypatch.setenv("COURSE_SEED", str(seed))  # the kernel inherits this process's environment
    nb = nbformat.read(NOTEBOOK, as_version=4)
    uses_seed = [c for c in nb.cells if c.cell_type == "code" and "COURSE_SEED" in c.source]
    assert uses_seed, "notebook 04 no longer reads COURSE_SEED: this test would test nothing"
    client = NotebookClient(nb, timeout=900, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    seeds_cell = next(c for c in nb.cells if c.cell_type == "code" and "SEEDS = " in c.source)
    printed = "".join(o.get("text", "") for o in seeds_cell.outputs)
    assert f"seeds of the experiment: [{seed}, {seed + 1}, {seed + 2}]" in printed
