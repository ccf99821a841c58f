"""The browser test's harness, checked without a browser (fast; not marked `browser`)."""
import os
import subprocess
import sys
from pathlib import Path

from support import ROOT
from support.browser_lab import copy_course_tree


def test_the_copy_has_every_file_beside_the_notebooks(tmp_path):
    """The notebooks import modules that sit beside them (checks_NN.py): the copy JupyterLab runs
    must have them all. Needs no browser."""
    copied = copy_course_tree(tmp_path / "course")
    wanted = {p.name for p in (ROOT / "notebooks").iterdir()
              if p.is_file() and p.suffix in (".py", ".ipynb")}
    assert any(name.startswith("checks_") for name in wanted)
    assert wanted <= {p.name for p in copied.iterdir()}


def test_missing_browser_skips_with_a_hint_and_fails_under_ci(tmp_path):
    """Needs no browser: a child pytest runs the browser tests with no browser to be found."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("CI", "DP_COURSE_CHROMIUM", "PYTEST_CURRENT_TEST", "PYTEST_ADDOPTS")}
    env["PATH"] = str(Path(sys.executable).parent)  # the venv's tools only: no system browser
    env["PLAYWRIGHT_BROWSERS_PATH"] = str(tmp_path / "no-browsers")  # no Playwright browser
    cmd = [sys.executable, "-m", "pytest", "-q", "tests/test_browser.py"]

    def run(**extra):
        return subprocess.run(cmd, cwd=ROOT, env={**env, **extra}, capture_output=True,
                              text=True, timeout=300)

    skipped = run()
    # 5: "no tests collected", as the whole module is skipped (nothing failed).
    assert skipped.returncode in (0, 5), skipped.stdout[-3000:]
    hint = [line for line in skipped.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(hint) == 1 and "playwright install chromium" in hint[0], skipped.stdout[-3000:]
    assert "passed" not in skipped.stdout and "error" not in skipped.stdout
    failed = run(CI="true")
    assert failed.returncode == 1, failed.stdout[-3000:]
    assert "CI=true: the browser tests must run" in failed.stdout
    assert "skipped" not in failed.stdout.splitlines()[-1]
