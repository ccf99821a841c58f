"""The Chinese edition (tools/translate.py): each translation follows the current English, the
built notebooks in notebooks/zh and instructor/zh follow the translations, their code and outputs
are the English ones, and every translation keeps the English's structure and uses the glossary.

Someone who changes an English markdown cell sees here which Chinese cells to redo
(``tools/translate.py status``)."""
import json
import re

import nbformat
import pytest

import translate
from notebook_versions import INSTRUCTOR, STUDENT

ENGLISH = sorted(p.name for p in STUDENT.glob("[0-9][0-9]_*.ipynb"))
NAMES = translate.translated_names()
DOCUMENTS = translate.translated_documents()
GLOSSARY = json.loads(translate.GLOSSARY.read_text(encoding="utf-8"))["terms"]
CJK = re.compile(r"[\u4e00-\u9fff]")


def entries(name):
    return [e for e in translate.load(name)["cells"] if e.get("zh")]


def test_every_english_notebook_and_document_has_a_translation():
    missing = [n for n in ENGLISH + list(translate.DOCUMENTS) if n not in NAMES + DOCUMENTS]
    assert missing == [], "run: tools/translate.py update NAME"


@pytest.mark.parametrize("name", NAMES + DOCUMENTS)
def test_the_translation_follows_the_current_english(name):
    found = translate.problems(name)
    assert not found, "\n".join(found)


@pytest.mark.parametrize("name", NAMES)
def test_the_chinese_notebooks_are_built_from_it(name):
    for folder in (INSTRUCTOR, STUDENT):
        path = folder / translate.LANG / name
        assert path.is_file(), f"run: .venv/bin/python tools/translate.py build {name}"
        committed = nbformat.read(path, as_version=4)
        expected = translate.built(name, folder)
        assert committed.cells == expected.cells and committed.metadata == expected.metadata, (
            f"{path} is out of date: run .venv/bin/python tools/translate.py build {name}")


@pytest.mark.parametrize("name", DOCUMENTS)
def test_the_chinese_documents_are_built_from_it(name):
    path = translate.ROOT / translate.DOCUMENTS[name]
    assert path.is_file() and path.read_text(encoding="utf-8") == translate.built_document(name), (
        f"{path.name} is out of date: run .venv/bin/python tools/translate.py build {name}")
    for target in re.findall(r"\]\((?!https?:|#|mailto:)([^)\s#]+)", path.read_text()):
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which is missing"


@pytest.mark.parametrize("name", NAMES)
def test_code_cells_and_outputs_are_the_english_ones(name):
    for folder in (INSTRUCTOR, STUDENT):
        path = folder / translate.LANG / name
        if not path.is_file():
            pytest.skip(f"{path} not built")
        en, zh = (nbformat.read(p, as_version=4) for p in (folder / name, path))
        assert [(c.cell_type, c.id) for c in zh.cells] == [(c.cell_type, c.id) for c in en.cells]
        for a, b in zip(en.cells, zh.cells):
            if a.cell_type == "code":
                assert a == b, f"{path}: code cell {a.id} differs from the English"
            else:
                assert a.get("attachments") == b.get("attachments"), a.id
                assert a.metadata == b.metadata, a.id


def _headings(text):
    return [line.split()[0] for line in text.splitlines() if re.match(r"#+ ", line)]


def _table_rows(text):
    return sum(1 for line in text.splitlines() if line.lstrip().startswith("|"))


#: what a translation keeps exactly as the English has it
KEPT = {"code span": r"`[^`\n]+`", "link": r"\]\([^)\s]+\)", "number": r"\d+(?:[.,]\d+)*",
        "Chinese quote": r"[\u4e00-\u9fff][\u4e00-\u9fff，、A-Za-z]{3,}"}
PROSE_SPAN = r"`[A-Za-z ,'-]+ [A-Za-z ,'-]+`"


@pytest.mark.parametrize("name", NAMES + DOCUMENTS)
def test_each_cell_keeps_the_english_structure(name):
    wrong = []
    for e in entries(name):
        en, zh, where = e["en"], e["zh"], f"{name} cell {e['id']}"
        if not CJK.search(zh) or zh.strip() == en.strip():
            wrong.append(f"{where}: not in Chinese")
        if _headings(en) != _headings(zh):
            wrong.append(f"{where}: headings {_headings(en)} became {_headings(zh)}")
        if _table_rows(en) != _table_rows(zh):
            wrong.append(f"{where}: {_table_rows(en)} table rows became {_table_rows(zh)}")
        for kind, pattern in KEPT.items():
            if kind == "link" and name in translate.DOCUMENTS:
                continue   # a document may point at the Chinese notebooks; its links must resolve
            found = zh if kind == "Chinese quote" else set(re.findall(pattern, zh))
            missing = sorted(m for m in set(re.findall(pattern, en)) if m not in found)
            if kind == "code span":   # a span of English words may be translated as prose
                missing = [m for m in missing if not re.fullmatch(PROSE_SPAN, m)]
            if missing:
                wrong.append(f"{where}: {kind}(s) of the English missing: {missing}")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("name", NAMES + DOCUMENTS)
def test_the_translation_uses_the_glossary(name):
    wrong = []
    for e in entries(name):
        for term in GLOSSARY:
            if (term.get("required") and re.search(term["match"], e["en"], re.I)
                    and term["zh"] not in e["zh"]):
                wrong.append(f"{name} cell {e['id']}: '{term['en']}' is {term['zh']} here")
            for word in term.get("avoid", []):
                for m in re.finditer(re.escape(word), e["zh"]):
                    near = e["zh"][max(0, m.start() - 40):m.end() + 40]
                    if term["zh"] not in near:
                        wrong.append(f"{name} cell {e['id']}: {word} for '{term['en']}': the "
                                     f"glossary's term is {term['zh']} (name both at a first "
                                     "mention)")
    assert not wrong, "\n".join(wrong)


def test_the_glossary_picks_one_term_each():
    chosen = [t["zh"] for t in GLOSSARY]
    assert len(chosen) == len(set(chosen))
    for term in GLOSSARY:
        re.compile(term["match"])
        assert term["zh"] not in term.get("avoid", []), term
        assert not set(term.get("avoid", [])) & set(chosen), term


@pytest.mark.parametrize("name", NAMES)
def test_the_chinese_badges_open_the_chinese_notebook(name):
    """With the repository's URL set, each Chinese notebook's Colab and Kaggle badges open that
    Chinese notebook (until it is set, a line says where to read on)."""
    url = "https://github.com/someone/dp-course"
    first = translate.built(name, STUDENT, url=url).cells[0].source
    links = re.findall(r"\]\((https://[^)]+/blob/[^)]+)\)", first)
    assert len(links) == 2 and all(link.endswith(f"/notebooks/zh/{name}") for link in links), links
    unset = translate.built(name, STUDENT, url="").cells[0].source
    assert "README.zh-CN.md" in unset and "blob/" not in unset
