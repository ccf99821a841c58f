"""The student and instructor versions of a notebook, built from one source.

A notebook in the lab format has its source in ``instructor/``: every exercise's answer cell holds
the solution between nbgrader's markers (``### BEGIN SOLUTION`` / ``### END SOLUTION``), and every
check prints ``Correct``. It is run top to bottom once (tools/run_notebooks.py) and checked by
strict nbval. The student version in ``notebooks/``, which learners open, is built from it without
running it again:

- nbgrader's own preprocessors clear each solution region (it becomes ``answer = None``), lock the
  check cells and record their checksums, as ``nbgrader generate_assignment`` does; a coding
  exercise's answer cell may instead give the code students start from in its metadata
  (``student_source``, which must hold ``answer = None``): a skeleton with ``TODO`` comments;
- every other cell keeps the source and the saved outputs of the instructor run;
- each check cell's output becomes what its check prints for ``answer = None`` (run here, in this
  process: ``Not answered yet: ...``).

    .venv/bin/python tools/notebook_versions.py     # rebuild every student version

A notebook with no source in ``instructor/`` yet is edited and run in ``notebooks/`` itself.
"""
import contextlib
import copy
import io
import sys
from pathlib import Path

import nbformat

# nbgrader is imported where it is used: the GPU tests (tests/test_gpu.py) find the notebooks with
# executed_notebooks() on a machine that has no nbgrader.

ROOT = Path(__file__).resolve().parent.parent
INSTRUCTOR = ROOT / "instructor"
STUDENT = ROOT / "notebooks"

#: What a solution region becomes in the student version.
STUB = "answer = None"
BEGIN, END = "### BEGIN SOLUTION", "### END SOLUTION"


def sources():
    """The instructor notebooks: the sources of the student versions in notebooks/."""
    return sorted(INSTRUCTOR.glob("[0-9][0-9]_*.ipynb"))


def source_of(path):
    """The notebook that is edited and run for ``notebooks/NAME``: its instructor source if it has
    one, else itself."""
    path = Path(path)
    source = INSTRUCTOR / path.name
    return source if source.is_file() else path


def executed_notebooks():
    """Every notebook that is run (by nbval, on an older CPU, in the core-path test): the
    instructor source of each notebook that has one, and the others in notebooks/."""
    return sorted({source_of(p) for p in STUDENT.glob("[0-9][0-9]_*.ipynb")} | set(sources()),
                  key=lambda p: p.name)


def is_answer_cell(cell):
    """An exercise's answer cell: a code cell nbgrader counts as a solution cell."""
    from nbgrader.utils import is_solution
    return cell.cell_type == "code" and is_solution(cell)


def is_check_cell(cell):
    """An exercise's check cell: a code cell nbgrader grades."""
    from nbgrader.utils import is_grade
    return cell.cell_type == "code" and is_grade(cell)


def printed_unanswered(source, folder):
    """What a check cell prints when the answer is None: its source run here, with ``answer``
    None and the notebook's folder first on the path (for its checks_NN module)."""
    out = io.StringIO()
    sys.path.insert(0, str(folder))
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, "<check cell>", "exec"), {"answer": None})
    finally:
        sys.path.remove(str(folder))
    return out.getvalue()


def student_version(nb):
    """The student version of instructor notebook ``nb`` (a new notebook; ``nb`` is unchanged)."""
    from nbgrader.preprocessors import ClearSolutions, ComputeChecksums, LockCells
    nb = copy.deepcopy(nb)
    nb, resources = LockCells().preprocess(nb, {})
    nb, resources = ClearSolutions(code_stub={"python": STUB}).preprocess(nb, resources)
    _skeletons(nb)   # before the checksums: they cover what students start from
    nb, resources = ComputeChecksums().preprocess(nb, resources)
    for cell in nb.cells:
        if is_answer_cell(cell):
            cell.outputs = []
        elif is_check_cell(cell):
            text = printed_unanswered(cell.source, STUDENT)
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=text)]
    return nb


def _skeletons(nb):
    """Each answer cell with a ``student_source`` gets it as its source (after ClearSolutions)."""
    for cell in nb.cells:
        skeleton = cell.metadata.pop("student_source", None)
        if skeleton is None:
            continue
        if not is_answer_cell(cell) or STUB not in skeleton or "SOLUTION" in skeleton:
            raise ValueError(f"student_source belongs to an answer cell, holds {STUB!r} and no "
                             f"solution: {cell.source[:60]!r}")
        cell.source = skeleton


def build(path):
    """Write the student version of instructor notebook ``path`` into notebooks/."""
    nb = nbformat.read(path, as_version=4)
    target = STUDENT / Path(path).name
    nbformat.write(student_version(nb), target)
    return target


def main(paths=None):
    for path in map(Path, paths or sources()):
        target = build(path)
        print(f"built {target.relative_to(ROOT)} from {path.resolve().relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
