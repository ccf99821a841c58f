"""The Chinese edition (中文版): built from the English notebooks and translation files, never
edited by hand.

Each notebook's translation is ``translations/zh/NAME.json``: its markdown cells in order, each
``{"id": ..., "en": ..., "zh": ...}``, where ``en`` is the English text that ``zh`` translates
(for the first cell, the text above its badges). Code cells and their saved outputs are the
English ones, so the English notebooks' strict nbval run covers them.

    .venv/bin/python tools/translate.py status            # what is missing or out of date
    .venv/bin/python tools/translate.py update NAME ...   # add new cells; mark changed ones
    .venv/bin/python tools/translate.py build [NAME ...]  # write notebooks/zh and instructor/zh

README.md and TEACHING.md are translated the same way, a section (from one ``## `` heading to
the next, outside code blocks) per entry, into README.zh-CN.md and TEACHING.zh-CN.md.

``update`` keeps every translation: a cell whose English changed gets the new ``en``, an empty
``zh`` and ``was`` (the old English and Chinese), so the translator sees what changed; a new cell
gets an empty ``zh``. ``build`` refuses a translation with an empty, stale or leftover entry.
tests/test_translations.py checks the files against the English notebooks, the built notebooks
against the files, and every translation against the glossary (``translations/zh/glossary.json``).
"""
import copy
import json
import re
import sys
from pathlib import Path

import nbformat

from notebook_setup import BADGES_START, badges, repository_url
from notebook_versions import INSTRUCTOR, STUDENT

ROOT = Path(__file__).resolve().parent.parent
TRANSLATIONS = ROOT / "translations" / "zh"
GLOSSARY = TRANSLATIONS / "glossary.json"
LANG = "zh"
NO_URL_BADGES = (f"{BADGES_START}\n*在 Colab 或 Kaggle 中打开：*课程发布到 GitHub 之后可用"
                 "（见 README.zh-CN.md）。")
#: a relative link in a markdown cell: one folder deeper in zh/, so one more ``../``
RELATIVE_LINK = re.compile(r"\]\((?!https?:|attachment:|#|mailto:)([^)\s]+)\)")


def english_text(cell, first):
    """What is translated of a markdown cell: its source, above the badges for the first cell."""
    return cell.source.split(BADGES_START)[0].rstrip() if first else cell.source


#: the English documents translated section by section, and their Chinese versions
DOCUMENTS = {"README.md": "README.zh-CN.md", "TEACHING.md": "TEACHING.zh-CN.md"}


def sections(text):
    r"""``[(id, text)]``: ``text`` cut before each ``## `` heading outside code blocks; the pieces
    joined give ``text`` back. The id is the heading (``intro`` for the text above the first).

    >>> sections("# T\n\n## A\n```\n## not a heading\n```\n## B\nb\n")
    [('intro', '# T\n\n'), ('## A', '## A\n```\n## not a heading\n```\n'), ('## B', '## B\nb\n')]
    """
    pieces, fenced, current = [], False, ["intro", ""]
    for line in text.splitlines(keepends=True):
        if line.startswith("```"):
            fenced = not fenced
        if line.startswith("## ") and not fenced:
            pieces.append(tuple(current))
            current = [line.rstrip("\n"), ""]
        current[1] += line
    pieces.append(tuple(current))
    return [p for p in pieces if p[1]]


def english_units(name):
    """``[(id, English text)]`` that ``name`` (a notebook or a document) is translated by."""
    if name in DOCUMENTS:
        return sections((ROOT / name).read_text(encoding="utf-8"))
    return markdown_cells(nbformat.read(english_notebook(name), as_version=4))


def markdown_cells(nb):
    """``[(id, English text)]`` of ``nb``'s markdown cells, in order."""
    return [(c.id, english_text(c, i == 0)) for i, c in enumerate(nb.cells)
            if c.cell_type == "markdown"]


def translation_path(name):
    return TRANSLATIONS / f"{Path(name).stem}.json"


def english_notebook(name):
    """The English notebook a translation follows: the instructor source (same markdown as the
    student version)."""
    source = INSTRUCTOR / name
    return source if source.is_file() else STUDENT / name


def translated_names():
    """The notebooks that have a translation file."""
    return sorted(f"{p.stem}.ipynb" for p in TRANSLATIONS.glob("[0-9][0-9]_*.json"))


def translated_documents():
    """The documents (README.md, TEACHING.md) that have a translation file."""
    return [d for d in DOCUMENTS if translation_path(d).is_file()]


def load(name):
    return json.loads(translation_path(name).read_text(encoding="utf-8"))


def save(name, table):
    translation_path(name).parent.mkdir(parents=True, exist_ok=True)
    translation_path(name).write_text(json.dumps(table, ensure_ascii=False, indent=1) + "\n",
                                      encoding="utf-8")


def problems(name, table=None):
    """What keeps ``name``'s translation from being built: a list of sentences (empty: none)."""
    table = table if table is not None else load(name)
    english = english_units(name)
    entries = {e["id"]: e for e in table["cells"]}
    found = []
    for index, (cell_id, text) in enumerate(english):
        entry = entries.get(cell_id)
        where = f"{name}, {'section' if name in DOCUMENTS else 'markdown cell'} {index} (id " \
                f"{cell_id}, '{text[:40].replace(chr(10), ' ')}...')"
        if entry is None:
            found.append(f"{where}: not translated (run: tools/translate.py update {name})")
        elif entry["en"] != text:
            found.append(f"{where}: the English changed after it was translated (run: "
                         f"tools/translate.py update {name}, then translate it again)")
        elif not entry.get("zh", "").strip() or "was" in entry:
            found.append(f"{where}: its Chinese is empty, or 'was' (the old text) is left")
    for cell_id in entries.keys() - {i for i, _ in english}:
        found.append(f"{name}: an entry (id {cell_id}) for a cell that is no longer there")
    if [e["id"] for e in table["cells"]] != [i for i, _ in english if i in entries]:
        found.append(f"{name}: the entries are not in the notebook's order")
    return found


def update(name):
    """Bring ``name``'s translation file in line with the English: new cells get an empty
    ``zh``; changed cells keep their old text under ``was``. Returns how many need work."""
    english = english_units(name)
    old = {e["id"]: e for e in load(name)["cells"]} if translation_path(name).is_file() else {}
    cells = []
    for cell_id, text in english:
        entry = old.get(cell_id, {"id": cell_id, "en": text, "zh": ""})
        if entry["en"] != text:
            was = entry.get("was", {"en": entry["en"], "zh": entry["zh"]})
            entry = {"id": cell_id, "en": text, "zh": "", "was": was}
        cells.append(entry)
    save(name, {"source": name, "language": LANG, "cells": cells})
    return sum(1 for e in cells if not e["zh"] or "was" in e)


def localize_links(text):
    """Relative links one folder deeper (``../images/x.png`` -> ``../../images/x.png``); links to
    the course's notebooks (``NN_*.ipynb``) stay: they are siblings in zh/ too."""
    def deeper(m):
        target = m[1]
        if re.fullmatch(r"[0-9][0-9]_[\w.-]+\.ipynb(#.*)?", target):
            return m[0]
        return f"]({'../' + target})"
    return RELATIVE_LINK.sub(deeper, text)


def translate(nb, name, table, url):
    """The Chinese version of the English notebook ``nb`` (student or instructor)."""
    found = problems(name, table)
    if found:
        raise ValueError("cannot build the Chinese " + name + ":\n" + "\n".join(found))
    zh = {e["id"]: e["zh"] for e in table["cells"]}
    out = copy.deepcopy(nb)
    for i, cell in enumerate(out.cells):
        if cell.cell_type != "markdown":
            continue
        text = localize_links(zh[cell.id])
        if i == 0:
            text += "\n\n" + (badges(url, f"{LANG}/{name}") if url else NO_URL_BADGES)
        cell.source = text
    out.metadata["language"] = "zh-CN"
    return out


def built(name, folder, url=None):
    """The Chinese notebook for ``folder`` (instructor/ or notebooks/) as the build makes it."""
    nb = nbformat.read(folder / name, as_version=4)
    return translate(nb, name, load(name), repository_url() if url is None else url)


def built_document(name):
    """The Chinese text of the document ``name`` as the build makes it."""
    found = problems(name)
    if found:
        raise ValueError("cannot build the Chinese " + name + ":\n" + "\n".join(found))
    return "".join(e["zh"] for e in load(name)["cells"])


def build(names=None):
    for name in names or translated_names() + translated_documents():
        if name in DOCUMENTS:
            (ROOT / DOCUMENTS[name]).write_text(built_document(name), encoding="utf-8")
            print(f"built {DOCUMENTS[name]}")
            continue
        for folder in (INSTRUCTOR, STUDENT):
            if not (folder / name).is_file():
                continue
            target = folder / LANG / name
            target.parent.mkdir(exist_ok=True)
            nbformat.write(built(name, folder), target)
            print(f"built {target.relative_to(ROOT)}")


def status(names=None):
    english = sorted(p.name for p in STUDENT.glob("[0-9][0-9]_*.ipynb")) + list(DOCUMENTS)
    for name in names or english:
        if not translation_path(name).is_file():
            print(f"{name}: no translation yet (run: tools/translate.py update {name})")
            continue
        found = problems(name)
        print(f"{name}: " + ("up to date" if not found else f"{len(found)} to do"))
        for line in found:
            print("  " + line)


def main(argv):
    command, names = (argv[0] if argv else "status"), [Path(a).name for a in argv[1:]]
    if command == "status":
        status(names)
    elif command == "update":
        for name in names:
            print(f"{name}: {update(name)} cells to translate")
    elif command == "build":
        build(names)
    else:
        raise SystemExit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
