"""TEACHING.md, the teaching guide, covers every notebook that follows the lab format, with the
notebook's own plan (sections, minutes, core or optional) and its exercises (minutes, points)."""
import re
from pathlib import Path

import nbformat
import pytest

from test_notebook_format import NOT_YET, SOURCE, STEMS, exercises, plan_rows, sections

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "TEACHING.md"
CONVERTED = [stem for stem in STEMS if "plan table" not in NOT_YET.get(stem, ())]


def guide_section(number):
    """The text of the guide's '## NN · ...' section."""
    text = GUIDE.read_text(encoding="utf-8")
    match = re.search(rf"^## {number} · .*?(?=^## |\Z)", text, re.M | re.S)
    assert match, f"TEACHING.md has no section '## {number} · ...'"
    return match[0]


def test_the_guide_covers_the_converted_notebooks():
    assert CONVERTED, "no notebook follows the lab format: the guide would check nothing"
    assert {s[:2] for s in CONVERTED} <= set(re.findall(r"^## (\d\d) · ", GUIDE.read_text(), re.M))


@pytest.mark.parametrize("stem", CONVERTED)
def test_the_guide_gives_the_notebooks_plan_and_exercises(stem):
    nb = nbformat.read(SOURCE[stem], as_version=4)
    section = guide_section(stem[:2])
    assert plan_rows(section) == plan_rows(nb.cells[0].source), (
        f"the plan table of {stem} in TEACHING.md differs from the notebook's")
    for number, minutes, points, prompt, _ in [e for _, _, cells in sections(nb)
                                               for e in exercises(cells)]:
        title = re.search(rf"### Exercise {number} · (.*?) \(", prompt.source)[1]
        wanted = f"{number} · {title} ({minutes} min, {points} point"
        assert wanted in " ".join(section.split()), f"{stem}: the guide lacks '{wanted}'"
    for heading in ("Short of time", "GPU", "Exercises", "Typical mistakes the hints catch"):
        assert f"**{heading}" in section, f"{stem}: the guide says nothing under '{heading}'"


def test_a_changed_plan_fails_the_guide_check():
    section = guide_section("01")
    changed = section.replace("| Setup | 6 | core |", "| Setup | 7 | core |")
    assert changed != section and plan_rows(changed) != plan_rows(section)
