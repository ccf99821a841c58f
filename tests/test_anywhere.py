"""The notebooks run anywhere a learner is (Colab, Kaggle, any folder), not only in notebooks/ of a
checkout: tools/notebook_setup.py gives each one its set-up cell, badges and attached figures."""
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

import notebook_setup
from support import ROOT

NOTEBOOKS = notebook_setup.notebooks()


def _links(text):
    return notebook_setup.re.findall(r"\]\(([^)\s]+)\)", text)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_as_the_tool_makes_it(path):
    saved = nbformat.read(path, as_version=4)
    made = notebook_setup.set_up(nbformat.read(path, as_version=4), path.name,
                                 notebook_setup.repository_url())
    assert [(c.cell_type, c.source, c.get("attachments")) for c in saved.cells] == \
        [(c.cell_type, c.source, c.get("attachments")) for c in made.cells], (
        f"run: .venv/bin/python tools/notebook_setup.py {path.relative_to(ROOT)} (then re-run it)")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_first_code_cell_sets_up_and_nothing_assumes_the_folder(path):
    nb = nbformat.read(path, as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert notebook_setup.SETUP_TAG in code[0].metadata.get("tags", [])
    assert "".join(o.get("text", "") for o in code[0].outputs) == \
        "This is a copy of the course: nothing to set up.\n"
    for cell in nb.cells:
        assert "Path.cwd()" not in cell.source or cell is code[0], cell.source
        for link in _links(cell.source):
            assert not link.startswith(("../", "./", "/")), (path.name, link)
        assert "../" not in cell.source or cell.cell_type == "markdown", (path.name, cell.source)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_badges_open_their_own_notebook(path):
    """With a repository named, both badges lead to this very notebook."""
    nb = notebook_setup.set_up(nbformat.read(path, as_version=4), path.name,
                               "https://github.com/someone/dp-course")
    links = [link for link in _links(nb.cells[0].source) if "/blob/" in link]
    assert len(links) == 2 and all(link.endswith(f"/notebooks/{path.name}") for link in links)
    assert links[0].startswith("https://colab.research.google.com/github/someone/dp-course/")
    assert links[1].startswith("https://kaggle.com/kernels/welcome?src=https://github.com/someone/")


def test_badges_refuse_a_repository_off_github():
    with pytest.raises(ValueError, match="GitHub"):
        notebook_setup.badges("https://gitlab.com/someone/dp-course", "00_getting_started.ipynb")


def test_attached_figures_are_the_repository_images():
    attached = 0
    for path in NOTEBOOKS:
        for cell in nbformat.read(path, as_version=4).cells:
            for name, data in cell.get("attachments", {}).items():
                assert f"](attachment:{name})" in cell.source
                expected = notebook_setup._png(name)
                assert data["image/png"] == expected, f"{path.name}: {name} is stale"
                attached += 1
    assert attached >= 2   # the DataParallel diagram (01) and the ring (03)


def _course_as_a_git_repository(dest):
    """The working tree's files (tracked, and new ones git does not ignore) committed in a fresh
    repository at ``dest``: what a learner's clone would get, uncommitted changes included."""
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=ROOT, capture_output=True, check=True).stdout.decode().split("\0")
    for name in filter(None, files):
        src = ROOT / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    git = ["git", "-c", "user.name=test", "-c", "user.email=test@example.invalid"]
    subprocess.run(git + ["init", "--quiet", "-b", "main"], cwd=dest, check=True)
    subprocess.run(git + ["add", "-A"], cwd=dest, check=True)
    subprocess.run(git + ["commit", "--quiet", "-m", "course"], cwd=dest, check=True)


def test_notebooks_run_from_an_empty_folder(tmp_path, monkeypatch):
    """As on Colab: notebooks 00 and 01 alone in a folder. The first one's set-up cell clones
    the course (DP_COURSE_REPO: a local repository), the second finds that clone; each runs top
    to bottom, its exercise checks (imported from the clone's notebooks/) and notebook 01's
    thread replicas included. Every notebook's set-up cell is the same (checked above)."""
    remote, work = tmp_path / "remote", tmp_path / "work"
    remote.mkdir()
    work.mkdir()
    _course_as_a_git_repository(remote)
    monkeypatch.setenv("DP_COURSE_REPO", str(remote))
    monkeypatch.setenv("DLTOOLS_DATA", str(ROOT / "data"))
    monkeypatch.delenv("DP_COURSE_ROOT", raising=False)
    clone = work / "dp-course"
    # where the kernel, and a process it starts (as torchrun is), import dltools from
    where = nbformat.v4.new_code_cell(
        "import subprocess\nprint(dltools.__file__)\nprint(subprocess.run([sys.executable, '-c', "
        "'import dltools; print(dltools.__file__)'], capture_output=True, text=True).stdout)")
    for name in ("00_getting_started.ipynb", "01_dp_intro.ipynb"):
        shutil.copy(ROOT / "notebooks" / name, work / name)
        nb = nbformat.read(work / name, as_version=4)
        nb.cells.append(where)
        NotebookClient(nb, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(work)}}).execute()
        setup = next(c for c in nb.cells if c.cell_type == "code")
        said = "".join(o.get("text", "") for o in setup.outputs)
        assert said == f"The course is set up in {clone}.\n", (name, said)
        files = "".join(o.get("text", "") for o in nb.cells[-1].outputs).split()
        assert files == [str(clone / "dltools" / "__init__.py")] * 2, (name, files)
    assert (clone / "scripts" / "train_ddp.py").is_file()


@pytest.mark.skipif(sys.platform == "win32", reason="the test builds a Linux/macOS venv layout")
def test_the_set_up_cell_installs_the_course_and_keeps_the_torch_it_finds(tmp_path):
    """Colab's case: no copy of the course and no dltools, but a newer torch already installed.
    The set-up cell clones the course and installs it with pip; pip may not replace torch or fetch
    anything (PIP_NO_INDEX: any download fails the cell). The stand-in for Colab's Python is a venv
    that sees this environment's packages (torch, pip, setuptools) but not its dltools."""
    remote, work, colab = tmp_path / "remote", tmp_path / "content", tmp_path / "colab"
    remote.mkdir()
    work.mkdir()
    _course_as_a_git_repository(remote)
    venv.EnvBuilder(with_pip=False).create(colab)
    site = next(colab.glob("lib/python3*/site-packages"))
    # A path in a .pth file is on sys.path, but .pth files inside it are not read: this
    # environment's editable dltools stays invisible, its packages do not.
    (site / "preinstalled.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    python = str(colab / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("DP_COURSE_ROOT", "PYTHONPATH")}
    env.update(DP_COURSE_REPO=str(remote), PIP_NO_INDEX="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               PIP_NO_BUILD_ISOLATION="0")   # pip's spelling: build with the setuptools there
    where = "import importlib.util as u; print(u.find_spec('dltools'))"
    assert subprocess.run([python, "-c", where], cwd=tmp_path, env=env, capture_output=True,
                          text=True).stdout.strip() == "None"
    here = Path(sysconfig.get_paths()["purelib"])
    mine = {p: p.stat().st_mtime_ns for p in here.glob("*dltools*")}
    proc = subprocess.run([python, "-c", notebook_setup.setup_source("")], cwd=work, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    clone = work / "dp-course"
    assert proc.stdout.strip().splitlines()[-1] == f"The course is set up in {clone}.", proc.stdout
    # A new process of that Python (as torchrun's workers are) imports the clone's dltools, and
    # torch from where it was; pip installed no torch of its own and left this environment alone.
    show = "import dltools, torch; print(dltools.__file__); print(torch.__file__)"
    out = subprocess.run([python, "-c", show], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.stdout.split() == [str(clone / "dltools" / "__init__.py"), torch_file()], out.stderr
    assert not list(site.glob("torch*")) and list(site.glob("*dltools*"))
    assert {p: p.stat().st_mtime_ns for p in mine} == mine


def torch_file():
    import torch
    return torch.__file__


@pytest.mark.parametrize("url, says", [
    ("", "Run %env DP_COURSE_REPO=<the course's git URL> in a cell, then this one."),
    ("/no/such/repository", "Could not clone /no/such/repository: check it (on Kaggle, turn on "
                            "Internet)."),
])
def test_the_set_up_cell_says_what_to_do_when_it_cannot_fetch_the_course(tmp_path, url, says):
    # As on Colab: an empty folder, no copy of the course above it, dltools importable or not.
    env = {k: v for k, v in os.environ.items() if k != "DP_COURSE_REPO"}
    code = notebook_setup.setup_source(url)
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and proc.stderr.strip().endswith(says), proc.stderr
    assert not (tmp_path / "dp-course").exists()
