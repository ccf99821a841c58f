"""`python3 course.py grade` (tools/grade.py): nbgrader's autograder on handed-in notebooks, one
gradebook CSV row per submission.

The submissions are notebook 01's exercises (its set-up cell, imports and exercise section, cut
from the instructor version so that each run takes seconds): the instructor version, the untouched
student version, one with three faults in three exercises (a wrong answer, an endless loop, a
deleted check cell), and one whose kernel dies.
"""
import copy
import csv
import shutil
import subprocess
import sys

import nbformat
import pytest

import grade as grading
from notebook_versions import INSTRUCTOR, is_answer_cell, is_check_cell, student_version
from support import ROOT

NAME = "01_dp_intro.ipynb"
POINTS = {"ex1": 1, "ex2": 1, "ex3": 1, "ex4": 1, "ex5": 3, "ex6": 3}


def exercises_only(nb):
    """The set-up cell, the first imports and the exercise section of notebook ``nb``."""
    code = [c for c in nb.cells if c.cell_type == "code"]
    start = next(i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"
                 and c.source.startswith("## Exercises"))
    end = next((i for i, c in enumerate(nb.cells) if i > start and c.cell_type == "markdown"
                and c.source.startswith("## ")), len(nb.cells))
    cut = nbformat.v4.new_notebook(metadata=nb.metadata)
    cut.cells = code[:2] + nb.cells[start:end]
    return cut


def answer_cell(nb, number):
    return [c for c in nb.cells if is_answer_cell(c)][number - 1]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("grade")
    source_dir = tmp / "instructor"
    source_dir.mkdir()
    full = exercises_only(nbformat.read(INSTRUCTOR / NAME, as_version=4))
    assert [c.metadata.nbgrader.points for c in full.cells if is_check_cell(c)] == \
        list(POINTS.values())
    nbformat.write(full, source_dir / NAME)

    def submit(who, change=None, nb=None):
        nb = copy.deepcopy(nb or full)
        if change:
            change(nb)
        (tmp / who).mkdir()
        nbformat.write(nb, tmp / who / NAME)
        return str(tmp / who / NAME)

    def faults(nb):
        answer_cell(nb, 1).source = "answer = [12, 12, 13, 13]"    # wrong
        answer_cell(nb, 2).source = "while True:\n    pass"         # never ends
        nb.cells.remove([c for c in nb.cells if is_check_cell(c)][2])   # exercise 3's check

    def dies_at_ex1(nb):   # early: finding the cell that ends the kernel runs up to it
        answer_cell(nb, 1).source = "import os\nos._exit(1)"

    submissions = [
        submit("teacher"),
        submit("untouched", nb=student_version(full)),
        submit("faults", faults),
        submit("crash", dies_at_ex1),
    ]
    out = tmp / "grades.csv"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "grade.py"), *submissions,
                           "--out", str(out), "--source", str(source_dir), "--timeout", "10"],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = list(csv.DictReader(out.open()))
    return {row["submission"].split("/")[-2]: row for row in rows}, done.stdout


def points(row):
    return {k: float(row[k]) for k in POINTS}


def test_the_instructor_version_gets_full_marks(graded):
    rows, _ = graded
    assert points(rows["teacher"]) == POINTS and float(rows["teacher"]["total"]) == 10
    assert float(rows["teacher"]["out_of"]) == 10 and rows["teacher"]["note"] == ""


def test_an_untouched_student_version_gets_zero(graded):
    rows, _ = graded
    assert points(rows["untouched"]) == dict.fromkeys(POINTS, 0)


def test_a_wrong_answer_an_endless_loop_and_a_deleted_check_lose_only_their_exercises(graded):
    rows, _ = graded
    assert points(rows["faults"]) == {**POINTS, "ex1": 0, "ex2": 0, "ex3": 0}
    assert rows["faults"]["note"] == ""


def test_a_cell_that_kills_the_kernel_gets_zero_and_the_rest_is_graded(graded):
    rows, out = graded
    assert points(rows["crash"]) == {**POINTS, "ex1": 0}
    assert "ended the Python kernel" in rows["crash"]["note"], rows["crash"]
    assert "crash" in out and "teacher" in out   # the others were graded too


def test_the_gradebook_has_one_row_per_submission_in_order(graded):
    rows, _ = graded
    assert list(rows) == ["teacher", "untouched", "faults", "crash"]


def test_a_submission_that_matches_no_notebook_is_refused_before_grading(tmp_path):
    odd = tmp_path / "homework.ipynb"
    nbformat.write(nbformat.v4.new_notebook(), odd)
    with pytest.raises(grading.GradingError, match="cannot tell which notebook"):
        grading.grade([str(odd)], tmp_path / "g.csv")
    assert not (tmp_path / "g.csv").exists()


def test_a_missing_submission_or_out_folder_is_refused(tmp_path):
    with pytest.raises(grading.GradingError, match="no such file"):
        grading.grade([str(tmp_path / NAME)], tmp_path / "g.csv")
    real = tmp_path / NAME
    nbformat.write(nbformat.v4.new_notebook(), real)
    with pytest.raises(grading.GradingError, match="does not exist"):
        grading.grade([str(real)], tmp_path / "no" / "g.csv")


def test_a_file_that_is_not_a_notebook_is_named(tmp_path):
    """A submission that is empty or not a notebook gets zero with the reason in its note, and
    the other submissions are graded as usual (sweep 2, E6 and E7: nbgrader's message pointed
    to a traceback nobody saw)."""
    empty, text = tmp_path / "a_01_dp_intro.ipynb", tmp_path / "b_01_dp_intro.ipynb"
    empty.write_text("")
    text.write_text("my answers are 4 and 5")
    assert grading.unreadable(empty) == "the file is empty"
    assert grading.unreadable(text).startswith("not a notebook (")
    assert grading.unreadable(INSTRUCTOR / "01_dp_intro.ipynb") == ""


def test_grading_more_into_a_gradebook_keeps_its_rows(tmp_path, capsys):
    """Sweep 3 (G9, G10): each `grade ... --out g.csv` replaced the gradebook, so a teacher who
    graded submissions as they came in kept only the last batch, and a file that was not a
    gradebook was overwritten. Now earlier rows stay, a submission graded again gets its new row,
    and another file there is refused before any grading."""
    out = tmp_path / "g.csv"
    a, b = tmp_path / "a_01_dp_intro.ipynb", tmp_path / "b_01_dp_intro.ipynb"
    a.write_text("")   # empty: graded zero at once, without a kernel
    b.write_text("")
    grading.grade([str(a)], out)
    grading.grade([str(b)], out)
    grading.grade([str(a)], out)
    assert [r["submission"] for r in csv.DictReader(out.open())] == [str(b), str(a)]
    assert "kept 1 earlier row(s), replaced 1" in capsys.readouterr().out
    other = tmp_path / "marks.csv"
    other.write_text("name,mark\nalice,9\n")
    with pytest.raises(grading.GradingError, match="is not a gradebook of course.py grade"):
        grading.grade([str(a)], other)
    assert other.read_text() == "name,mark\nalice,9\n"


def test_another_notebook_under_the_name_is_named(tmp_path):
    """Sweep 3 (G8): notebook 03 saved as dave_00_getting_started.ipynb got nbgrader's "Please
    see the the above traceback", with no traceback."""
    dave = tmp_path / "dave_01_dp_intro.ipynb"
    shutil.copy(INSTRUCTOR / "03_dp_vs_ddp.ipynb", dave)
    source = INSTRUCTOR / NAME
    assert grading.foreign(dave, source) == ("none of its cells are 01_dp_intro's exercises "
                                             "(another notebook under this name, or its exercise "
                                             "cells deleted)")
    assert grading.foreign(INSTRUCTOR / NAME, source) == ""
    assert grading.foreign(ROOT / "notebooks" / NAME, source) == ""   # the student version
