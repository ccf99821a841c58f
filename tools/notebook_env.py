"""The environment notebooks run in, for the saved outputs (tools/run_notebooks.py) and for the
checks (conftest.py: nbval's kernels inherit the test process's environment), so committed and
checked outputs come from the same settings.

``tools/`` is on pytest's ``pythonpath`` (pyproject.toml); ``tools/run_notebooks.py`` imports this
module from its own folder.
"""
import os

NOTEBOOK_ENV = {
    # Reproducible figure files and hashing.
    "SOURCE_DATE_EPOCH": "0",
    "PYTHONHASHSEED": "0",
    # Progress bars: always the same width in text mode.
    "COLUMNS": "100",
}


def apply_notebook_env(environ=os.environ):
    """Set the notebook settings in ``environ`` where it does not set them already.

    >>> env = {"COLUMNS": "80"}
    >>> apply_notebook_env(env)
    >>> env["COLUMNS"], env["SOURCE_DATE_EPOCH"]
    ('80', '0')
    """
    for k, v in NOTEBOOK_ENV.items():
        environ.setdefault(k, v)
