"""Processes a test started and did not stop: tests of launchers end with
:func:`assert_no_process_left`."""
import time
from pathlib import Path

import psutil

from dltools import launch


def descendants(pid=None):
    """Pids of all processes below ``pid`` (default: this one), but Python's resource tracker."""
    return [p for p in launch.descendants(pid) if not _is_resource_tracker(p)]


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


def gone(pids, wait=15):
    """Whether every process in ``pids`` has ended within ``wait`` seconds (zombies count as
    ended). For processes that are no longer this one's descendants, such as orphaned workers."""
    end = time.monotonic() + wait
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive:
            return True
        if time.monotonic() > end:
            return False
        time.sleep(0.1)
