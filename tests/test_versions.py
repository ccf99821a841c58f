"""The student versions in notebooks/ are built from the instructor notebooks in instructor/
(tools/notebook_versions.py): up to date, with no solution in them, and each check saying
``Correct`` in the instructor version and ``Not answered yet`` in the student version."""
import json
import re

import nbformat
import pytest

import notebook_versions as versions
from notebook_versions import is_answer_cell, is_check_cell, student_version

SOURCES = versions.sources()
NAMES = [p.name for p in SOURCES]


def read(path):
    return nbformat.read(path, as_version=4)


def printed(cell):
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


def test_the_lab_format_notebooks_have_instructor_sources():
    assert {"00_getting_started.ipynb", "01_dp_intro.ipynb",
            "02_dataparallel_internals.ipynb"} <= set(NAMES)
    assert all((versions.STUDENT / name).is_file() for name in NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_the_student_version_is_the_build_of_its_source(name):
    built = student_version(read(versions.INSTRUCTOR / name))
    committed = read(versions.STUDENT / name)
    assert json.loads(nbformat.writes(built)) == json.loads(nbformat.writes(committed)), (
        f"notebooks/{name} is out of date with instructor/{name}: run "
        f".venv/bin/python tools/notebook_versions.py instructor/{name}")


@pytest.mark.parametrize("name", NAMES)
def test_every_check_is_right_in_the_instructor_version(name):
    cells = [c for c in read(versions.INSTRUCTOR / name).cells if is_check_cell(c)]
    assert cells, f"instructor/{name} has no check cell"
    for cell in cells:
        assert printed(cell).startswith("Correct: "), (cell.metadata.nbgrader.grade_id,
                                                        printed(cell))


@pytest.mark.parametrize("name", NAMES)
def test_the_student_version_holds_no_solution(name):
    source, student = read(versions.INSTRUCTOR / name), read(versions.STUDENT / name)
    answers = [(a, b) for a, b in zip(source.cells, student.cells) if is_answer_cell(a)]
    assert answers and len(source.cells) == len(student.cells)
    for full, empty in answers:
        solution = full.source.split(versions.BEGIN)[1].split(versions.END)[0]
        assert solution.strip() and solution.strip() not in empty.source
        assert versions.STUB in empty.source and "SOLUTION" not in empty.source
        assert not empty.outputs
    for cell in student.cells:
        if is_check_cell(cell):
            assert printed(cell).startswith("Not answered yet: "), printed(cell)
            assert cell.metadata.editable is False and cell.metadata.deletable is False


@pytest.mark.parametrize("name", NAMES)
def test_exercise_ids_are_unique_and_answers_come_before_their_checks(name):
    cells = read(versions.INSTRUCTOR / name).cells
    ids = [c.metadata.nbgrader.grade_id for c in cells if "nbgrader" in c.metadata]
    assert len(ids) == len(set(ids)), ids
    kinds = ["answer" if is_answer_cell(c) else "check" for c in cells
             if is_answer_cell(c) or is_check_cell(c)]
    assert kinds == ["answer", "check"] * (len(kinds) // 2), kinds


# ------------------------------------------------------------------ the build itself


def exercise_notebook(answer_source, answer_meta=True):
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python"}
    meta = {"nbgrader": {"grade": False, "grade_id": "a", "locked": False, "schema_version": 3,
                         "solution": True, "task": False}} if answer_meta else {}
    check = ("import checks_00 as checks\n"
             "print('asked for', repr(answer))\n"
             "checks.check_batches_per_epoch(answer)")
    nb.cells = [
        nbformat.v4.new_code_cell(answer_source, metadata=meta),
        nbformat.v4.new_code_cell(check, metadata={"nbgrader": {
            "grade": True, "grade_id": "c", "locked": True, "points": 1, "schema_version": 3,
            "solution": False, "task": False}}),
    ]
    nb.cells[1].outputs = [nbformat.v4.new_output("stream", name="stdout", text="Correct: ...")]
    return nb


def test_the_build_clears_the_solution_and_runs_the_check_on_none():
    nb = exercise_notebook("# Replace None.\n### BEGIN SOLUTION\nanswer = 118\n### END SOLUTION")
    built = student_version(nb)
    assert built.cells[0].source == "# Replace None.\nanswer = None"
    # The check cell really ran, with answer None: its own print is there too.
    assert printed(built.cells[1]) == ("asked for None\n"
                                       "Not answered yet: replace None with your answer.\n")
    assert "118" in nb.cells[0].source   # the source is left as it was


def test_a_coding_exercise_starts_from_its_skeleton():
    nb = exercise_notebook("### BEGIN SOLUTION\ndef f():\n    return 118\nanswer = f\n"
                           "### END SOLUTION")
    skeleton = "def f():\n    return None  # TODO\n\n\nanswer = None"
    nb.cells[0].metadata["student_source"] = skeleton
    built = student_version(nb)
    assert built.cells[0].source == skeleton and "student_source" not in built.cells[0].metadata
    assert "Not answered yet" in printed(built.cells[1])
    assert nb.cells[0].metadata["student_source"] == skeleton   # the source is left as it was
    for bad in ("def f():\n    return 118", "### BEGIN SOLUTION\nanswer = None"):
        nb.cells[0].metadata["student_source"] = bad      # no placeholder, or a solution
        with pytest.raises(ValueError, match="student_source"):
            student_version(nb)


def test_the_build_refuses_a_solution_outside_an_answer_cell():
    nb = exercise_notebook("### BEGIN SOLUTION\nanswer = 118\n### END SOLUTION",
                           answer_meta=False)
    with pytest.raises(RuntimeError, match="non-solution cell"):
        student_version(nb)


def test_the_build_refuses_an_unclosed_solution():
    with pytest.raises(RuntimeError, match="no end solution"):
        student_version(exercise_notebook("### BEGIN SOLUTION\nanswer = 118"))


def test_a_changed_source_makes_the_committed_student_version_out_of_date():
    name = NAMES[0]
    source = read(versions.INSTRUCTOR / name)
    answer = next(c for c in source.cells if is_answer_cell(c))
    answer.source = re.sub(r"# .*", "# Replace None with something else.", answer.source, 1)
    committed = read(versions.STUDENT / name)
    assert nbformat.writes(student_version(source)) != nbformat.writes(committed)
