"""Slides for teaching: each lab's core path as a reveal.js deck, built with nbconvert's slides
exporter from the saved notebook (nothing is run again).

    python3 course.py slides                          # every lab, into build/slides/
    python3 course.py slides notebooks/01_dp_intro.ipynb --out DIR

A deck is the student version of a lab (no solutions) with its optional sections left out. Each
cell's ``slideshow`` metadata says where it goes, as in JupyterLab's property inspector ("Slide
Type"). A cell that has none gets one here:

- the title cell and each ``## `` section start a slide, each ``### `` heading a sub-slide;
- every other markdown or code cell starts a sub-slide (below its section's slide; the arrow keys
  move through both), so no slide holds more than one cell;
- the set-up cell and the exercises' answer and check cells are skipped (the prompts stay).

A teacher who sets a cell's slide type in JupyterLab keeps it: this tool fills in only what is not
set. The decks load reveal.js, require.js and jQuery from ``build/slides/vendor/``, downloaded once
from the npm registry and checked against the registry's SHA-512, so they open offline in any
browser. The template (``tools/slides_template/course_reveal``) is nbconvert's reveal template
without MathJax and Mermaid, which it would load from a CDN: a lab whose slides hold TeX math or a
Mermaid diagram is refused with a message (none does).
"""
import argparse
import base64
import hashlib
import io
import os
import re
import sys
import tarfile
import urllib.request
from pathlib import Path

import nbformat
from nbconvert import SlidesExporter

from lab_format import core_only
from notebook_setup import SETUP_TAG
from notebook_versions import STUDENT, is_answer_cell, is_check_cell, sources

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "slides"
TEMPLATES = Path(__file__).resolve().parent / "slides_template"

#: What the decks cannot show without a script from a CDN: TeX math (MathJax), Mermaid diagrams.
NEEDS_A_CDN = re.compile(r"\$[^$\n]+\$|\\\(|\\\[|```mermaid")

#: What a deck loads, as nbconvert 7's slides template expects it: (npm package, version, the
#: registry's integrity string). reveal.js is the version nbconvert's template is written for.
VENDOR = {
    "reveal.js": ("4.0.2", "sha512-LWZSUenufF1gpD7npxJ7KfoQQFKgc1D6XrLTFgKlwWNP1BQ74hT48KONF"
                           "WMAw+8R/QUeaScCLCLrBVHDfFIEiw=="),
    "requirejs": ("2.1.10", "sha512-4JqdTihK3kOnT387LxCHuJZ/9QsKg2EIl7LmaW35PIyM4LwCI2jwyy4fy"
                            "6pbY/ZZH2JoY/QEcb5PzULFPP6gcQ=="),
    "jquery": ("2.2.4", "sha512-lBHj60ezci2u1v2FqnZIraShGgEXq35qCzMv4lITyHGppTnA13rwR0MgwyNJh9TnD"
                        "s3aXUvd1xjAotfraMHX/Q=="),
}
REGISTRY = "https://registry.npmjs.org"


def fetch_vendor(folder):
    """``{package: its folder}`` under ``folder``, each downloaded and unpacked the first time."""
    paths = {}
    for name, (version, integrity) in VENDOR.items():
        target = Path(folder) / f"{name}-{version}"
        if not (target / "package.json").is_file():
            url = f"{REGISTRY}/{name}/-/{name}-{version}.tgz"
            try:
                with urllib.request.urlopen(url, timeout=60) as response:
                    data = response.read()
            except OSError as err:
                raise SystemExit(f"[slides] could not download {url} ({err}). The decks need "
                                 f"{name} once; connect to the internet and run again.") from err
            digest = "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()
            if digest != integrity:
                raise SystemExit(f"[slides] {url} does not match the registry's checksum; "
                                 "nothing was unpacked.")
            partial = target.with_name(target.name + ".partial")
            with tarfile.open(fileobj=io.BytesIO(data)) as tar:
                members = [m for m in tar.getmembers() if m.name.startswith("package/")]
                for m in members:
                    m.name = m.name[len("package/"):]
                tar.extractall(partial, members=members, filter="data")
            partial.replace(target)
        paths[name] = target
    return paths


def slide_type(cell, index):
    """The slide type a cell gets when it has none of its own."""
    if index == 0:
        return "slide"
    if cell.cell_type == "code" and (SETUP_TAG in cell.metadata.get("tags", [])
                                     or is_answer_cell(cell) or is_check_cell(cell)):
        return "skip"
    first = cell.source.lstrip().split("\n", 1)[0] if cell.cell_type == "markdown" else ""
    if first.startswith("## "):
        return "slide"
    return "subslide"


def deck_notebook(nb):
    """The core path of ``nb``, every cell with a slide type."""
    deck = core_only(nb)
    needs = [i for i, c in enumerate(deck.cells)
             if c.cell_type == "markdown" and NEEDS_A_CDN.search(c.source)]
    if needs:
        raise SystemExit(f"[slides] cells {needs} of the core path hold TeX math or a Mermaid "
                         "diagram, which the decks do not load (they would come from a CDN): "
                         "write them as text or an image, or add MathJax to tools/slides_template")
    for index, cell in enumerate(deck.cells):
        show = cell.metadata.setdefault("slideshow", {})
        show.setdefault("slide_type", slide_type(cell, index))
    return deck


def url(path, start):
    """``path`` relative to the folder ``start``, as a URL path."""
    return Path(os.path.relpath(path, start)).as_posix()


def build(notebook, out=OUT, vendor=OUT / "vendor"):
    """Write the deck of ``notebook`` into ``out``, loading reveal.js and the rest from ``vendor``;
    returns the deck's path."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    vendor = fetch_vendor(vendor)
    exporter = SlidesExporter(
        extra_template_basedirs=[str(TEMPLATES)],
        template_name="course_reveal",
        reveal_url_prefix=url(vendor["reveal.js"], out),
        require_js_url=url(vendor["requirejs"] / "require.js", out),
        jquery_url=url(vendor["jquery"] / "dist" / "jquery.min.js", out),
        reveal_scroll=True,
        reveal_theme="white",   # its fonts come with reveal.js ("simple" loads Google Fonts)
        exclude_input_prompt=True,
        exclude_output_prompt=True,
    )
    nb = deck_notebook(nbformat.read(notebook, as_version=4))
    body, _ = exporter.from_notebook_node(nb, resources={"metadata": {"name": Path(notebook).stem}})
    path = out / f"{Path(notebook).stem}.slides.html"
    partial = path.with_name(path.name + ".partial")
    partial.write_text(body, encoding="utf-8")
    partial.replace(path)
    return path


def labs():
    """The notebooks in the lab format, as learners see them (notebooks/, no solutions)."""
    return [STUDENT / p.name for p in sources()]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to make decks of (default: every lab in notebooks/)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the decks ({OUT})")
    args = parser.parse_args(argv)
    notebooks = args.notebooks or labs()
    missing = [str(p) for p in notebooks if not p.is_file()]
    if missing:
        parser.error(f"no such notebook: {', '.join(missing)}")
    for notebook in notebooks:
        print(f"[slides] {build(notebook, args.out, args.out / 'vendor')}")
    print("[slides] open a deck in a browser; the arrow keys move through it, S opens the "
          "speaker view.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
