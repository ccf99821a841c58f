"""Make every notebook runnable anywhere: the set-up cell (its first code cell), the "Open in
Colab / Kaggle" badges (at the end of its first cell) and its figures as cell attachments, which
render in JupyterLab, on GitHub, Colab and Kaggle without the repository's images/ beside them.

    .venv/bin/python tools/notebook_setup.py      # rewrite every notebook's source

A notebook's source is instructor/NN_*.ipynb where it exists (its student version in notebooks/ is
built from it: tools/notebook_versions.py), else notebooks/NN_*.ipynb.

The course's repository is named in one place, ``[project.urls] Repository`` in pyproject.toml: the
set-up cell clones it where the course's files are missing (Colab, Kaggle; ``DP_COURSE_REPO``
overrides it), and the badges open each notebook from it. Until it is set, both say what to set.
Re-run the notebooks afterwards (tools/run_notebooks.py); tests/test_anywhere.py checks that
every notebook is as this tool makes it.
"""
import base64
import re
import sys
import tomllib
from pathlib import Path

import nbformat

from notebook_versions import executed_notebooks

ROOT = Path(__file__).resolve().parent.parent
SETUP_TAG = "course-setup"
BADGES_START = "<!-- badges -->"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
KAGGLE_BADGE = "https://kaggle.com/static/images/open-in-kaggle.svg"
IMAGE_LINK = re.compile(r"\]\((?:\.\./images/|attachment:)([\w.-]+\.png)\)")

SETUP_CELL = '''\
# Set-up: in a copy of the course, puts it first on the path; elsewhere, fetches and installs it.
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

COURSE_GIT = os.environ.get("DP_COURSE_REPO", "{url}")   # the course's git repository
root = next((p for p in (Path.cwd(), *Path.cwd().parents)
             if (p / "dltools" / "paths.py").is_file() and (p / "notebooks").is_dir()), None)
if root is None:
    root = Path.cwd() / "dp-course"
    if not root.is_dir() and not COURSE_GIT:
        raise SystemExit("Run %env DP_COURSE_REPO=<the course's git URL> in a cell, then this one.")
    clone = ["git", "clone", "--quiet", "--depth=1", COURSE_GIT, str(root)]
    if not root.is_dir() and subprocess.run(clone).returncode:
        raise SystemExit(f"Could not clone {{COURSE_GIT}}: check it (on Kaggle, turn on Internet).")
    if importlib.util.find_spec("dltools") is None:
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "-e", str(root)], check=True)
    print(f"The course is set up in {{root}}.")
else:
    print("This is a copy of the course: nothing to set up.")
os.environ["DP_COURSE_ROOT"] = str(root)   # where dltools.paths finds scripts/ and the checks
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), os.getenv("PYTHONPATH")]))
sys.path[:0] = [p for p in (str(root), str(root / "notebooks")) if p not in sys.path]'''


def repository_url(pyproject=ROOT / "pyproject.toml"):
    """The course's repository, from ``[project.urls] Repository`` ("" while it is not set)."""
    project = tomllib.loads(Path(pyproject).read_text())["project"]
    return project.get("urls", {}).get("Repository", "").strip().rstrip("/")


def setup_source(url):
    """The set-up cell, cloning ``url``."""
    return SETUP_CELL.format(url=url)


def badges(url, notebook_name, branch="main"):
    """The badges' Markdown for ``notebook_name`` in the GitHub repository ``url``.

    >>> b = badges("https://github.com/someone/dp-course", "01_dp_intro.ipynb")
    >>> for link in re.findall(r"\\]\\((https://[^)]+/blob/[^)]+)\\)", b):
    ...     print(link)
    https://colab.research.google.com/github/someone/dp-course/blob/main/notebooks/01_dp_intro.ipynb
    https://kaggle.com/kernels/welcome?src=https://github.com/someone/dp-course/blob/main/notebooks/01_dp_intro.ipynb
    >>> "README.md" in badges("", "01_dp_intro.ipynb")    # not set yet: says where to read on
    True
    """
    if not url:
        return (f"{BADGES_START}\n*Open in Colab or Kaggle:* once the course is on GitHub "
                "(README.md).")
    m = re.fullmatch(r"https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?", url)
    if not m:
        raise ValueError("the badges need a GitHub repository, https://github.com/OWNER/NAME; "
                         f"[project.urls] Repository is {url!r}")
    blob = f"{m[1]}/{m[2]}/blob/{branch}/notebooks/{notebook_name}"
    return (f"{BADGES_START}\n"
            f"[![Open in Colab]({COLAB_BADGE})](https://colab.research.google.com/github/{blob}) "
            f"[![Open in Kaggle]({KAGGLE_BADGE})]"
            f"(https://kaggle.com/kernels/welcome?src=https://github.com/{blob})")


def _png(name):
    path = ROOT / "images" / name
    if not path.is_file():
        raise FileNotFoundError(f"a notebook shows images/{name}, which does not exist")
    return base64.b64encode(path.read_bytes()).decode("ascii")


def set_up(nb, name, url):
    """``nb`` (a notebook ``name``) with the set-up cell, badges and attached figures of ``url``."""
    first = nb.cells[0]
    intro = first.source.split(BADGES_START)[0].rstrip()
    first.source = f"{intro}\n\n{badges(url, name)}"
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        names = IMAGE_LINK.findall(cell.source)
        if names:
            cell.source = IMAGE_LINK.sub(r"](attachment:\1)", cell.source)
            cell["attachments"] = {n: {"image/png": _png(n)} for n in names}
    setup = [c for c in nb.cells if SETUP_TAG in c.metadata.get("tags", [])]
    if setup:
        setup[0].source = setup_source(url)
    else:
        at = next(i for i, c in enumerate(nb.cells) if c.cell_type == "code")
        cell = nbformat.v4.new_code_cell(setup_source(url), metadata={"tags": [SETUP_TAG]})
        nb.cells.insert(at, cell)
    return nb


def notebooks():
    """The notebooks this tool rewrites: each one's source (see tools/notebook_versions.py)."""
    return executed_notebooks()


def main(paths=None):
    url = repository_url()
    for path in map(Path, paths or notebooks()):
        nb = nbformat.read(path, as_version=4)
        nbformat.write(set_up(nb, path.name, url), path)
        print(f"set up {path.relative_to(ROOT)}")


if __name__ == "__main__":
    main(sys.argv[1:])
