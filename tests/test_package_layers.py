"""dltools' imports run one way: each module imports only modules of lower layers, so the package
has no import cycle and the device rule and the GPU wait sit at the bottom, where every other
module can use them."""
import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "dltools"

# Lower number, lower layer. A module may import modules of strictly lower layers only (and, inside
# dltools/beyond/, its own sibling modules).
LAYERS = {
    "devices": 0, "timing": 0, "data": 0, "models": 0, "exercises": 0, "plotting": 0, "paths": 0,
    "guard": 0,
    "stats": 0,
    "parallel": 1, "launch": 1, "requirements": 1,
    "traffic": 2,
    "distributed": 3, "training": 3, "ddp_internals": 3, "beyond": 3,
}


def _layer_of(path):
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _dltools_imports(path):
    """The top-level dltools modules ``path`` imports (at the top or inside a function)."""
    tree = ast.parse(path.read_text())
    in_beyond = path.parent.name == "beyond"
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level == 0:
                parts = (node.module or "").split(".")
                if parts[0] == "dltools":
                    found.add(parts[1] if len(parts) > 1 else None)
                continue
            base_is_beyond = in_beyond and node.level == 1
            if base_is_beyond:
                continue   # a sibling in dltools/beyond/
            if node.module:
                found.add(node.module.split(".")[0])
            else:
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "dltools":
                    found.add(parts[1] if len(parts) > 1 else None)
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or
                 p.parent != PACKAGE)


def test_every_module_has_a_layer():
    assert {_layer_of(p) for p in MODULES} == set(LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_lower_layers(path):
    me = _layer_of(path)
    # Doctests are text, not code: what they import does not count.
    for other in _dltools_imports(path):
        assert other is not None and other in LAYERS, (path.name, other)
        assert LAYERS[other] < LAYERS[me], (
            f"dltools/{path.relative_to(PACKAGE)} (layer {LAYERS[me]}) imports dltools.{other} "
            f"(layer {LAYERS[other]}): imports must run downwards")


def test_the_check_finds_an_upward_import(tmp_path):
    """The check above can fail: an import of a higher layer is found."""
    fake = PACKAGE / "devices.py"
    tree_text = fake.read_text() + "\nfrom .distributed import launch\n"
    copy = tmp_path / "dltools" / "devices.py"
    copy.parent.mkdir()
    copy.write_text(tree_text)
    assert "distributed" in _dltools_imports(copy)
