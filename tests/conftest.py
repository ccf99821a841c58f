"""Test-wide settings: the notebook kernels started by nbval inherit this process's environment."""
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from notebook_env import apply_notebook_env  # noqa: E402

apply_notebook_env(os.environ)
