"""The lab format of ../shared/COURSE_FORMAT.md, checked on every notebook where a program can.

A notebook is cut into sections at its ``## `` headings; a section whose heading starts with
``Optional:`` is optional, the others (and the title cell) are the core path. What is checked:
- the title cell: "What you will learn" (at most 6 bullets), "Prerequisites", "Hardware", a plan
  table with one row per section (its minutes, core or optional) and the core total, and badges;
- time: the plan's core total is at most 90 minutes and never below
  ``core prose words / 100 + core code cells + each core exercise's stated minutes``;
- sizes: a markdown cell at most 200 words in the core (300 in an optional section), a code cell at
  most 25 lines in the core;
- no test machinery in what a learner reads: no ``NBVAL_`` comments (cell tags instead, each with
  its reason in the cell's ``nbval_reason`` metadata), no word about CI or ``course.py test``;
- saved outputs: no traceback, no stderr, no bare ``True``/``False`` result, no widget repr, no
  progress bar saved short of 100%;
- exercises: each ``### Exercise`` states its minutes and points (a coding exercise at least 8
  minutes), and has an answer cell with nbgrader's solution markers and a check cell;
- the core path runs alone: no core cell uses a name that only an optional cell defines (read from
  the code), and a notebook with optional sections is run with them removed.

Notebooks not converted yet fail some of these: ``NOT_YET`` lists which, in this one place, and
those checks are expected failures (strict: a check that starts passing must leave the list).
"""
import ast
import builtins
import re
from pathlib import Path

import nbformat
import pytest

from lab_format import core_only, sections
from notebook_setup import BADGES_START, badges
from notebook_versions import executed_notebooks

ROOT = Path(__file__).resolve().parents[1]
# The notebook that is edited and run: instructor/NN_*.ipynb where it exists (the student version
# in notebooks/ is built from it: tests/test_versions.py), else notebooks/NN_*.ipynb.
NOTEBOOKS = executed_notebooks()
STEMS = [p.stem for p in NOTEBOOKS]
SOURCE = dict(zip(STEMS, NOTEBOOKS))

#: The checks each notebook does not pass yet (issues #32 to #36 convert them).
NOT_YET = {}

CORE_MINUTES = 90
WORDS_PER_MINUTE = 100
MD_WORDS = {"core": 200, "optional": 300}
CODE_LINES = 25
CODING_EXERCISE_MINUTES = 8
NBVAL_TAGS = {"nbval-ignore-output", "raises-exception", "nbval-skip", "nbval-check-output"}
EXERCISE = re.compile(r"^###\s+Exercise\s+(\d+)\b.*?\((\d+)\s*min(?:utes)?,\s*(\d+)\s*points?\)",
                      re.M)


# ------------------------------------------------------------------ reading a notebook


def words(text):
    """Words a reader reads: tokens with a letter or digit (not table rules, not HTML comments)."""
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    return [t for t in text.split() if re.search(r"\w", t)]


def exercises(cells):
    """[(number, minutes, points, prompt, following cells)] for each ``### Exercise`` prompt."""
    found = []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown":
            continue
        for match in EXERCISE.finditer(cell.source):
            found.append((int(match[1]), int(match[2]), int(match[3]), cell, cells[i + 1:i + 3]))
    return found


def plan_rows(first):
    """{section: (minutes, kind)} and the core total, from the title cell's plan table."""
    rows, total = {}, None
    for line in first.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 2 or not line.strip().startswith("|"):
            continue
        numbers = [c for c in cells if re.fullmatch(r"\d+(\s*min)?", c)]
        if not numbers:
            continue
        minutes = int(re.match(r"\d+", numbers[0])[0])
        name = cells[0].strip("*` ")
        if "total" in name.lower():
            total = minutes
            continue
        kind = "optional" if any(c.lower().startswith("optional") for c in cells[1:]) else "core"
        rows[name] = (minutes, kind)
    return rows, total


def counted_minutes(nb):
    """The format's count over the core path: words / 100 + code cells + exercises' minutes."""
    prose = code = stated = 0
    for _, kind, cells in sections(nb):
        if kind != "core":
            continue
        in_exercise = set()
        for _, minutes, _, prompt, after in exercises(cells):
            stated += minutes
            in_exercise |= {id(prompt)} | {id(c) for c in after}
        for cell in cells:
            if id(cell) in in_exercise:
                continue
            if cell.cell_type == "markdown":
                prose += len(words(cell.source))
            elif cell.source.strip():
                code += 1
    return prose / WORDS_PER_MINUTE + code + stated


# ------------------------------------------------------------------ the checks


def check_title_cell(nb):
    first = nb.cells[0].source if nb.cells and nb.cells[0].cell_type == "markdown" else ""
    problems = []
    learn = re.search(r"What you will learn\**\s*\n((?:\s*[-*] .*\n?(?:\s{2,}\S.*\n?)*)+)", first)
    if not learn:
        problems.append("no 'What you will learn' list")
    elif len(re.findall(r"^\s*[-*] ", learn[1], re.M)) > 6:
        problems.append("more than 6 things to learn")
    for word in ("Prerequisites", "Hardware"):
        if word not in first:
            problems.append(f"no '{word}'")
    if BADGES_START not in first or "Colab" not in first.split(BADGES_START)[-1]:
        # written by tools/notebook_setup.py from pyproject's [project.urls] Repository (which
        # test_anywhere checks): badges once it is set, a line saying what to set until then
        problems.append("no Open in Colab / Kaggle badges")
    return problems


def check_plan_table(nb):
    rows, total = plan_rows(nb.cells[0].source if nb.cells else "")
    if not rows or total is None:
        return ["no plan table with minutes and a core total in the title cell"]
    problems = []
    def key(name):
        return re.sub(r"^optional:\s*", "", name.strip("*` ").lower()).strip()

    heads = {name: kind for name, kind, _ in sections(nb)[1:]}
    for name, kind in heads.items():
        row = next((r for r in rows if key(r) and (key(r) in key(name) or key(name) in key(r))),
                   None)
        if row is None:
            problems.append(f"section '{name}' has no row in the plan")
        elif rows[row][1] != kind:
            problems.append(f"section '{name}' is {kind}, the plan says {rows[row][1]}")
    core = sum(m for m, kind in rows.values() if kind == "core")
    if core != total:
        problems.append(f"the core rows add up to {core} min, the table's total says {total}")
    if total > CORE_MINUTES:
        problems.append(f"the core path takes {total} min, more than {CORE_MINUTES}")
    count = counted_minutes(nb)
    if total < count:
        problems.append(f"the core total ({total} min) is below the count of words/100 + code "
                        f"cells + exercise minutes ({count:.0f} min)")
    return problems


def check_markdown_sizes(nb):
    return [f"a markdown cell in '{name}' has {n} words (at most {MD_WORDS[kind]} in a {kind} "
            f"section): '{cell.source[:50]}...'"
            for name, kind, cells in sections(nb) for cell in cells
            if cell.cell_type == "markdown" and (n := len(words(cell.source))) > MD_WORDS[kind]]


def check_code_sizes(nb):
    return [f"a code cell in '{name}' has {n} lines (at most {CODE_LINES} in the core): "
            f"'{cell.source[:50]}...'"
            for name, kind, cells in sections(nb) for cell in cells
            if kind == "core" and cell.cell_type == "code"
            and (n := len(cell.source.rstrip().splitlines())) > CODE_LINES]


def check_nbval_markers(nb):
    problems = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        if "NBVAL_" in cell.source:
            problems.append(f"an NBVAL_ comment in the code (use a cell tag): "
                            f"'{cell.source[:50]}...'")
        tags = set(cell.metadata.get("tags", [])) & NBVAL_TAGS
        if tags and not cell.metadata.get("nbval_reason"):
            problems.append(f"tags {sorted(tags)} without an nbval_reason in the metadata: "
                            f"'{cell.source[:50]}...'")
    return problems


def check_test_machinery_in_prose(nb):
    pattern = re.compile(r"\bnbval\b|course\.py test|\bCI\b|pytest", re.I)
    return [f"test machinery in the prose: '{m[0]}' in '{cell.source[:50]}...'"
            for cell in nb.cells if cell.cell_type == "markdown"
            for m in [pattern.search(cell.source)] if m]


def check_saved_outputs(nb):
    problems = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        where = f"'{cell.source[:40]}...'"
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                problems.append(f"a saved traceback ({out.get('ename')}) under {where}")
            elif kind == "stream" and out.get("name") == "stderr":
                problems.append(f"red stderr saved under {where}: '{out.get('text', '')[:60]}'")
            text = out.get("text", "") if kind == "stream" else \
                out.get("data", {}).get("text/plain", "")
            text = "".join(text) if isinstance(text, list) else text
            if kind == "execute_result" and text.strip() in ("True", "False"):
                problems.append(f"a bare {text.strip()} as the result of {where}")
            if "interactive(children=" in text or \
                    "application/vnd.jupyter.widget-view+json" in out.get("data", {}) and \
                    "text/plain" not in out.get("data", {}):
                problems.append(f"a widget repr saved under {where}")
            if re.search(r"(?<!\d)(?:\d|[1-9]\d)%\|", text.splitlines()[-1] if text else ""):
                problems.append(f"a progress bar saved short of 100% under {where}")
    return problems


def check_exercises(nb):
    problems = []
    found = [e for _, _, cells in sections(nb) for e in exercises(cells)]
    headed = [c for c in nb.cells if c.cell_type == "markdown"
              and re.search(r"^###\s+Exercise", c.source, re.M)]
    if not found or len(found) < sum(len(re.findall(r"^###\s+Exercise", c.source, re.M))
                                     for c in headed):
        problems.append("an exercise without '### Exercise N · title (M min, P points)'")
    for number, minutes, points, _, after in found:
        code = [c for c in after if c.cell_type == "code"]
        if len(code) < 2:
            problems.append(f"exercise {number}: needs an answer cell and a check cell after it")
            continue
        answer, check = code[0].source, code[1].source
        if "### BEGIN SOLUTION" not in answer or "### END SOLUTION" not in answer:
            problems.append(f"exercise {number}: the answer cell has no nbgrader solution markers")
        if "check" not in check:
            problems.append(f"exercise {number}: the cell after the answer does not check it")
        grader = [c.metadata.get("nbgrader", {}) for c in code[:2]]
        if not grader[0].get("solution") or not grader[0].get("grade_id"):
            problems.append(f"exercise {number}: the answer cell is not an nbgrader solution cell")
        if not grader[1].get("grade") or not grader[1].get("locked") \
                or not grader[1].get("grade_id"):
            problems.append(f"exercise {number}: the check cell is not a locked nbgrader grade "
                            f"cell")
        elif grader[1].get("points") != points:
            problems.append(f"exercise {number}: the check cell gives {grader[1].get('points')} "
                            f"points, the prompt {points}")
        if re.search(r"^\s*def ", answer, re.M) and minutes < CODING_EXERCISE_MINUTES:
            problems.append(f"exercise {number}: a coding exercise of {minutes} min "
                            f"(at least {CODING_EXERCISE_MINUTES})")
        if points < 1:
            problems.append(f"exercise {number}: no points")
    return problems


def defined_and_used(source):
    """(names a cell defines, names it reads before defining them), from its code."""
    source = "\n".join(line for line in source.splitlines()
                       if not line.lstrip().startswith(("%", "!")))
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    defined, used = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (defined if isinstance(node.ctx, (ast.Store, ast.Del)) else used).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defined.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            defined.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.arg):
            defined.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            defined.add(node.name)
    return defined, used - set(dir(builtins))


def check_core_path_names(nb):
    core_defined, optional_only, problems = set(), set(), []
    for name, kind, cells in sections(nb):
        for cell in cells:
            if cell.cell_type != "code":
                continue
            defined, used = defined_and_used(cell.source)
            if kind == "core":
                missing = (used & optional_only) - core_defined - defined  # its own: fine
                if missing:
                    problems.append(f"core cell in '{name}' uses {sorted(missing)}, defined only "
                                    f"in an optional section: '{cell.source[:40]}...'")
                core_defined |= defined
            else:
                optional_only |= defined - core_defined
    return problems


CHECKS = {
    "title cell": check_title_cell,
    "plan table": check_plan_table,
    "markdown sizes": check_markdown_sizes,
    "code sizes": check_code_sizes,
    "nbval markers": check_nbval_markers,
    "test machinery in prose": check_test_machinery_in_prose,
    "saved outputs": check_saved_outputs,
    "exercises": check_exercises,
    "core path names": check_core_path_names,
}


def cases():
    for stem in STEMS:
        for check in CHECKS:
            marks = [pytest.mark.xfail(strict=True, reason=f"{stem} is not converted yet")] \
                if check in NOT_YET.get(stem, ()) else []
            yield pytest.param(stem, check, id=f"{stem}-{check}", marks=marks)


@pytest.mark.parametrize("stem, check", list(cases()))
def test_notebook_follows_the_lab_format(stem, check):
    nb = nbformat.read(SOURCE[stem], as_version=4)
    problems = CHECKS[check](nb)
    assert not problems, f"{stem}: " + "\n".join(problems)


def test_the_expected_failures_name_real_notebooks_and_checks():
    assert set(NOT_YET) <= set(STEMS)
    assert all(checks <= set(CHECKS) for checks in NOT_YET.values())


# ------------------------------------------------------------------ the checks themselves


def notebook(*cells):
    """A notebook from ("md", source) and ("code", source[, outputs]) tuples."""
    nb = nbformat.v4.new_notebook()
    for kind, source, *rest in cells:
        if kind == "md":
            nb.cells.append(nbformat.v4.new_markdown_cell(source))
        else:
            cell = nbformat.v4.new_code_cell(source)
            cell.outputs = rest[0] if rest else []
            nb.cells.append(cell)
    return nb


TITLE = """# 9 · A lab

**What you will learn**
- one thing;
- another.

**Prerequisites:** notebook 00. **Hardware:** a CPU is enough.

| section | minutes | |
|---|---|---|
| Setup | 2 | core |
| Splitting | 10 | core |
| Optional: deeper | 10 | optional |
| **Core total** | 12 | |

""" + badges("https://github.com/someone/dp-course", "09_lab.ipynb")


ANSWER_CELL = {"grade": False, "grade_id": "ex1_answer", "locked": False, "schema_version": 3,
               "solution": True, "task": False}
CHECK_CELL = {"grade": True, "grade_id": "ex1_check", "locked": True, "points": 2,
              "schema_version": 3, "solution": False, "task": False}


def good_notebook():
    nb = notebook(("md", TITLE), ("md", "## Setup"), ("code", "x = 1"),
                  ("md", "## Splitting\nWe split."), ("code", "y = x + 1"),
                  ("md", "### Exercise 1 · sizes (3 min, 2 points)\nWhat is y?"),
                  ("code", "### BEGIN SOLUTION\nanswer = 2\n### END SOLUTION"),
                  ("code", "checks.check_y(answer)"),
                  ("md", "## Optional: deeper"), ("code", "z = y * 2"))
    nb.cells[6].metadata["nbgrader"] = dict(ANSWER_CELL)
    nb.cells[7].metadata["nbgrader"] = dict(CHECK_CELL)
    return nb


def test_a_notebook_in_the_format_passes_every_check():
    nb = good_notebook()
    assert {name: check(nb) for name, check in CHECKS.items()} == \
        {name: [] for name in CHECKS}
    # 4 prose words / 100 + 2 code cells + 3 exercise minutes (the title cell's words count too)
    assert 5 < counted_minutes(nb) < 6


def title(*replacements):
    """A change of the title cell: each (old, new) replaced in TITLE."""
    def change(nb):
        source = TITLE
        for old, new in replacements:
            source = source.replace(old, new)
        nb.cells[0].source = source
    return change


@pytest.mark.parametrize("change, check, says", [
    (title(("| 10 | core", "| 100 | core"), ("| 12 |", "| 102 |")), "plan table", "more than 90"),
    (title(("| 2 | core", "| 1 | core"), ("| 10 | core", "| 3 | core"), ("| 12 |", "| 4 |")),
     "plan table", "below the count"),
    (title(("| **Core total** | 12 |", "")), "plan table", "no plan table"),
    (title(("| 10 | core", "| 11 | core")), "plan table", "add up to 13 min"),
    (lambda nb: nb.cells[8].__setitem__("source", "## Deeper"), "plan table", "is core"),
    (title(("Prerequisites", "Before")), "title cell", "Prerequisites"),
    (title(("- another.", "- b\n- c\n- d\n- e\n- f\n- g")), "title cell", "more than 6"),
    (title((BADGES_START, "")), "title cell", "badges"),
    (lambda nb: nb.cells[3].__setitem__("source", "## Splitting\n" + "word " * 201),
     "markdown sizes", "202 words (at most 200"),
    (lambda nb: nb.cells[4].__setitem__("source", "y = 1\n" * 26), "code sizes", "26 lines"),
    (lambda nb: nb.cells[2].__setitem__("source", "x = 1  # NBVAL_IGNORE_OUTPUT"),
     "nbval markers", "NBVAL_"),
    (lambda nb: nb.cells[2].metadata.__setitem__("tags", ["raises-exception"]),
     "nbval markers", "nbval_reason"),
    (lambda nb: nb.cells[3].__setitem__("source", "## Splitting\nCI runs `course.py test`."),
     "test machinery in prose", "CI"),
    (lambda nb: nb.cells[2].__setitem__("outputs", [nbformat.v4.new_output(
        "error", ename="ValueError", evalue="x", traceback=[])]), "saved outputs", "traceback"),
    (lambda nb: nb.cells[2].__setitem__("outputs", [nbformat.v4.new_output(
        "stream", name="stderr", text="warning")]), "saved outputs", "stderr"),
    (lambda nb: nb.cells[2].__setitem__("outputs", [nbformat.v4.new_output(
        "execute_result", data={"text/plain": "False"}, execution_count=1)]),
     "saved outputs", "bare False"),
    (lambda nb: nb.cells[2].__setitem__("outputs", [nbformat.v4.new_output(
        "stream", name="stdout", text="  0%|          | 0/72")]), "saved outputs", "short of 100%"),
    (lambda nb: nb.cells[2].__setitem__("outputs", [nbformat.v4.new_output(
        "execute_result", data={"text/plain": "interactive(children=(IntSlider()))"},
        execution_count=1)]), "saved outputs", "widget"),
    (lambda nb: nb.cells[5].__setitem__("source", "### Exercise 1 · sizes\nWhat is y?"),
     "exercises", "without"),
    (lambda nb: nb.cells[6].__setitem__("source", "answer = 2"), "exercises", "solution markers"),
    (lambda nb: nb.cells[6].metadata.pop("nbgrader"), "exercises", "not an nbgrader solution"),
    (lambda nb: nb.cells[7].metadata.nbgrader.__setitem__("locked", False), "exercises",
     "not a locked nbgrader grade"),
    (lambda nb: nb.cells[7].metadata.nbgrader.__setitem__("points", 1), "exercises",
     "gives 1 points, the prompt 2"),
    (lambda nb: nb.cells[6].__setitem__("source", "### BEGIN SOLUTION\ndef f():\n    return 2\n"
                                        "### END SOLUTION"), "exercises", "coding exercise of 3"),
    (lambda nb: nb.cells.extend([nbformat.v4.new_markdown_cell("## Back to the core"),
                                 nbformat.v4.new_code_cell("w = z + x")]),
     "core path names", "['z']"),
])
def test_each_check_refuses_its_fault(change, check, says):
    nb = good_notebook()
    change(nb)
    problems = CHECKS[check](nb)
    assert problems and says in "\n".join(problems), problems


def test_a_progress_bar_at_100_percent_passes():
    nb = good_notebook()
    nb.cells[2].outputs = [nbformat.v4.new_output("stream", name="stdout",
                                                  text="100%|##########| 72/72 [00:01]\n")]
    assert check_saved_outputs(nb) == []


# ------------------------------------------------------------------ the core path, run alone
# The "core path names" check above reads the rule from the code; tests/test_browser.py runs each
# student notebook's core path alone in JupyterLab.


def test_core_only_drops_the_optional_sections():
    nb = notebook(("md", "# T"), ("md", "## A"), ("code", "a = 1"), ("md", "## Optional: B"),
                  ("code", "b = a"), ("md", "## C"), ("code", "c = a"))
    assert [c.source for c in core_only(nb).cells] == ["# T", "## A", "a = 1", "## C", "c = a"]


def test_notebook_00_lists_each_converted_notebooks_core_minutes():
    """Notebook 00's course table gives each lab's minutes: its plan's core total, once it has
    one."""
    table = nbformat.read(NOTEBOOKS[0], as_version=4).cells
    listed = {m[1]: int(m[2]) for cell in table if cell.cell_type == "markdown"
              for m in re.finditer(r"^\|\s*(\d\d)\s*\|.*\|\s*(\d+)\s*\|\s*$", cell.source, re.M)}
    assert sorted(listed) == [stem[:2] for stem in STEMS]
    for stem in STEMS:
        if "plan table" in NOT_YET.get(stem, ()):
            continue
        _, total = plan_rows(nbformat.read(SOURCE[stem], as_version=4).cells[0].source)
        assert listed[stem[:2]] == total, (stem, listed[stem[:2]], total)
