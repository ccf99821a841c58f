"""Run a command, and stop it with everything it started when a watched process ends.

    python -m dltools.guard PARENT_PID COMMAND [ARGS ...]

:func:`dltools.launch.run_torchrun` starts torchrun through this guard where the operating system
has no parent-death signal (macOS, Windows; on Linux ``prctl`` does the same job without it): if
the notebook's kernel is killed or restarted while torchrun runs, the guard sees its parent gone
(within half a second) and stops torchrun and its workers, which would otherwise run on. It
watches the parent by pid *and* start time (psutil), so a reused pid does not fool it. Asked to
stop (SIGTERM, Ctrl-C), it stops the command's tree first. It exits with the command's exit code
(on a signal, by the same signal where it can).
"""
import signal
import subprocess
import sys
import time

import psutil

__all__ = ["main", "stop_tree"]

#: seconds between two looks at the parent
POLL = 0.5


def stop_tree(pid, grace=10):
    """Ask ``pid`` and every process below it to stop (SIGTERM: torchrun then stops its own
    workers), wait up to ``grace`` seconds, then kill what is left."""
    try:
        root = psutil.Process(pid)
        tree = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return
    for process in tree:
        try:
            process.terminate()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for process in alive:
        try:
            process.kill()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    psutil.wait_procs(alive, timeout=grace)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) < 2 or not argv[0].isdigit():
        raise SystemExit(__doc__)
    parent = psutil.Process(int(argv[0]))   # fails at once if the parent is already gone
    child = subprocess.Popen(argv[1:])

    def stop(signum, frame):
        stop_tree(child.pid)
        raise SystemExit(128 + signum)
    for name in ("SIGTERM", "SIGINT", "SIGHUP"):
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), stop)

    while child.poll() is None:
        if not parent.is_running():   # is_running() also compares the start time
            stop_tree(child.pid)
            break
        time.sleep(POLL)
    code = child.wait()
    if code < 0 and hasattr(signal, "SIGKILL"):   # POSIX: end by the same signal
        signal.signal(-code, signal.SIG_DFL)
        signal.raise_signal(-code)
    return code


if __name__ == "__main__":
    sys.exit(main())
