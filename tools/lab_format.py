"""The sections of a notebook in the lab format (../shared/COURSE_FORMAT.md): its title cell, then
one section per ``## `` heading, each core or optional (its heading starts with ``Optional:``).

tests/test_notebook_format.py checks the format with these; tools/slides.py builds each deck from
the core path they give.
"""
import nbformat


def sections(nb):
    """[(heading, kind, cells)]: the title cell first (core), then one entry per ``## `` heading."""
    out = [("(title)", "core", [])]
    for index, cell in enumerate(nb.cells):
        heading = next((line[3:].strip() for line in cell.source.splitlines()
                        if line.startswith("## ")), None) if cell.cell_type == "markdown" else None
        if heading is not None and index > 0:
            kind = "optional" if heading.lower().startswith("optional:") else "core"
            out.append((heading, kind, []))
        out[-1][2].append(cell)
    return out


def core_only(nb):
    """The notebook with every optional section removed (the title cell kept)."""
    core = nbformat.v4.new_notebook(metadata=nb.metadata)
    core.cells = [cell for _, kind, cells in sections(nb) if kind == "core" for cell in cells]
    return core


