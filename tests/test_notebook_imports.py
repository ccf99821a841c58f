"""`python3 course.py lab` installs everything the course imports.

`lab` installs the base dependencies plus the `course` extra (not the `test` extra). Every module
that a notebook, its checks (notebooks/checks_NN.py), the scripts the notebooks import or launch
(scripts/) and dltools import must come from those, directly or as one of their own requirements.
The installed packages' metadata says which distribution provides an import and what each
distribution requires.
"""
import ast
import importlib.metadata as md
import json
import re
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
# The student versions and their instructor sources (solutions can import too).
NOTEBOOKS = sorted([*(ROOT / "notebooks").glob("*.ipynb"),
                    *(ROOT / "instructor").glob("*.ipynb")])
MODULES = sorted([*(ROOT / "notebooks").glob("*.py"), *(ROOT / "scripts").glob("*.py"),
                  *(ROOT / "dltools").rglob("*.py")])
# Imported by name from the repository itself, never installed from PyPI.
LOCAL = {"dltools"} | {p.stem for p in MODULES if p.parent.name in ("notebooks", "scripts")}


def canonical(name):
    return re.sub(r"[-_.]+", "-", name).lower()


def cell_code(source):
    """A code cell's Python, without IPython's magics and shell escapes (a %%bash cell is not
    Python at all)."""
    if source.lstrip().startswith("%%"):
        return ""
    return "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                     for line in source.splitlines())


def _catches_import_error(node):
    names = {"ImportError", "ModuleNotFoundError", "Exception"}
    for handler in node.handlers:
        caught = handler.type
        elts = caught.elts if isinstance(caught, ast.Tuple) else [caught]
        if caught is None or any(isinstance(e, ast.Name) and e.id in names for e in elts):
            return True
    return False


def imported_modules(code):
    """Top-level names of the absolute imports in ``code``, except optional ones (inside a
    ``try`` that catches ImportError).

    >>> sorted(imported_modules("import a.b\\nfrom c import d\\nfrom . import e\\n"
    ...                         "try:\\n    import f\\nexcept ImportError:\\n    pass"))
    ['a', 'c']
    """
    found = set()

    def visit(node, optional):
        if isinstance(node, ast.Import) and not optional:
            found.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and not optional:
            found.add(node.module.split(".")[0])
        if isinstance(node, ast.Try):
            for child in node.body:
                visit(child, optional or _catches_import_error(node))
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, optional)
        else:
            for child in ast.iter_child_nodes(node):
                visit(child, optional)

    visit(ast.parse(code), False)
    return found


def course_imports():
    """{source file (relative): third-party modules it imports}."""
    imports = {}
    for nb in NOTEBOOKS:
        cells = json.loads(nb.read_text())["cells"]
        code = "\n".join(cell_code("".join(c["source"])) for c in cells if c["cell_type"] == "code")
        imports[nb.relative_to(ROOT).as_posix()] = imported_modules(code)
    for path in MODULES:
        imports[path.relative_to(ROOT).as_posix()] = imported_modules(path.read_text())
    third_party = set(sys.stdlib_module_names) | LOCAL | {"__future__"}
    return {src: mods - third_party for src, mods in imports.items()}


def declared(extras):
    """Canonical names of the base dependencies plus the given extras of pyproject.toml."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = list(project["dependencies"])
    for extra in extras:
        reqs += project["optional-dependencies"][extra]
    return {canonical(Requirement(r).name) for r in reqs}


def installed_closure(names):
    """``names`` and everything they require, transitively, as installed here (requirements
    behind an extra or a marker that does not hold on this machine are left out)."""
    todo, seen = list(names), set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = md.requires(name) or []
        except md.PackageNotFoundError:
            continue  # reported by the test: a declared package that is not installed
        for text in requires:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canonical(req.name))
    return seen


@pytest.fixture(scope="module")
def lab_installs():
    return installed_closure(declared(["course"]))


def test_the_sources_are_found():
    sources = course_imports()
    assert len(NOTEBOOKS) >= 6 and any(p.name.startswith("checks_") for p in MODULES)
    assert "torch" in sources["notebooks/00_getting_started.ipynb"]
    assert "checks_00" not in sources["notebooks/00_getting_started.ipynb"]  # local, not PyPI


def test_every_import_of_the_course_is_installed_by_lab(lab_installs):
    providers = md.packages_distributions()
    missing = []
    for src, modules in sorted(course_imports().items()):
        for module in sorted(modules):
            dists = {canonical(d) for d in providers.get(module, [])}
            if not dists:
                missing.append(f"{src}: `import {module}`: no installed distribution provides it")
            elif not dists & lab_installs:
                missing.append(f"{src}: `import {module}` needs {' or '.join(sorted(dists))}, "
                               "which neither the base dependencies nor the `course` extra "
                               "install (add it to `course` in pyproject.toml and environment.yml)")
    assert not missing, "\n".join(missing)


def test_the_check_tells_lab_from_test(lab_installs):
    """Packages only the `test` extra installs are not counted as installed by `lab`: otherwise
    the check above could not fail."""
    test_only = declared(["test"]) - declared(["course"])
    assert {"pytest", "nbval"} <= test_only
    assert not {"pytest", "nbval"} & lab_installs
    assert {"torch", "jupyterlab", "ipython"} <= lab_installs  # ipython: through ipykernel


def test_every_declared_package_is_installed():
    names = declared(["course", "instructor", "test"])
    absent = []
    for name in sorted(names - {"dltools"}):
        try:
            md.version(name)
        except md.PackageNotFoundError:
            absent.append(name)
    assert not absent, f"declared in pyproject.toml but not installed: {absent}"
