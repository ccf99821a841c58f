"""Course runtime: wall time of each notebook under strict nbval, and of the whole course.

    .venv/bin/python benchmarks/bench_course_runtime.py           # every notebooks/[0-9]*.ipynb
    .venv/bin/python benchmarks/bench_course_runtime.py notebooks/01_dp_intro.ipynb
    .venv/bin/python benchmarks/bench_course_runtime.py --suite   # also the whole `pytest` run
    .venv/bin/python benchmarks/bench_course_runtime.py --smoke   # one trivial notebook

Each run is ``python -m pytest NOTEBOOK`` from the repository root with the project's settings
(``--nbval --nbval-current-env``, the sanitize file) and the notebook environment of
``tools/notebook_env.py`` (applied by conftest.py), exactly as the test suite runs them, so the
time includes pytest's and the kernel's start. Targets: each notebook <= 90 s, the whole course
<= 6 minutes on 2 CPU cores.
"""
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common

ROOT = _common.ROOT
NOTEBOOK_BUDGET, COURSE_BUDGET = 90.0, 360.0


def pytest_env():
    # conftest.py (top of the repository) applies the notebook environment in the child pytest.
    return dict(os.environ)


def run_pytest(paths, env):
    """Run pytest on ``paths``; return (seconds, outcome text, return code)."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-c", str(ROOT / "pyproject.toml"),
           "--rootdir", str(ROOT), *map(str, paths)]
    t = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    last_line = proc.stdout.splitlines()[-1] if proc.stdout else ""
    counts = dict((k, int(v)) for v, k in re.findall(r"(\d+) (passed|failed|errors?|skipped)",
                                                       last_line))
    outcome = ", ".join(f"{v} {k}" for k, v in counts.items()) or "no tests ran"
    if proc.returncode not in (0, 5):
        outcome = f"FAILED ({outcome})"
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        print(f"pytest {' '.join(map(str, paths))} failed; last lines:\n{tail}\n", file=sys.stderr)
    return seconds, outcome, proc.returncode


def code_cells(path):
    import nbformat
    nb = nbformat.read(str(path), as_version=4)
    return sum(1 for c in nb.cells if c.cell_type == "code" and c.source.strip())


def trivial_notebook(folder):
    """A one-cell notebook with its output stored, for ``--smoke``."""
    import nbformat
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("print(6 * 7)", execution_count=1)
    cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="42\n")]
    nb.cells = [cell]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                 "language": "python"}
    path = Path(folder) / "smoke_trivial.ipynb"
    nbformat.write(nb, str(path))
    return path


def display_name(path):
    path = Path(path).resolve()
    try:
        return str(path.relative_to(ROOT))
    except ValueError:
        return path.name


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("notebooks", nargs="*", help="default: every notebooks/[0-9]*.ipynb")
    p.add_argument("--no-course", action="store_true",
                   help="skip the run of all the notebooks together")
    p.add_argument("--suite", action="store_true",
                   help="also time the whole test suite (`pytest`: tests, doctests and notebooks)")
    args = _common.parse(p, argv)
    env = pytest_env()
    with tempfile.TemporaryDirectory(prefix="bench_course_") as tmp:
        if args.smoke and not args.notebooks:
            notebooks = [trivial_notebook(tmp)]
        else:
            notebooks = ([Path(n) for n in args.notebooks]
                         or sorted((ROOT / "notebooks").glob("[0-9]*.ipynb")))
        if not notebooks:
            raise SystemExit("no notebooks to time")
        missing = [str(n) for n in notebooks if not Path(n).is_file()]
        if missing:
            raise SystemExit(f"no such notebook: {', '.join(missing)}")
        rows, failed = [], False
        for nb in notebooks:
            seconds, outcome, code = run_pytest([nb], env)
            failed |= code not in (0, 5)
            rows.append([display_name(nb), code_cells(nb), outcome, f"{seconds:.1f}",
                         f"{NOTEBOOK_BUDGET:.0f}", f"{seconds / NOTEBOOK_BUDGET:.2f}"])
            # Progress on stderr: the whole run takes minutes and the table comes at the end.
            print(f"{display_name(nb)}: {outcome} in {seconds:.1f} s", file=sys.stderr, flush=True)
        if not args.no_course:
            seconds, outcome, code = run_pytest(notebooks, env)
            failed |= code not in (0, 5)
            rows.append([f"whole course ({len(notebooks)} notebooks, one run)",
                         sum(code_cells(n) for n in notebooks), outcome, f"{seconds:.1f}",
                         f"{COURSE_BUDGET:.0f}", f"{seconds / COURSE_BUDGET:.2f}"])
        if args.suite:
            # pytest with no paths runs the configured testpaths: tests/, dltools/ doctests,
            # notebooks/.
            seconds, outcome, code = run_pytest([], env)
            failed |= code not in (0, 5)
            rows.append(["whole test suite (`pytest`)", "", outcome, f"{seconds:.1f}", "n/a",
                         "n/a"])
    headers = ["notebook", "code cells", "nbval result", "wall s", "budget s", "wall / budget"]
    notes = ["Each row is one `python -m pytest ...` (strict nbval, the project's pytest "
             "settings), so the time includes starting pytest and the kernel. Targets: each "
             "notebook <= 90 s, the whole course <= 6 minutes on 2 CPU cores."]
    if failed:
        notes.append("Some runs FAILED (see stderr): their times are not comparable.")
    _common.print_report("Course runtime under nbval", headers, rows, notes)
    return rows


if __name__ == "__main__":
    main()
