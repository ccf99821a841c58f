"""Environment shared by the notebook test run (conftest) and tools/run_notebooks.py, so committed
outputs and checked outputs come from the same settings."""
import os

NOTEBOOK_ENV = {
    # Reproducible figure files and hashing.
    "SOURCE_DATE_EPOCH": "0",
    "PYTHONHASHSEED": "0",
    # Progress bars: always the same width in text mode.
    "COLUMNS": "100",
}


def apply_notebook_env(environ=os.environ):
    for k, v in NOTEBOOK_ENV.items():
        environ.setdefault(k, v)
