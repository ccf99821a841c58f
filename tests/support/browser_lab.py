"""Run the course's notebooks in a real JupyterLab, driven by headless Chromium (see
tests/test_browser.py).

JupyterLab is started with the command line and settings of ``python3 course.py lab``
(``course.lab_command``, ``course.install_lab_settings``, ``course.venv_env``); only the places it
writes to (home, runtime, config and data dirs, TMPDIR) move into a temporary folder, so the test
leaves nothing in the user's home. The learner's data root (``DLTOOLS_DATA``, else the repository's
``data/``) is used as it is. Every process started (server, kernels, Playwright's driver, Chromium)
is tracked and must end.
"""
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

from dltools import launch
from support import ROOT, load_course

# The course's folders, in a temporary tree with the repository's layout: the notebooks' set-up
# cell finds the course there (its dltools/), and dltools.paths its scripts/ and results/. The
# folders a run may write to are copied whole (notebooks/ with its checks_NN.py); data/ (large),
# dltools/ and results/, read-only, are linked.
COPIED_DIRS = ("notebooks", "scripts", "images", "benchmarks")
LINKED_DIRS = ("data", "dltools", "results")
COPIED_FILES = ("pyproject.toml",)   # the version floors notebook 00 checks
# Browsers tried when Playwright's own is not installed, in this order (names on PATH, then the
# usual places on macOS).
SYSTEM_BROWSERS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable",
                   "chrome", "/Applications/Chromium.app/Contents/MacOS/Chromium",
                   "/Applications/Google Chrome.app/Contents/MacOS/Google Chrome")
BROWSER_HINT = ("install one with `.venv/bin/python -m playwright install chromium` or your "
                "system's package (e.g. `apt-get install chromium`), or set DP_COURSE_CHROMIUM "
                "to its path")
# Without the networking flags Chromium keeps trying to reach Google's servers; --no-sandbox is
# needed as root and in containers; /dev/shm is small in containers.
CHROMIUM_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-background-networking",
    "--disable-component-update", "--no-first-run", "--no-default-browser-check",
]
# Set by the test harness only (tools/notebook_env.py); a learner's JupyterLab does not have them.
HARNESS_ENV = ("PYTEST_", "SOURCE_DATE_EPOCH", "PYTHONHASHSEED", "COLUMNS")


def playwright_chromium():
    """The Chromium that ``python -m playwright install chromium`` installed, or None."""
    try:
        from playwright.sync_api import Error, sync_playwright
    except ImportError:
        return None
    try:
        with sync_playwright() as p:
            path = p.chromium.executable_path
    except Error:
        return None
    return path if path and Path(path).is_file() else None


def find_browser(environ=os.environ):
    """The Chromium or Chrome executable the browser test drives, or None when there is none:
    ``DP_COURSE_CHROMIUM`` if set, else Playwright's own browser, else a system Chromium/Chrome."""
    if environ.get("DP_COURSE_CHROMIUM"):
        return environ["DP_COURSE_CHROMIUM"]
    found = playwright_chromium()
    if found:
        return found
    for name in SYSTEM_BROWSERS:
        path = shutil.which(name, path=environ.get("PATH"))
        if path:
            return path
    return None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def isolated_env(base_env, tmp):
    """``base_env`` with everything Jupyter, IPython, matplotlib and Chromium write moved under
    ``tmp``."""
    env = {k: v for k, v in base_env.items()
           if not k.startswith(HARNESS_ENV) and not k.startswith(("JUPYTER", "JPY_"))}
    dirs = {
        "HOME": "home", "XDG_CONFIG_HOME": "home/.config", "XDG_CACHE_HOME": "home/.cache",
        "XDG_DATA_HOME": "home/.local/share", "XDG_RUNTIME_DIR": "xdg-runtime", "TMPDIR": "tmp",
        "JUPYTER_RUNTIME_DIR": "jupyter/runtime", "JUPYTER_CONFIG_DIR": "jupyter/config",
        "JUPYTER_DATA_DIR": "jupyter/data", "IPYTHONDIR": "ipython", "MPLCONFIGDIR": "matplotlib",
    }
    for var, sub in dirs.items():
        path = Path(tmp) / sub
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        env[var] = str(path)
    return env


def copy_course_tree(dest):
    """Copy the folders notebooks use into ``dest`` (same layout as the repo); return
    dest/notebooks."""
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    ignore = shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", "*.pyc")
    for name in COPIED_DIRS:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, dest / name, ignore=ignore)
    for name in LINKED_DIRS:
        if (ROOT / name).is_dir():
            (dest / name).symlink_to(ROOT / name, target_is_directory=True)
    for name in COPIED_FILES:
        shutil.copy(ROOT / name, dest / name)
    return dest / "notebooks"


def relative_references(notebook):
    """Paths such as ``../scripts/train.py`` that a notebook's code cells mention, as written."""
    refs = set()
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            refs.update(re.findall(r"\.\./[\w./-]*\w", "".join(cell["source"])))
    return sorted(refs)


def cleared_copy(notebook):
    """The notebook as a learner opens it fresh: no outputs, no execution counts, no widget state,
    so nothing the page shows can come from the saved file."""
    nb = json.loads(json.dumps(notebook))
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            cell["outputs"], cell["execution_count"] = [], None
            cell["metadata"].pop("execution", None)
    nb["metadata"].pop("widgets", None)
    return nb


def expected_outputs(notebook):
    """For each cell (markdown included, in order), what the saved outputs show: a set of kinds
    among 'text', 'image', 'widget', 'table', plus 'raises' for cells tagged raises-exception."""
    kinds = []
    for cell in notebook["cells"]:
        k = set()
        if cell["cell_type"] == "code":
            if "raises-exception" in cell.get("metadata", {}).get("tags", []):
                k.add("raises")
            for out in cell.get("outputs", []):
                if out["output_type"] == "stream" and "".join(out.get("text", "")).strip():
                    k.add("text")
                data = out.get("data", {})
                if any(m.startswith("image/") for m in data):
                    k.add("image")
                elif "application/vnd.jupyter.widget-view+json" in data:
                    k.add("widget")
                elif "<table" in "".join(data.get("text/html", "")):
                    k.add("table")
                elif "".join(data.get("text/plain", "")).strip():
                    k.add("text")
        kinds.append(k)
    return kinds


def _tree(pid):
    """The process ``pid`` and all its descendants (empty if it is gone), names noted while
    alive."""
    procs = []
    for p in [pid, *launch.descendants(pid)]:
        try:
            procs.append(psutil.Process(p))
        except psutil.NoSuchProcess:
            if p == pid:
                return []
    for p in procs:
        process_name(p)
    return procs


def process_name(proc):
    """A process's command line, short; remembered so it can be shown after the process is gone."""
    if not hasattr(proc, "dp_course_name"):
        try:
            proc.dp_course_name = " ".join(proc.cmdline())[:120] or proc.name()
        except psutil.Error:
            proc.dp_course_name = "?"
    return proc.dp_course_name


def survivors(procs):
    """The processes of ``procs`` still running (zombies, already dead, count as gone)."""
    alive = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                alive.append(p)
        except psutil.NoSuchProcess:
            pass
    return alive


def kill_all(procs):
    for p in survivors(procs):
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=10)


class LabServer:
    """JupyterLab started as ``python3 course.py lab`` starts it, on a free port of 127.0.0.1.

    The token is the random one JupyterLab makes and prints, read from the URL in its log (which
    also checks that the URL with its token is printed, as a learner on a headless server needs).
    """

    def __init__(self, tmp, notebook_dir, startup_timeout=120):
        self.tmp = Path(tmp)
        self.notebook_dir = Path(notebook_dir)
        self.startup_timeout = startup_timeout
        self.course = load_course()
        self.port = free_port()
        # Short, because Chromium puts a unix socket under TMPDIR (at most 107 characters); removed
        # by stop().
        self.env_dir = Path(tempfile.mkdtemp(prefix="dp-course-lab-"))
        self.env = isolated_env(self.course.venv_env(), self.env_dir)
        self.log_path = self.tmp / "jupyter-lab.log"
        self.proc = None
        self.url = self.token = None
        self.procs_seen = []

    def command(self):
        return self.course.lab_command(self.notebook_dir, headless=True,
                                       args=["--port", str(self.port),
                                             "--ServerApp.port_retries=0"])

    def log(self, tail=4000):
        return self.log_path.read_text(errors="replace")[-tail:] if self.log_path.exists() else ""

    def start(self):
        self.course.install_lab_settings()
        jupyter = Path(self.command()[0])
        if not jupyter.exists():
            raise RuntimeError(f"{jupyter} not found: create the course environment first "
                               "(python3 course.py lab, or python3 course.py test)")
        with open(self.log_path, "wb") as log:
            # Its own session: a stray Ctrl-C in the terminal does not reach it, and killpg can.
            self.proc = subprocess.Popen(self.command(), cwd=self.notebook_dir, env=self.env,
                                         stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        pattern = re.compile(rf"http://127\.0\.0\.1:{self.port}/lab\?token=([0-9a-f]{{16,}})")
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"JupyterLab exited with code {self.proc.returncode}:\n{self.log()}")
            m = pattern.search(self.log(tail=10**6))
            if m:
                self.token = m.group(1)
                self.url = f"http://127.0.0.1:{self.port}"
                try:
                    self.api("GET", "/api/status")
                    return self
                except OSError:
                    pass
            time.sleep(0.3)
        raise RuntimeError("JupyterLab did not print its URL with a token within "
                           f"{self.startup_timeout} s "
                           f"(command: {' '.join(self.command())}):\n{self.log()}")

    def api(self, method, path, timeout=30):
        req = urllib.request.Request(self.url + path, method=method,
                                     headers={"Authorization": f"token {self.token}"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            body = resp.read()
        return json.loads(body) if body else None

    def remember_processes(self):
        """Note the server and every process it started (kernels), to check later that all are
        gone."""
        if self.proc is not None:
            known = {p.pid for p in self.procs_seen}
            self.procs_seen += [p for p in _tree(self.proc.pid) if p.pid not in known]

    def shutdown_kernels(self):
        for kernel in self.api("GET", "/api/kernels"):
            self.api("DELETE", f"/api/kernels/{kernel['id']}")

    def stop(self):
        """Shut down like a learner's Ctrl-C would (kernels first), then make sure: kill what is
        left.
        Returns the processes that had to be killed."""
        if self.proc is None:
            shutil.rmtree(self.env_dir, ignore_errors=True)
            return []
        self.remember_processes()
        try:
            if self.proc.poll() is None and self.token:
                self.api("POST", "/api/shutdown", timeout=10)
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            pass
        leftovers = survivors(self.procs_seen)
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        kill_all(self.procs_seen)
        self.proc.wait(timeout=30)
        shutil.rmtree(self.env_dir, ignore_errors=True)
        return leftovers

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


class Chromium:
    """Headless Chromium (the ``executable`` found by ``find_browser``) through Playwright, with its
    profile and home in ``tmp``. Raises RuntimeError with the reason when it cannot start."""

    def __init__(self, tmp, env, executable, viewport=(1280, 1600)):
        self.tmp = Path(tmp)
        self.env = env
        self.executable = str(executable)
        self.viewport = {"width": viewport[0], "height": viewport[1]}
        self.playwright = self.context = None
        self.roots, self.procs_seen = [], []

    def start(self):
        from playwright.sync_api import Error, sync_playwright

        if not Path(self.executable).is_file():
            raise RuntimeError(f"no browser at {self.executable}: {BROWSER_HINT}")
        before = {p.pid for p in psutil.Process().children()}
        self.playwright = sync_playwright().start()
        # Playwright's driver (a node process) is our new child; Chromium and its helpers run under
        # it.
        self.roots = [p for p in psutil.Process().children() if p.pid not in before]
        try:
            self.context = self.playwright.chromium.launch_persistent_context(
                str(self.tmp / "chromium-profile"), executable_path=self.executable, headless=True,
                args=CHROMIUM_ARGS, env=self.env, viewport=self.viewport, timeout=60_000)
        except Error as e:
            raise RuntimeError(f"Chromium ({self.executable}) could not start: {e}") from None
        finally:
            self.remember_processes()
        return self.context

    def remember_processes(self):
        known = {p.pid for p in self.procs_seen}
        for root in self.roots:
            self.procs_seen += [p for p in _tree(root.pid) if p.pid not in known]

    def stop(self):
        """Close the browser and Playwright's driver; returns the processes that had to be
        killed."""
        self.remember_processes()
        if self.context is not None:
            try:
                self.context.close()
            except Exception:  # noqa: BLE001 - a dead browser must not stop the cleanup
                pass
        if self.playwright is not None:
            try:
                self.playwright.stop()
            except Exception:  # noqa: BLE001
                pass
        psutil.wait_procs(self.procs_seen, timeout=10)
        leftovers = survivors(self.procs_seen)
        kill_all(self.procs_seen)
        self.context = self.playwright = None
        return leftovers

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


# Reads, for each cell of the open notebook, what the page shows: prompt and visible outputs.
_READ_CELLS_JS = """() => {
  const shown = e => {
    const r = e.getBoundingClientRect();
    return r.width > 0 && r.height > 0
      && e.checkVisibility({visibilityProperty: true, opacityProperty: true});
  };
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  return [...panel.querySelectorAll('.jp-Notebook .jp-Cell')].map(c => {
    const outs = [...c.querySelectorAll('.jp-OutputArea-output')].filter(shown);
    return {
      code: c.classList.contains('jp-CodeCell'),
      prompt: (c.querySelector('.jp-InputArea-prompt') || {innerText: ''}).innerText.trim(),
      texts: outs.map(o => o.innerText).filter(t => t.trim()),
      stderr: outs.filter(o => o.dataset.mimeType === 'application/vnd.jupyter.stderr')
        .map(o => o.innerText),
      images: [...c.querySelectorAll('.jp-OutputArea-output img')].filter(
        i => shown(i) && i.complete && i.naturalWidth > 0).length,
      widgets: [...c.querySelectorAll('.jp-OutputArea-output .jupyter-widgets')]
        .filter(shown).length,
      tables: [...c.querySelectorAll('.jp-OutputArea-output table')].filter(shown).length,
    };
  });
}"""

_STATE_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  if (!panel) return null;
  const prompts = [...panel.querySelectorAll('.jp-CodeCell .jp-InputArea-prompt')]
    .map(p => p.innerText.trim());
  const dirty = !!document.querySelector('.lm-TabBar-tab.jp-mod-current.jp-mod-dirty');
  return {prompts, dirty};
}"""

# Height of the page when the notebook's scroll area is tall enough to show every cell at once (up
# to the last cell: the scroll area also has blank room below it so the last cell can be scrolled
# up).
_FULL_HEIGHT_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  const outer = panel.querySelector('.jp-WindowedPanel-outer');
  const cells = panel.querySelectorAll('.jp-Notebook .jp-Cell');
  const last = cells[cells.length - 1].getBoundingClientRect().bottom;
  const content = last - outer.getBoundingClientRect().top + outer.scrollTop;
  return Math.ceil(window.innerHeight - outer.clientHeight + content + 40);
}"""

_SCROLL_TOP_JS = """() => {
  const panel = document.querySelector('.jp-NotebookPanel:not(.lm-mod-hidden)');
  panel.querySelector('.jp-WindowedPanel-outer').scrollTop = 0;
}"""

MAX_SCREENSHOT_HEIGHT = 30_000


def _session_kernel(server, name):
    for s in server.api("GET", "/api/sessions"):
        if s.get("path") == name and s.get("kernel"):
            return s["kernel"]
    return None


def _wait(what, condition, timeout, interval=0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


def run_in_lab(context, server, name, workspace, screenshot, timeout=1800):
    """Open notebook ``name`` (in the server's notebook dir) in a fresh workspace, run all cells
    from the Run menu, wait until the kernel is idle, save it, take a full-notebook screenshot.

    Returns ``(cells, saved, seconds)``: what the page shows per cell (see _READ_CELLS_JS), the
    notebook as JupyterLab saved it after the run (its outputs, with their types, are the page's
    model), and how long Run All took."""
    page = context.new_page()
    try:
        page.goto(f"{server.url}/lab/workspaces/{workspace}/tree/{name}?token={server.token}",
                  timeout=120_000)
        page.wait_for_selector(".jp-NotebookPanel .jp-Notebook .jp-Cell", timeout=120_000)

        def kernel_ready():
            k = _session_kernel(server, name)
            return k if k and k["connections"] > 0 and k["execution_state"] == "idle" else None

        kernel = _wait(f"the kernel of {name} to start and connect", kernel_ready, 180)

        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*Run\s*$")).click()
        page.locator('.lm-Menu-item[data-command="runmenu:run-all"]').click()
        # Cells were cleared: a number or [*] in a prompt means the run started.
        _wait("Run → Run All Cells to start the cells",
              lambda: any(re.search(r"\d|\*", p) for p in page.evaluate(_STATE_JS)["prompts"]), 120)

        def finished():
            state = page.evaluate(_STATE_JS)
            k = _session_kernel(server, name)
            return (not any("*" in p for p in state["prompts"])
                    and k is not None and k["id"] == kernel["id"]
                    and k["execution_state"] == "idle")

        start = time.monotonic()
        _wait(f"{name} to finish running",
              lambda: finished() and (time.sleep(1.5) or finished()), timeout)
        run_seconds = time.monotonic() - start

        page.locator(".lm-MenuBar-item", has_text=re.compile(r"^\s*File\s*$")).click()
        page.locator('.lm-Menu-item[data-command="docmanager:save"]').click()
        _wait(f"{name} to be saved", lambda: not page.evaluate(_STATE_JS)["dirty"], 60)

        # Cells out of view have estimated heights until drawn: grow the page until its height
        # settles.
        for _ in range(8):
            height = min(max(page.evaluate(_FULL_HEIGHT_JS), 800), MAX_SCREENSHOT_HEIGHT)
            if height == page.viewport_size["height"]:
                break
            page.set_viewport_size({"width": page.viewport_size["width"], "height": height})
            page.evaluate(_SCROLL_TOP_JS)
            page.wait_for_timeout(1500)  # let JupyterLab lay out and paint the cells now in view
        cells = page.evaluate(_READ_CELLS_JS)
        page.screenshot(path=str(screenshot), full_page=True)
        saved = json.loads((server.notebook_dir / name).read_text())
        return cells, saved, run_seconds
    except Exception:
        try:  # what the page showed when it went wrong
            page.screenshot(path=str(screenshot), full_page=True)
        except Exception:  # noqa: BLE001 - the original error matters more
            pass
        raise
    finally:
        page.close()


def problems(name, original, cells, saved):
    """Everything a learner would see go wrong, as a list of messages (empty: all good).

    ``original`` is the committed notebook (what outputs to expect), ``cells`` what the page showed,
    ``saved`` the notebook JupyterLab saved after the run."""
    found = []
    expected = expected_outputs(original)
    if len(cells) != len(original["cells"]):
        return [f"{name}: the page shows {len(cells)} cells, "
                f"the notebook has {len(original['cells'])}"]

    def where(i):
        first = "".join(original["cells"][i]["source"]).strip().splitlines()
        first = [line for line in first if not line.startswith("#")] or first or [""]
        return f"{name} cell {i + 1} ({first[0][:60]!r})"

    code = [i for i, c in enumerate(original["cells"])
            if c["cell_type"] == "code" and "".join(c["source"]).strip()]
    for i in code:
        cell, want, model = cells[i], expected[i], saved["cells"][i]
        if not re.fullmatch(r"\[\d+\]:", cell["prompt"]):
            found.append(f"{where(i)} did not run (prompt {cell['prompt']!r})")
            continue
        if "raises" not in want:
            for out in model.get("outputs", []):
                if out["output_type"] == "error":
                    found.append(f"{where(i)} raised {out['ename']}: {out['evalue']}")
            for text in cell["stderr"]:
                if "Traceback (most recent call last)" in text and not any(
                        o["output_type"] == "error" for o in model.get("outputs", [])):
                    found.append(f"{where(i)} shows a traceback:\n{text[-1500:]}")
        if "image" in want and not cell["images"]:
            found.append(f"{where(i)}: the saved notebook has a plot here, "
                         "the page shows no rendered image")
        if "widget" in want:
            broken = [t for t in cell["texts"]
                      if "Error displaying widget" in t or "Loading widget" in t]
            if not cell["widgets"] or broken:
                found.append(f"{where(i)}: the progress bar / widget did not render "
                             f"({broken or 'nothing shown'})")
        if "table" in want and not cell["tables"]:
            found.append(f"{where(i)}: the saved notebook shows a table here, the page shows none")
        if "text" in want and not cell["texts"]:
            found.append(f"{where(i)}: the saved notebook prints output here, the page shows none")
    if code:
        last = cells[code[-1]]
        if not (last["texts"] or last["images"] or last["widgets"]):
            found.append(f"{where(code[-1])}: the last code cell shows no output")
    return found
