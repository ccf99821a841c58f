"""Processes a test started and did not stop: tests of launchers end with
:func:`assert_no_process_left`."""
import os
import time
from pathlib import Path


def descendants(pid=None):
    """Pids of all processes below ``pid`` (default: this one), read from /proc."""
    pid = os.getpid() if pid is None else pid
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z":  # a zombie has exited already
                children.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return [p for p in found if not _is_resource_tracker(p)]


def _is_resource_tracker(pid):
    # Python's multiprocessing starts one helper per parent process, which exits with the parent.
    try:
        return b"multiprocessing.resource_tracker" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def assert_no_process_left(wait=10):
    """Fail if this process still has children after ``wait`` seconds (a killed one may take a
    moment to go)."""
    end = time.monotonic() + wait
    while descendants() and time.monotonic() < end:
        time.sleep(0.1)
    assert descendants() == [], f"processes left running: {descendants()}"
