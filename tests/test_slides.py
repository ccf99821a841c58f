"""``python3 course.py slides`` (tools/slides.py): each lab's core path as a reveal.js deck.

The decks load reveal.js, require.js and jQuery from build/slides/vendor/, which the first build
downloads from the npm registry (CI reaches it, as it reaches PyPI). The browser test opens one deck
in headless Chromium, offline from everything but those files, and checks that its slides render.
"""
import html as html_lib
import io
import re
import tarfile

import nbformat
import pytest

import slides
from lab_format import sections
from support import ROOT, under_ci
from support.browser_lab import CHROMIUM_ARGS, find_browser

LAB = ROOT / "notebooks" / "01_dp_intro.ipynb"


@pytest.fixture(scope="module")
def deck(tmp_path_factory):
    """The deck of notebook 01, built into a temporary folder (the downloads stay in build/)."""
    path = slides.build(LAB, tmp_path_factory.mktemp("slides"))
    return path, path.read_text(encoding="utf-8")


def top_sections(html):
    """The titles of the deck's slides (its top-level sections), in order."""
    body = html.split('<div class="slides">', 1)[1]
    titles, depth = [], 0
    for tag in re.finditer(r"<(/?)section\b[^>]*>", body):
        if tag[1]:
            depth -= 1
            continue
        if depth == 0:
            heading = re.search(r"<h([12])[^>]*>(.*?)</h\1>", body[tag.end():], re.S)
            text = heading[2] if heading else ""
            text = re.sub(r'<a class="anchor-link".*?</a>|<[^>]+>', "", text)
            titles.append(html_lib.unescape(text).strip())
        depth += 1
    return titles


def test_the_deck_is_the_core_path_one_slide_per_section(deck):
    _, html = deck
    nb = nbformat.read(LAB, as_version=4)
    core = [name for name, kind, _ in sections(nb)[1:] if kind == "core"]
    optional = [name for name, kind, _ in sections(nb) if kind == "optional"]
    titles = top_sections(html)
    assert titles[0].startswith("01 · Data parallelism")
    assert titles[1:] == [
        re.sub(r"`([^`]*)`", r"\1", name) for name in core]
    assert optional and not any(name.split(": ", 1)[1] in html for name in optional)


def test_the_deck_leaves_out_the_set_up_cell_and_the_answer_cells(deck):
    _, html = deck
    nb = nbformat.read(LAB, as_version=4)
    setup = next(c for c in nb.cells if "course-setup" in c.metadata.get("tags", []))
    answer = next(c for c in nb.cells if c.cell_type == "code" and slides.is_answer_cell(c))
    for cell in (setup, answer):
        line = next(x for x in cell.source.splitlines() if len(x) > 12 and not x.startswith("#"))
        assert line.split("(")[0].strip() not in html.replace("&quot;", '"')
    assert "Exercise 3" in html and "Not answered yet" not in html


def test_the_deck_loads_nothing_it_needs_from_the_internet(deck):
    path, html = deck
    loaded = re.findall(r'<script[^>]*\bsrc="([^"]+)"', html) + \
        re.findall(r'<link[^>]*\bhref="([^"]+)"', html) + \
        re.findall(r'\bimport\b[^;\n]*\bfrom\s*[\'"]([^\'"]+)', html) + \
        re.findall(r'"([^"]+/dist/reveal\.js)"', html)
    assert any(src.endswith("require.js") for src in loaded), loaded
    for src in loaded:
        assert not re.match(r"(https?:)?//", src), src
        assert (path.parent / src.split("?")[0]).resolve().is_file(), src
    assert not [src for src in loaded if re.search("mathjax|mermaid", src, re.I)], loaded


@pytest.mark.parametrize("text", ["the cost is $2S\\beta$", "a ring \\(x\\)",
                                  "```mermaid\ngraph LR\n```"])
def test_a_slide_that_would_need_a_cdn_is_refused(text):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# Title"),
                                         nbformat.v4.new_markdown_cell(f"## A\n{text}")])
    with pytest.raises(SystemExit, match="cells \\[1\\]"):
        slides.deck_notebook(nb)
    nb.cells[1].source = "## A\ncosts 2 S beta"
    assert len(slides.deck_notebook(nb).cells) == 2


def test_a_slide_type_set_by_the_teacher_is_kept():
    nb = nbformat.v4.new_notebook(cells=[
        nbformat.v4.new_markdown_cell("# Title"),
        nbformat.v4.new_markdown_cell("## A section"),
        nbformat.v4.new_markdown_cell("text", metadata={"slideshow": {"slide_type": "skip"}}),
        nbformat.v4.new_code_cell("x = 1"),
        nbformat.v4.new_markdown_cell("## Optional: more"),
        nbformat.v4.new_code_cell("y = 2"),
    ])
    made = slides.deck_notebook(nb)
    assert [(c.source, c.metadata.slideshow["slide_type"]) for c in made.cells] == [
        ("# Title", "slide"), ("## A section", "slide"), ("text", "skip"), ("x = 1", "subslide")]


def test_a_download_that_does_not_match_its_checksum_is_refused(tmp_path, monkeypatch):
    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w:gz") as tar:
        info = tarfile.TarInfo("package/package.json")
        tar.addfile(info, io.BytesIO(b""))

    class Response(io.BytesIO):
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(slides.urllib.request, "urlopen",
                        lambda url, timeout: Response(data.getvalue()))
    with pytest.raises(SystemExit, match="checksum"):
        slides.fetch_vendor(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_missing_notebook_is_named_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        slides.main([str(tmp_path / "nope.ipynb"), "--out", str(tmp_path / "out")])
    assert "no such notebook" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


@pytest.mark.browser
def test_a_deck_renders_in_chromium(deck):
    """The title slide shows, and the right arrow key moves to the next section's slide."""
    browser = find_browser()
    if browser is None:
        if under_ci():
            pytest.fail("no Chromium or Chrome for the slide test (CI=true)", pytrace=False)
        pytest.skip("no Chromium or Chrome found")
    from playwright.sync_api import sync_playwright

    path, html = deck
    titles = top_sections(html)
    failed, requested = [], []
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser, headless=True, args=CHROMIUM_ARGS)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 800})
            page.on("requestfailed", lambda r: failed.append(r.url))
            page.on("request", lambda r: requested.append(r.url))
            page.goto(path.as_uri())
            page.wait_for_selector(".reveal.ready .slides > section.present", timeout=60_000)
            first = page.inner_text(".slides > section.present")
            page.keyboard.press("ArrowRight")
            page.wait_for_function(
                "t => document.querySelector('.slides > section.present h2')?.innerText.trim() "
                "=== t", arg=titles[1], timeout=10_000)
        finally:
            chromium.close()
    assert first.startswith("01 · Data parallelism")
    assert not [u for u in failed if u.startswith("file:")], failed
    assert requested and all(u.startswith(("file:", "data:")) for u in requested), requested


@pytest.mark.parametrize("lab", slides.labs(), ids=lambda p: p.stem)
def test_every_lab_makes_a_deck_without_a_cdn(lab):
    """Every lab's core path is made of what the decks show offline (no TeX math, no Mermaid)."""
    deck = slides.deck_notebook(nbformat.read(lab, as_version=4))
    assert deck.cells[0].metadata.slideshow["slide_type"] == "slide"
