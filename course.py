#!/usr/bin/env python3
"""Set up the course environment in ``.venv`` and open the course or run its tests.

    python3 course.py lab     # create/refresh .venv, register its kernel, start JupyterLab
    python3 course.py test    # create/refresh .venv, run unit tests, doctests and notebooks
    python3 course.py grade SUBMISSION.ipynb ... --out grades.csv   # for teachers: nbgrader
    python3 course.py slides  # for teachers: each lab's core path as reveal.js slides

Only the standard library is used here, so this runs on a machine that has nothing but Python
3.11+. The first run installs PyTorch and friends (a few minutes); later runs reuse ``.venv`` and
start at once. ``lab`` installs the ``course`` extra (JupyterLab and everything a notebook imports);
``test`` adds the ``instructor`` and ``test`` extras. Extra arguments after ``test`` go to pytest,
e.g. ``python3 course.py test notebooks/01_dp_intro.ipynb``. ``grade`` adds the ``instructor`` extra
(nbgrader) and grades handed-in notebooks (tools/grade.py; ``grade --help`` lists its options).
``slides`` builds the decks from the saved notebooks (tools/slides.py; ``slides --help``).
"""
import hashlib
import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
# The environment: .venv here, or one that a teacher installed once for a whole class and names in
# DP_COURSE_VENV (students use it read-only; see the README's "Teaching on a shared GPU server").
VENV = Path(os.environ.get("DP_COURSE_VENV") or ROOT / ".venv").expanduser().absolute()
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PY = BIN / ("python.exe" if os.name == "nt" else "python")
STAMP = VENV / ".dp-course-installed"
KERNEL_NAME = "python3"
KERNEL_DISPLAY = "Python 3 (dp-course)"
# d2l is only the reference the parity tests compare against. Its exact pins (numpy==1.23.5, ...)
# would downgrade the course environment, so it is installed without its dependencies.
D2L = "d2l==1.0.3"
# JupyterLab reads every file in <its app dir>/settings/overrides.d as default settings for everyone
# who uses this environment (a learner's own changes in the Settings Editor still win).
LAB_SETTINGS = ROOT / "tools" / "lab_settings" / "overrides.json"
LAB_OVERRIDES = VENV / "share" / "jupyter" / "lab" / "settings" / "overrides.d" / "dp-course.json"


def say(msg):
    print(f"[course] {msg}", flush=True)


def run(cmd, **kw):
    say(" ".join(str(c) for c in cmd))
    subprocess.run([str(c) for c in cmd], check=True, **kw)


def wanted_stamp(extras):
    """What the environment records once installed: this pyproject.toml's hash, and the extras."""
    digest = hashlib.sha256((ROOT / "pyproject.toml").read_bytes() + D2L.encode()).hexdigest()
    return f"{digest} {','.join(sorted(extras))}"


def installed_covers(extras):
    """Whether the environment was installed from this pyproject.toml with at least ``extras``
    (one installed for ``test`` also serves ``lab``: no reinstall, which offline would fail)."""
    if not STAMP.exists():
        return False
    digest, _, installed = STAMP.read_text().strip().partition(" ")
    wanted = wanted_stamp(extras).partition(" ")[0]
    return digest == wanted and set(extras) <= set(installed.split(","))


def someone_elses(path):
    """Whether ``path`` is a shared environment (``DP_COURSE_VENV``) that another user owns: a
    class's environment made group-writable must not be reinstalled by one student for everyone."""
    if not os.environ.get("DP_COURSE_VENV") or not hasattr(os, "geteuid"):
        return False
    return path.stat().st_uid != os.geteuid()


def ensure_venv(extras):
    if sys.version_info < (3, 11):
        sys.exit(f"[course] Python 3.11 or newer is needed; this is {sys.version.split()[0]}. "
                 "Run this script with python3.11 (or newer).")
    if not PY.exists():
        shared = bool(os.environ.get("DP_COURSE_VENV"))
        if VENV.exists() and not VENV.is_dir():
            sys.exit(f"[course] {VENV} is a file, not an environment: check DP_COURSE_VENV, or "
                     "unset it to use the course's own .venv.")
        if shared and VENV.exists() and any(VENV.iterdir()):
            sys.exit(f"[course] {VENV} (DP_COURSE_VENV) is a folder but not a Python "
                     "environment: check the path your teacher gave, or unset DP_COURSE_VENV.")
        if shared:
            say(f"DP_COURSE_VENV names {VENV}, which does not exist yet: making a new environment "
                "there (several GB). If you meant your class's shared one, stop now (Ctrl-C) and "
                "check the path.")
        say(f"creating {VENV}")
        try:
            venv.EnvBuilder(with_pip=True).create(VENV)
        except (OSError, ValueError) as err:
            sys.exit(f"[course] cannot make an environment at {VENV} ({err}): "
                     + ("check DP_COURSE_VENV, or unset it to use the course's own .venv."
                        if shared else "check that you may write in this folder."))
    if installed_covers(extras):
        say(f"{VENV} is up to date")
        return
    if not os.access(VENV, os.W_OK) or someone_elses(VENV):
        command = "test" if "test" in extras else "lab"
        sys.exit(f"[course] {VENV} was installed for another version of the course, or without "
                 f"the extras {','.join(extras)}, and it is not yours to change (another user's, "
                 "or you cannot write to it). If your copy of the "
                 "course is older, update it (`git pull`). Otherwise ask whoever installed it to "
                 f"run `DP_COURSE_VENV={VENV} python3 course.py {command}` with this version, or "
                 "unset DP_COURSE_VENV to make your own .venv.")
    say("installing the course environment (first run: a few minutes, PyTorch is large)")
    run([PY, "-m", "pip", "install", "--upgrade", "pip"])
    run([PY, "-m", "pip", "install", "-e", f".[{','.join(extras)}]"], cwd=ROOT)
    if "test" in extras:
        run([PY, "-m", "pip", "install", "--no-deps", D2L])
    register_kernel()
    STAMP.write_text(wanted_stamp(extras) + "\n")


def register_kernel():
    """Point the kernel JupyterLab offers at this venv's interpreter (an absolute path, not "python"
    looked up on PATH, which on many machines is a system Python without torch)."""
    run([PY, "-m", "ipykernel", "install", "--sys-prefix", "--name", KERNEL_NAME,
         "--display-name", KERNEL_DISPLAY])


def venv_env():
    env = dict(os.environ)
    env["PATH"] = str(BIN) + os.pathsep + env.get("PATH", "")
    env["VIRTUAL_ENV"] = str(VENV)
    env["PYTHONPATH"] = ""
    return env


def install_lab_settings():
    """Install the course's JupyterLab defaults (tools/lab_settings/) into .venv; the browser test
    uses the same ones."""
    if LAB_OVERRIDES.exists() and LAB_OVERRIDES.read_bytes() == LAB_SETTINGS.read_bytes():
        return   # already there (a shared environment is read-only to its students)
    try:
        LAB_OVERRIDES.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(LAB_SETTINGS, LAB_OVERRIDES)
    except OSError as err:
        say(f"JupyterLab starts with the settings already in {VENV} (the course's could not be "
            f"written: {err.strerror})")


def lab_command(notebook_dir=ROOT / "notebooks", headless=True, args=()):
    """The command line that starts JupyterLab on the course (tests/support/browser_lab.py runs it
    too)."""
    cmd = [BIN / "jupyter", "lab", "--notebook-dir", notebook_dir, "--ip", "127.0.0.1"]
    if headless:
        cmd.append("--no-browser")
    if hasattr(os, "geteuid") and os.geteuid() == 0:
        cmd.append("--allow-root")
    return [str(c) for c in cmd] + [str(a) for a in args]


def lab(args):
    ensure_venv(["course"])
    install_lab_settings()
    has_display = os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")
    headless = not has_display and sys.platform.startswith("linux")
    if headless:
        say("no display found: JupyterLab will print a URL with its token; open it in your browser "
            "(over ssh: ssh -L 8888:127.0.0.1:8888 this-host)")
    cmd = lab_command(ROOT / "notebooks", headless, args)
    say(" ".join(cmd))
    try:
        return subprocess.call(cmd, env=venv_env(), cwd=ROOT / "notebooks")
    except KeyboardInterrupt:
        return 0


def test(args):
    ensure_venv(["course", "instructor", "test"])   # the tests build and grade notebooks too
    return subprocess.call([str(PY), "-m", "pytest", *args], env=venv_env(), cwd=ROOT)


def grade(args):
    ensure_venv(["course", "instructor"])
    return subprocess.call([str(PY), str(ROOT / "tools" / "grade.py"), *args], env=venv_env())


def slides(args):
    ensure_venv(["course", "instructor"])
    return subprocess.call([str(PY), str(ROOT / "tools" / "slides.py"), *args], env=venv_env())


def main(argv):
    if len(argv) < 1 or argv[0] not in ("lab", "test", "grade", "slides"):
        print(__doc__)
        if argv:
            print(f"unknown command {argv[0]!r}: choose lab, test, grade or slides")
        return 2
    return {"lab": lab, "test": test, "grade": grade, "slides": slides}[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
