"""Grade notebooks that students handed in, with nbgrader's autograder, into one gradebook CSV.

    python3 course.py grade alice/01_dp_intro.ipynb bob/01_dp_intro.ipynb --out grades.csv

Each submission is matched to its notebook by its file name (it contains ``01_dp_intro``, or starts
with ``01``), and graded against that notebook's instructor version (``instructor/``):

- nbgrader builds the assignment from the instructor version (``generate_assignment``), then runs
  each submission in its own kernel (``autograde``). The check cells are restored from the
  instructor version first, so a student cannot change what is checked.
- The kernel runs with ``DP_COURSE_GRADING=1``, under which a check that is not answered right
  raises (dltools.exercises.report): the exercise gets no points. A right answer gets all of them.
- Each cell has a time limit (``--timeout``, seconds): a cell that runs longer is interrupted and
  counts as failed, and the rest of the notebook still runs. A cell that ends the kernel (a crash)
  is not run, and the rest is graded; the gradebook's note names it. The other submissions are
  graded as usual whatever one of them does.

The CSV has one row per submission, named by its path: the notebook, each exercise's points, the
total, the most it could get, and a note where something went wrong. Grading into a gradebook that
exists keeps its rows (a submission graded again gets its new row); a file there that is not a
gradebook is refused before any grading. nbgrader's course folder (its
gradebook.db and the graded copies) is made in a temporary folder inside the course's checkout
(each notebook's set-up cell finds the course from there), and removed afterwards unless
``--keep DIR`` names a folder to copy it to.
"""
import argparse
import contextlib
import csv
import os
import re
import shutil
import sys
import tempfile
import warnings
from pathlib import Path

import nbformat

from dltools.exercises import GRADING_ENV  # what makes a check raise when it is not right
from notebook_versions import is_check_cell  # tools/, beside this file

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTOR = ROOT / "instructor"


class GradingError(Exception):
    """A submission or an option that cannot be graded; nothing has been graded yet."""


def assignment_for(submission, sources):
    """The instructor notebook a submission answers, from its file name."""
    name = Path(submission).name
    by_stem = [s for s in sources if s.stem in name]
    by_number = [s for s in sources if name.startswith(s.stem[:2])]
    found = by_stem or by_number
    if len(found) != 1:
        listed = ", ".join(s.name for s in sources)
        raise GradingError(f"{submission}: cannot tell which notebook this answers; its file name "
                           f"must contain one of {listed}")
    return found[0]


def exercises(source):
    """[(grade id, points)] of the check cells of an instructor notebook, in order (grade ids
    ``exN_check``)."""
    nb = nbformat.read(source, as_version=4)
    return [(c.metadata.nbgrader.grade_id, c.metadata.nbgrader.points) for c in nb.cells
            if is_check_cell(c)]


class Nbgrader:
    """nbgrader's own API on one course folder, in this process (one start-up for all
    submissions): builds assignments and autogrades submissions."""

    def __init__(self, course, timeout):
        from nbgrader.apps import NbGraderAPI
        from traitlets.config import Config

        config = Config()
        config.CourseDirectory.root = str(course)
        config.CourseDirectory.db_url = f"sqlite:///{course / 'gradebook.db'}"
        config.Execute.timeout = timeout   # per cell; a cell past it is interrupted
        self.api = NbGraderAPI(config=config)
        self.api.log.setLevel("ERROR")   # errors are returned with each result too
        # nbgrader 0.9.6 with SQLAlchemy 2 warns on every submission about its own session use.
        from sqlalchemy.exc import SAWarning
        warnings.filterwarnings("ignore", category=SAWarning)

    def generate_assignment(self, assignment):
        return self._result(self.api.generate_assignment(assignment, force=True))

    def autograde(self, assignment, student):
        return self._result(self.api.autograde(assignment, student, force=True))

    @staticmethod
    def _result(result):
        """(success, log and error text)."""
        return result["success"], result.get("log", "") + result.get("error", "")


@contextlib.contextmanager
def grading_environment():
    """While grading: checks raise when not right (GRADING_ENV, inherited by the kernels), and
    nbgrader finds `alembic`, which it runs from PATH, beside this interpreter."""
    saved = {k: os.environ.get(k) for k in (GRADING_ENV, "PATH")}
    os.environ[GRADING_ENV] = "1"
    os.environ["PATH"] = os.pathsep.join([str(Path(sys.executable).parent),
                                          os.environ.get("PATH", "")])
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def scores(course, assignment, student):
    """{grade id: points} that nbgrader gave one graded submission."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        try:
            notebook = gradebook.find_submission_notebook(assignment, assignment, student)
        except MissingEntry:
            return {}
        return {g.name: g.score for g in notebook.grades}


def cell_that_kills_the_kernel(notebook, folder, timeout):
    """The index of the first cell during which the kernel dies, running ``notebook`` in
    ``folder`` as nbgrader would (errors allowed, cells stopped at ``timeout``); None if none."""
    from nbclient import NotebookClient
    from nbclient.exceptions import DeadKernelError

    nb = nbformat.read(notebook, as_version=4)
    client = NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                            interrupt_on_timeout=True, resources={"metadata": {"path": folder}})
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            try:
                client.execute_cell(cell, index)
            except DeadKernelError:
                return index
    return None


def last_error(log):
    lines = [line for line in log.splitlines() if re.search(r"\[(ERROR|CRITICAL)\]", line)]
    return lines[-1].split("]", 1)[1].strip()[:200] if lines else "nbgrader could not grade it"


def autograde(grader, source, student, folder, timeout):
    """nbgrader's autograde on one submission: (whether it was graded, note for the gradebook).

    When the kernel dies (a cell that ends Python: os._exit, a crash in C code), nbgrader grades
    nothing; then the cell that kills it is found, replaced by one that raises, and the
    submission graded again: that cell's exercise gets nothing, the others what they earn."""
    ok, log = grader.autograde(source.stem, student)
    if ok:
        return True, ""
    if "DeadKernelError" not in log:
        return False, f"not graded: {last_error(log)}"
    submitted = folder / source.name
    dead = cell_that_kills_the_kernel(submitted, str(folder), timeout)
    if dead is None:
        return False, "not graded: the kernel died, but not when run again"
    nb = nbformat.read(submitted, as_version=4)
    nb.cells[dead].source = (f'raise RuntimeError("course.py grade: this cell (cell {dead + 1}) '
                             'ended the Python kernel")')
    nbformat.write(nb, submitted)
    ok, log = grader.autograde(source.stem, student)
    if not ok:
        return False, f"not graded: {last_error(log)}"
    return True, f"cell {dead + 1} ended the Python kernel: it was not run"


def unreadable(path):
    """Why the submission ``path`` cannot be graded as a notebook ('' when it can): it is empty,
    or not a notebook (not JSON, or not nbformat's)."""
    if Path(path).stat().st_size == 0:
        return "the file is empty"
    try:
        nbformat.read(path, as_version=4)
    except Exception as err:  # noqa: BLE001 - nbformat raises several kinds; each is the answer
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        return f"not a notebook ({first[:100]})"
    return ""


def earlier_rows(out):
    """The rows of the gradebook ``out`` already holds ([] when there is none): grading more
    submissions into it keeps them, and a submission graded again gets its new row. A file there
    that is not a gradebook is refused before any grading, and left as it is."""
    path = Path(out)
    if not path.exists():
        return []
    if path.is_dir():
        raise GradingError(f"--out {out} is a folder: give a file name in it")
    try:
        with open(path, newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            header = reader.fieldnames or []
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise GradingError(f"--out {out} cannot be read as a gradebook ({err}): give another "
                           "--out, or move that file away") from err
    if not {"submission", "total", "out_of"} <= set(header):
        raise GradingError(f"--out {out} exists and is not a gradebook of course.py grade (no "
                           "submission, total and out_of columns), and it would be replaced: "
                           "give another --out, or move that file away")
    return rows


def _checks(path):
    """(grade id, source) of each check cell (every notebook's grade ids are ex1_check, ...;
    the sources name the notebook's own checks module)."""
    nb = nbformat.read(path, as_version=4)
    return {(c.metadata.nbgrader.grade_id, c.source.strip()) for c in nb.cells
            if is_check_cell(c)}


def foreign(path, source):
    """Why the notebook ``path`` cannot be graded as ``source``'s ('' when it can): none of its
    check cells is one of that notebook's (another notebook saved under its name, or every
    exercise deleted), which nbgrader reports only as a traceback nobody sees."""
    if _checks(path) & _checks(source):
        return ""
    return (f"none of its cells are {source.stem}'s exercises (another notebook under this "
            "name, or its exercise cells deleted)")


def grade(submissions, out, source_dir=INSTRUCTOR, timeout=120, keep=None):
    """Grade every submission and write the gradebook CSV ``out``; returns its rows."""
    sources = sorted(Path(source_dir).glob("[0-9][0-9]_*.ipynb"))
    if not sources:
        raise GradingError(f"no instructor notebooks in {source_dir}")
    missing = [s for s in submissions if not Path(s).is_file()]
    if missing:
        raise GradingError(f"no such file: {', '.join(map(str, missing))}")
    if not Path(out).resolve().parent.is_dir():
        raise GradingError(f"--out {out}: its folder does not exist")
    earlier = earlier_rows(out)
    matched = [(Path(s), assignment_for(s, sources)) for s in submissions]

    rows = []
    with tempfile.TemporaryDirectory(dir=ROOT, prefix=".grading-") as tmp, grading_environment():
        course = Path(tmp)
        grader = Nbgrader(course, timeout)
        for source in sorted({a for _, a in matched}):
            (course / "source" / source.stem).mkdir(parents=True)
            shutil.copy(source, course / "source" / source.stem / source.name)
            ok, log = grader.generate_assignment(source.stem)
            if not ok:
                raise GradingError(f"nbgrader could not build {source.name}: {last_error(log)}")
        for index, (path, source) in enumerate(matched, 1):
            student = f"s{index:03d}"
            folder = course / "submitted" / student / source.stem
            folder.mkdir(parents=True)
            shutil.copy(path, folder / source.name)
            wanted = exercises(source)
            problem = unreadable(path) or foreign(path, source)
            if problem:   # zero for this one, with the reason; the others are graded as usual
                graded, note = False, f"not graded: {problem}"
            else:
                graded, note = autograde(grader, source, student, folder, timeout)
            got = scores(course, source.stem, student) if graded else {}
            row = {"submission": str(path), "notebook": source.stem}
            points = {gid.removesuffix("_check"): got.get(gid) or 0 for gid, _ in wanted}
            row.update(points)
            row["total"] = sum(points.values())
            row["out_of"] = sum(points for _, points in wanted)
            row["note"] = note
            rows.append(row)
            print(f"{path}: {row['total']:g} of {row['out_of']:g}" + (f" ({note})" if note else ""))
        if keep:
            shutil.copytree(course, keep, dirs_exist_ok=True)
    graded_now = {row["submission"] for row in rows}
    kept = [row for row in earlier if row["submission"] not in graded_now]
    if earlier:
        print(f"{out}: kept {len(kept)} earlier row(s), replaced {len(earlier) - len(kept)}")
    rows = kept + rows
    columns = ["submission", "notebook"]
    for row in rows:
        columns += [k for k in row if k not in columns and k not in ("total", "out_of", "note")]
    columns += ["total", "out_of", "note"]
    partial = Path(f"{out}.partial")
    with open(partial, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, columns, restval="")
        writer.writeheader()
        writer.writerows(rows)
    os.replace(partial, out)   # an earlier gradebook is replaced only by a complete one
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(prog="course.py grade", description=__doc__.split("\n")[0])
    parser.add_argument("submissions", nargs="+", help="handed-in notebooks (.ipynb)")
    parser.add_argument("--out", required=True, help="the gradebook CSV to write, or to add to")
    parser.add_argument("--timeout", type=int, default=120,
                        help="seconds a cell may run before it is stopped (default 120)")
    parser.add_argument("--source", default=str(INSTRUCTOR),
                        help="the folder of instructor notebooks (default instructor/)")
    parser.add_argument("--keep", help="copy nbgrader's course folder (gradebook, graded "
                                       "notebooks) here")
    args = parser.parse_args(argv)
    if args.timeout < 1:
        parser.error("--timeout must be at least 1 second")
    try:
        grade(args.submissions, args.out, args.source, args.timeout, args.keep)
    except GradingError as err:
        print(f"course.py grade: {err}", file=sys.stderr)
        return 2
    print(f"gradebook written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
