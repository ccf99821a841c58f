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



def _globals(cell):
    """(bound, used): the global names a code cell binds (assignments, defs, imports) and those it
    reads, its function bodies included; IPython lines (``%magic``, ``!shell``) left out."""
    import symtable
    source = "\n".join(line for line in cell.source.splitlines()
                       if not line.lstrip().startswith(("%", "!")))
    top = symtable.symtable(source, "<cell>", "exec")
    bound = {s.get_name() for s in top.get_symbols() if s.is_assigned() or s.is_imported()}
    used, tables = set(), [top]
    while tables:
        table = tables.pop()
        used.update(s.get_name() for s in table.get_symbols() if s.is_referenced()
                    and (table is top or s.is_global()))
        tables.extend(table.get_children())
    return bound, used


def optional_names_in_core(nb):
    """COURSE_FORMAT.md's rule, read from the code: [(core cell index, names)] for each core code
    cell that reads a global name which only optional cells bind (empty: the core path runs
    alone). Read statically, so it holds for the instructor's solutions too."""
    core, optional = set(), set()
    for _, kind, cells in sections(nb):
        for cell in cells:
            if cell.cell_type == "code":
                (core if kind == "core" else optional).update(_globals(cell)[0])
    only_optional = optional - core
    return [(index, sorted(_globals(cell)[1] & only_optional))
            for index, cell in enumerate(core_only(nb).cells)
            if cell.cell_type == "code" and _globals(cell)[1] & only_optional]
