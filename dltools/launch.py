"""The plumbing behind ``dltools.distributed``: how a rank finds its device and joins its process
group, starting worker processes from a notebook, their failures, and ``torchrun``.

Learners read ``dltools.distributed`` (the all-reduce algorithms and their cost); this module is
the machinery they use without needing to read it. Every public name here is also importable from
``dltools.distributed``.

**One device rule** for every worker and script (the training scripts' ``setup_ddp()`` calls
:func:`setup_process_group`), written in ``dltools.devices`` (``rank_device``, ``backend_for``): a
rank uses ``cuda:LOCAL_RANK`` when the machine has a GPU for each of its local processes, and makes
it the current CUDA device (so that a bare ``"cuda"`` means it; the group is also bound to it with
``device_id=``, which ``barrier`` uses, and object collectives go through the group's gloo half);
otherwise every rank uses the CPU. The process group gets gloo for CPU tensors and, when the ranks
have GPUs, NCCL for CUDA tensors (``"cpu:gloo,cuda:nccl"``), so a collective works whatever device
its tensors are on.

``launch(fn, world_size, *args)`` runs ``fn(*args)`` in ``world_size`` processes that each have
that process group and returns their return values to the caller, in rank order. It uses PyTorch's
own launcher machinery (``start_processes``, what ``torchrun``'s agent uses), so a failing worker
comes back as an error carrying its traceback and no process is left behind. The rendezvous store
is hosted by the calling process on a port the operating system chooses, so a busy default port
(29500) does not matter, and there is no window between picking a port and using it.
"""
import contextlib
import datetime
import gc
import json
import logging
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import psutil
import torch
import torch.distributed as dist

from .devices import backend_for, num_gpus, rank_device, usable_cores

__all__ = ["WorkerError", "WorkerTimeoutError", "TorchrunError", "setup_process_group", "launch",
           "threads_per_process", "single_process_group", "run_torchrun", "descendants",
           "captured_stderr", "exit_with_parent", "max_processes"]

@contextlib.contextmanager
def captured_stderr():
    """Collect what this process and the processes it starts write to standard error (file
    descriptor 2) while the block runs, instead of showing it. Yields a list that holds the text
    once the block ends: a notebook can then print the line that matters, not a red page.

    >>> import subprocess, sys
    >>> with captured_stderr() as err:
    ...     _ = subprocess.run([sys.executable, "-c", "import sys; sys.exit('child: no luck')"])
    >>> err[0].strip()
    'child: no luck'
    """
    captured = []
    sys.stderr.flush()
    with tempfile.TemporaryFile() as sink:
        saved = os.dup(2)
        os.dup2(sink.fileno(), 2)
        try:
            yield captured
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            captured.append(sink.read().decode(errors="replace"))


#: Default seconds a collective may wait for a peer.
DEFAULT_TIMEOUT = 60.0
#: Default seconds a whole ``launch`` may take (a notebook cell that never returns helps nobody).
DEFAULT_DEADLINE = 600.0


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its rank, exit code and traceback."""

    def __init__(self, message, rank=None, exitcode=None, worker_traceback=""):
        super().__init__(message)
        self.rank, self.exitcode, self.worker_traceback = rank, exitcode, worker_traceback


class WorkerTimeoutError(WorkerError, TimeoutError):
    """A worker waited longer than the timeout for a peer (that hung or died): see its traceback."""


class TorchrunError(subprocess.CalledProcessError):
    """``torchrun`` exited with an error; ``str(err)`` ends with the last lines of its output."""

    def __str__(self):
        tail = "\n".join((self.output or "").strip().splitlines()[-150:])
        return f"{super().__str__()}\n--- last lines of its output ---\n{tail}"


# ------------------------------------------------------------------ the process group


def setup_process_group(device_type="auto", **init_kwargs):
    """Pick this rank's device (:func:`rank_device`, given ``device_type``) and join the default
    process group with the backend that goes with it (:func:`backend_for`); return the device.

    ``init_kwargs`` go to ``dist.init_process_group`` (``store``, ``rank``, ``world_size``,
    ``timeout``); without them it reads torchrun's environment variables. On a GPU the group is
    bound to the rank's device (``device_id``), so ``barrier`` uses that GPU, not ``cuda:0``.
    """
    device = rank_device(device_type)
    device_id = device if device.type == "cuda" else None
    dist.init_process_group(backend_for(device), device_id=device_id, **init_kwargs)
    return device


# ------------------------------------------------------------------ launching workers


def _check_importable(fn):
    """Spawned workers import ``fn`` by name: refuse functions they cannot find, saying why."""
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {fn!r}")
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    where = f"{module}.{qualname}"
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(f"{where} cannot be sent to worker processes: lambdas and functions "
                         "defined inside other functions cannot be imported by name. Define it at "
                         "the top level of a .py module.")
    main_file = getattr(sys.modules.get("__main__"), "__file__", None)
    if module == "__main__" and not (main_file and os.path.isfile(main_file)):
        raise ValueError(f"{qualname} is defined in a notebook, an interactive session or a script "
                         "read from standard input (module __main__ without a file), which spawned "
                         "worker processes cannot import. Put it in a .py module (for example next "
                         "to the notebook) and import it from there.")
    try:
        pickle.dumps(fn)
    except Exception as err:
        raise ValueError(f"{where} cannot be pickled for the worker processes: {err}") from err


def _check_arguments(fn, args):
    """Refuse, before starting anything, an argument the workers cannot receive (each gets a
    pickled copy)."""
    for i, value in enumerate(args, start=1):
        try:
            pickle.dumps(value)
        except Exception as err:
            raise ValueError(f"argument {i} of {_name(fn)} ({type(value).__name__}) cannot be sent "
                             f"to the worker processes, which receive a pickled copy ({err}): "
                             "pass tensors, numbers, strings, lists and dicts of them, or "
                             "functions defined at the top level of a .py module.") from err


def threads_per_process(num_processes):
    """Torch threads for each of ``num_processes`` processes sharing this machine: cores / processes
    (at least 1), so that the processes do not oversubscribe the cores.

    >>> threads_per_process(10 ** 6)
    1
    """
    return max(1, usable_cores() // num_processes)


# A process that has imported torch holds about 0.3 GB of memory of its own (measured: 283 MiB
# unique set size on Linux, torch 2.x) and takes seconds of a core to start.
PROCESS_MEMORY = 0.3e9


def max_processes():
    """The most processes :func:`launch` and :func:`run_torchrun` start here: 4 per CPU core (at
    least 8, or one per GPU where there are more GPUs), and no more than the free memory holds at
    about 0.3 GB each.
    """
    by_cores = max(8, 4 * usable_cores(), num_gpus())
    by_memory = int(psutil.virtual_memory().available // PROCESS_MEMORY)
    return max(1, min(by_cores, by_memory))


def _check_world_size(world_size):
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    limit = max_processes()
    if world_size > limit:
        free = psutil.virtual_memory().available / 1e9
        raise ValueError(
            f"world_size {world_size} is more processes than this machine runs at once "
            f"({usable_cores()} CPU cores, {free:.1f} GB of free memory): each one starts its own "
            f"Python and PyTorch (about 0.3 GB and seconds of a core), so the run would spend "
            f"minutes starting, or run out of memory. Use at most {limit}; the mechanisms are the "
            f"same with 2 or 4 ranks.")


def _worker(fn, args, backend, timeout, store_host, store_port, launcher):
    """Body of every worker process: join the process group, run ``fn``, leave the group."""
    # First: end with the launcher, however it ends. torch's own parent-death signal here is
    # SIGINT, which a bare ``except:`` in ``fn`` swallows, and it is set only once the worker has
    # started: a launcher killed before that was never noticed.
    exit_with_parent(launcher)
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    # torch was imported (to unpickle this call) before the launcher set OMP_NUM_THREADS, too late
    # for it to take effect: apply it here, or every worker runs as many threads as there are cores.
    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    _adopt_orphans()
    store = dist.TCPStore(store_host, store_port, world_size, is_master=False,
                          timeout=datetime.timedelta(seconds=timeout))
    options = dict(store=store, rank=rank, world_size=world_size,
                   timeout=datetime.timedelta(seconds=timeout))
    try:
        if backend is None:
            setup_process_group(**options)
        else:
            if "nccl" in backend:
                torch.cuda.set_device(rank_device())
            dist.init_process_group(backend, **options)
    except BaseException:
        _record_failure(store, rank)
        raise
    try:
        try:
            result = fn(*args)
        except KeyboardInterrupt as err:
            # torch's spawn wrapper takes it for a stop from the parent and exits with code 0,
            # without a result: the launcher would wait for one until its deadline.
            raise RuntimeError(f"{_name(fn)} raised KeyboardInterrupt on rank {rank}") from err
        except ValueError as err:
            if "default process group twice" not in str(err):
                raise
            # PyTorch's tutorials set up the group inside the worker; under launch it exists.
            raise RuntimeError(f"dist.init_process_group was called on rank {rank} (by "
                               f"{_name(fn)} or a function it calls), but launch made the "
                               "process group before calling it: remove that "
                               "call (and any setup() that makes it, with MASTER_ADDR and "
                               "MASTER_PORT) from the function; dist.get_rank() and "
                               "dist.get_world_size() work as they are.") from err
        except SystemExit as err:
            # Without this, the worker just ends with that exit code and no traceback.
            raise RuntimeError(f"{_name(fn)} called sys.exit({err.code!r}) on rank {rank}: a "
                               "launched function must return a value (or raise an exception), "
                               "not end its process.") from err
        try:
            pickle.dumps(result)
        except Exception as err:
            # Caught here, the error has a traceback; after fn returns it would be lost.
            raise TypeError(f"{_name(fn)} returned {type(result).__name__}, which cannot be "
                            f"pickled to send it back to the caller ({err}): return tensors, "
                            "numbers, strings, or lists and dicts of them.") from err
        return result
    except BaseException:
        _record_failure(store, rank)  # before leaving the group, which makes the others fail
        raise
    finally:
        # A DDP model that ``fn`` built keeps the group alive (its reducer holds it), and DDP sits
        # in reference cycles: collect it now, or gloo is torn down at interpreter exit and the
        # worker aborts ("terminate called without an active exception").
        gc.collect()
        if dist.is_initialized():   # ``fn`` may have left the group itself, as PyTorch's DDP
            dist.destroy_process_group()   # tutorial's workers end: nothing left to do then
        _stop_children()


def _name(fn):
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', fn)}"


def _adopt_orphans():
    """On Linux, make this worker the "subreaper" of what it starts: a process whose parent exits
    (``sh -c "sleep 600 &"``, a daemon) is then re-parented to this worker instead of to init, so
    :func:`_stop_children` finds and stops it. Elsewhere nothing changes."""
    if sys.platform.startswith("linux"):
        import ctypes
        pr_set_child_subreaper = 36
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1)


def _stop_children():
    """Kill what the worker's function started and left running (a subprocess, a pool), which
    would outlive the worker. Python's resource tracker is left alone: it exits with the worker."""
    left = []
    for process in _processes_below(os.getpid()):
        try:
            if not any("resource_tracker" in part for part in process.cmdline()):
                left.append(process)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    if left:
        _terminate_pools()
    for process in left:
        _kill(process)


def _terminate_pools():
    """Terminate the multiprocessing pools the function left open, while their workers still
    live: a pool whose workers were killed waits forever, at the worker's exit, for a lock that a
    dead worker held (multiprocessing's exit-time clean-up calls ``Pool._terminate_pool``)."""
    from multiprocessing.pool import Pool
    for obj in gc.get_objects():
        if isinstance(obj, Pool):
            with contextlib.suppress(Exception):
                obj.terminate()


def _record_failure(store, rank):
    # Tell the launcher who failed first: the others often fail only because this one did.
    with contextlib.suppress(Exception):
        store.set(f"{_FAILED}/{store.add(_FAILED, 1)}", str(rank))


_FAILED = "dltools/failed"


def _first_failure(ctx, store, failure):
    """The failure that caused the others: (rank, ProcessFailure).

    A rank that died without a Python exception (a native crash, ``os._exit``, the out-of-memory
    killer) leaves no error file and records nothing in the store, and its peers then fail with
    "connection closed": it is the cause. Otherwise the store names the rank whose exception came
    first. The launcher stops the remaining workers with SIGTERM (SIGKILL after a grace period),
    so those two signals on a rank other than the one the launcher saw fail are its doing.
    """
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure

    def failure_of(rank):
        exitcode = ctx._pc.processes[rank].exitcode
        return ProcessFailure(local_rank=rank, pid=ctx.pids()[rank],
                              exitcode=exitcode if exitcode is not None else 1,
                              error_file=ctx.error_files[rank])

    def died_natively(rank, stopped_by_launcher):
        exitcode = ctx._pc.processes[rank].exitcode
        return (exitcode not in (None, 0) and not os.path.isfile(ctx.error_files[rank])
                and not (stopped_by_launcher and -exitcode in (signal.SIGTERM, signal.SIGKILL)))

    with contextlib.suppress(Exception):
        if died_natively(failure.local_rank, stopped_by_launcher=False):
            return failure.local_rank, failure
        for rank in range(len(ctx._pc.processes)):
            if died_natively(rank, stopped_by_launcher=True):
                return rank, failure_of(rank)
        if store.check([f"{_FAILED}/1"]):
            rank = int(store.get(f"{_FAILED}/1").decode())
            if rank != failure.local_rank:
                return rank, failure_of(rank)
    return failure.local_rank, failure


_CRASH_SIGNALS = {"SIGSEGV", "SIGABRT", "SIGBUS", "SIGILL", "SIGFPE"}


@contextlib.contextmanager
def _quiet_elastic_logs():
    # The launcher logs each failure and each process it closes; launch() reports them itself.
    loggers = [logging.getLogger(name) for name in
               ("torch.distributed.elastic.multiprocessing.api", "torch.multiprocessing.spawn")]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels):
            logger.setLevel(level)


def _format_failure(fn, failure, rank, stderr_path):
    """(the message for the learner, the worker's traceback or the end of its stderr)."""
    has_traceback = os.path.isfile(failure.error_file)
    message = failure.message
    if isinstance(message, dict):
        callstack = message.get("extraInfo", {}).get("py_callstack", "")
        message = message.get("message", "") + "\n" + callstack
    if has_traceback:
        reason, shown = "raised an exception", "Its traceback"
    else:
        # No Python exception recorded: what the process wrote to stderr is all there is.
        with contextlib.suppress(OSError):
            message = "\n".join(Path(stderr_path).read_text(errors="replace").splitlines()[-30:])
        if not message.strip() or message.startswith("To enable traceback"):
            message = "(it wrote nothing to stderr)"
        shown = "The end of its stderr"
        if failure.exitcode is not None and failure.exitcode < 0:
            name = failure.signal_name()
            reason = f"was killed by signal {name}"
            if name in _CRASH_SIGNALS:
                reason += (": a crash in native code (C++, CUDA), for example tensors of different "
                           "sizes on different ranks in one collective, or an index out of range")
            elif name == "SIGKILL":
                reason += ", often the system's out-of-memory killer: use less memory per worker"
        else:
            reason = (f"exited with code {failure.exitcode} without a Python exception (os._exit, "
                      "or a crash in native code)")
            if failure.exitcode == 1 and message == "(it wrote nothing to stderr)" and _a_script():
                reason += (". If launch was called at the top level of a script, put the call "
                           "under `if __name__ == \"__main__\":`: each worker imports the script "
                           "again, and must not launch workers of its own (the error above it on "
                           "the console says \"bootstrapping phase\")")
    return (f"worker rank {rank} of {_name(fn)} {reason}.\n{shown}:\n{message}"), message


def _a_script():
    """Whether this process runs a script file (``python file.py``), not Jupyter or ``-c``."""
    main = sys.modules.get("__main__")
    return bool(getattr(main, "__file__", None)) and "ipykernel" not in sys.modules


def launch(fn, world_size, *args, backend=None, timeout=DEFAULT_TIMEOUT,
           deadline=DEFAULT_DEADLINE, env=None):
    """Run ``fn(*args)`` in ``world_size`` new processes with a process group; return their results.

    Each worker sees ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``,
    ``MASTER_ADDR``, ``MASTER_PORT`` (as under torchrun) and an initialised default process group
    made by :func:`setup_process_group`: gloo for CPU tensors, and NCCL for CUDA tensors when there
    is a GPU per rank; :func:`rank_device` gives the worker its device. ``backend="gloo"`` hides the
    GPUs from the workers (a CPU-only run on a GPU machine); another ``backend`` string is passed
    to ``dist.init_process_group`` as it is and needs a GPU per rank if it names NCCL.
    ``fn`` must be importable by name (a top-level function of a ``.py`` module): spawned processes
    cannot import functions defined in a notebook.

    The results come back as a list in rank order, so the notebook prints them (output printed by
    the workers themselves goes to the console, which notebook tests do not capture). If a worker
    raises, the others are stopped and :class:`WorkerError` carries the worker's traceback
    (workers' stderr is kept in a file for that and shown only on failure). A collective (and
    joining the group) waits at most ``timeout`` seconds for a peer: a hung peer ends in
    :class:`WorkerTimeoutError` (a ``TimeoutError``). ``deadline`` (seconds, default 600; ``None``
    for none) limits the whole run; past it every worker is stopped and ``TimeoutError`` is
    raised. A ``world_size`` above :func:`max_processes` is refused before anything starts.
    Workers that have all returned but do not end within :data:`EXIT_GRACE` seconds (a thread
    ``fn`` left running) are stopped, with a warning; the results are kept. ``env``: extra
    environment variables. Each worker gets ``OMP_NUM_THREADS`` = cores / ``world_size`` (at
    least 1) unless ``env`` sets it, and runs that many torch threads
    (``torch.set_num_threads``), so the workers do not oversubscribe the cores.

    >>> from dltools.distributed import rank_info
    >>> [r['rank'] for r in launch(rank_info, 2)]
    [0, 1]
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes
    from torch.distributed.elastic.multiprocessing.api import SignalException

    _check_importable(fn)
    _check_world_size(world_size)
    _check_arguments(fn, args)
    for name, value in (("timeout", timeout), ("deadline", deadline)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not 0 < value < math.inf):   # NaN fails this test too
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if timeout is None:
        raise ValueError("timeout must be a positive number of seconds, got None")
    if backend is not None and "nccl" in backend and num_gpus() < world_size:
        raise ValueError(f"backend {backend!r} needs one GPU per rank: {world_size} ranks, "
                         f"{num_gpus()} GPUs")
    if backend == "gloo":
        # CPU only: with no visible GPU, the workers' rank_device() is the CPU.
        env = {**(env or {}), "CUDA_VISIBLE_DEVICES": ""}

    host = "127.0.0.1"
    # Port 0: the operating system picks a free port, and this process keeps it for the whole run.
    store = dist.TCPStore(host, 0, world_size + 1, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))
    threads = str(threads_per_process(world_size))
    envs = {}
    for rank in range(world_size):
        envs[rank] = {**(env or {}), "RANK": str(rank), "LOCAL_RANK": str(rank),
                      "WORLD_SIZE": str(world_size), "LOCAL_WORLD_SIZE": str(world_size),
                      "MASTER_ADDR": host, "MASTER_PORT": str(store.port),
                      "OMP_NUM_THREADS": (env or {}).get("OMP_NUM_THREADS", threads)}
    log_dir = tempfile.mkdtemp(prefix="dltools_launch_")
    ctx = None
    # The launcher installs its own SIGINT/SIGTERM handlers (to stop the workers if this process is
    # interrupted); put Jupyter's or Python's back afterwards.
    saved_handlers = _signal_handlers()
    try:
        with _quiet_elastic_logs():
            ctx = start_processes(
                name=getattr(fn, "__name__", "worker"), entrypoint=_worker,
                args={r: (fn, args, backend, timeout, host, store.port, os.getpid())
                      for r in range(world_size)},
                envs=envs, start_method="spawn",
                # stderr goes to a file, read back when a worker fails; stdout is left alone.
                logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ERR))
            end = None if deadline is None else time.monotonic() + deadline
            result = None
            while result is None:
                returned = _all_returned(ctx, world_size)
                if returned is not None:   # all ranks returned: their processes may end now
                    _let_finish(ctx, fn)
                    return returned
                result = ctx.wait(timeout=0.05, period=0.05)
                if result is None:
                    _check_no_silent_exit(ctx, fn)
                if result is None and end is not None and time.monotonic() > end:
                    raise TimeoutError(
                        f"{_name(fn)} on {world_size} processes did not finish within the "
                        f"deadline of {deadline} s; all workers were stopped. A worker may be "
                        "stuck in a loop; if the run is only slow, pass a larger deadline= (in "
                        "seconds, or None for no limit).")
        if result.is_failed():
            rank, failure = _first_failure(ctx, store, next(iter(result.failures.values())))
            message, tb = _format_failure(fn, failure, rank, result.stderrs.get(rank, ""))
            error = WorkerError
            first_line = tb.strip().splitlines()[0].lower() if tb.strip() else ""
            returned = sorted(r for r in getattr(ctx, "_return_values", {}) if r != rank)
            if returned and "connection closed by peer" in tb.lower():
                message += (f"\nRank(s) {returned} had already returned while rank {rank} waited "
                            "for them in a collective: every rank must call the same collectives, "
                            "in the same order.")
            if any(word in first_line for word in ("timed out", "timeout")):
                error = WorkerTimeoutError
                message += (f"\nA worker waited more than {timeout} s for its peers: one of them "
                            "is stuck, or never reached the same collective.")
                silent = _silent_ranks(ctx, world_size, rank, returned)
                if silent:
                    message += (f" Rank(s) {silent} had neither returned nor raised: look there "
                                f"first (rank {rank} only gave up waiting).")
            raise error(message, rank=rank, exitcode=failure.exitcode, worker_traceback=tb)
        return [result.return_values[r] for r in range(world_size)]
    except SignalException as err:
        if err.sigval == signal.SIGINT:  # the notebook's "interrupt kernel": stop as Python would
            raise KeyboardInterrupt from None
        raise
    finally:
        if ctx is not None:
            with _quiet_elastic_logs():
                ctx.close(timeout=10)
        for sig, handler in saved_handlers.items():
            signal.signal(sig, handler)
        shutil.rmtree(log_dir, ignore_errors=True)
        del store


def _silent_ranks(ctx, world_size, rank, returned):
    """The ranks other than ``rank`` that neither returned a result nor recorded an exception:
    after a collective's timeout, the likely stuck ones (a peer that timed out too may be among
    them, when the launcher stopped it before it wrote its error file)."""
    with contextlib.suppress(Exception):
        return [r for r in range(world_size) if r != rank and r not in returned
                and not os.path.isfile(ctx.error_files[r])]
    return []


#: Seconds a worker may take to end after every rank has returned.
EXIT_GRACE = 10


def _all_returned(ctx, world_size):
    """Every rank's result in rank order once all have returned, else None. Read here, as
    torch's own poll does, because that poll then waits, with no limit, for every worker process
    to end, and a worker whose function left a thread running never ends."""
    queues, values = getattr(ctx, "_ret_vals", None), getattr(ctx, "_return_values", None)
    if queues is None or values is None:
        return None
    for rank in range(world_size):
        if rank not in values and not queues[rank].empty():
            values[rank] = queues[rank].get()
    return [values[r] for r in range(world_size)] if len(values) == world_size else None


def _let_finish(ctx, fn):
    """Tell the workers their results were read, and give them :data:`EXIT_GRACE` seconds to
    end; one that does not is stopped (by ``ctx.close``) with a warning that says why."""
    ctx._worker_finished_event.set()
    processes = getattr(getattr(ctx, "_pc", None), "processes", [])
    end = time.monotonic() + EXIT_GRACE
    while any(p.exitcode is None for p in processes) and time.monotonic() < end:
        time.sleep(0.05)
    stuck = [r for r, p in enumerate(processes) if p.exitcode is None]
    if stuck:
        warnings.warn(f"rank(s) {stuck} of {_name(fn)} returned, but their processes did not end "
                      f"within {EXIT_GRACE} s and were stopped: the function left something "
                      "running (a thread that is not a daemon, a pool). The results are kept.",
                      RuntimeWarning, stacklevel=3)


def _check_no_silent_exit(ctx, fn):
    """A worker waits for the launcher to read every result before it exits, so one that has
    exited with code 0 while the others run ended without returning (``os._exit(0)``): say so,
    instead of waiting for its result until the deadline."""
    finished = getattr(ctx, "_worker_finished_event", None)
    processes = getattr(getattr(ctx, "_pc", None), "processes", [])
    if finished is None or finished.is_set():
        return
    for rank, process in enumerate(processes):
        if process.exitcode == 0 and rank not in getattr(ctx, "_return_values", {}):
            raise WorkerError(f"worker rank {rank} of {_name(fn)} ended (exit code 0) without "
                              "returning: a launched function must return a value (or raise), "
                              "not end its process (os._exit).", rank=rank, exitcode=0)


def _signal_handlers():
    if threading.current_thread() is not threading.main_thread():
        return {}
    handlers = {}
    for name in ("SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"):
        sig = getattr(signal, name, None)
        if sig is not None and signal.getsignal(sig) is not None:
            handlers[sig] = signal.getsignal(sig)
    return handlers


@contextlib.contextmanager
def single_process_group(backend="gloo"):
    """A process group of one rank, in this process: to try collectives without starting processes.

    >>> with single_process_group():
    ...     dist.get_world_size()
    1
    >>> dist.is_initialized()
    False
    """
    if dist.is_initialized():
        raise RuntimeError("a process group already exists in this process")
    # A FileStore, which every build of torch has (Windows builds lack HashStore).
    with tempfile.TemporaryDirectory(prefix="dltools_group_", ignore_cleanup_errors=True) as tmp:
        store = dist.FileStore(os.path.join(tmp, "store"), 1)
        dist.init_process_group(backend, store=store, rank=0, world_size=1)
        try:
            yield
        finally:
            dist.destroy_process_group()
            del store


# ------------------------------------------------------------------ torchrun


def run_torchrun(script, nproc, *script_args, report=True, nnodes=1, timeout=600, env=None):
    """Run ``script`` with ``python -m torch.distributed.run --standalone --nproc_per_node=nproc``.

    Fails loudly: a non-zero exit raises :class:`TorchrunError` with the end of the output (unlike
    ``!torchrun`` in a notebook, which carries on after "command not found"). ``OMP_NUM_THREADS`` is
    set (cores / processes) so torchrun does not warn. With ``report=True`` the script gets
    ``--report PATH`` appended, rank 0 writes a JSON file there, and that dict is returned with the
    run's output under ``'log'``; otherwise the output (stdout and stderr together) is returned.
    After ``timeout`` seconds torchrun is stopped, and so are its workers: torchrun starts each
    in a session of its own and stops them when it is asked to; any it leaves are killed. If this
    process ends first (a notebook kernel killed or restarted), torchrun and its workers stop
    too: on Linux by the parent-death signal, elsewhere through :mod:`dltools.guard`
    (:data:`PARENT_WATCH`).

    >>> import os, tempfile; path = os.path.join(tempfile.mkdtemp(), 'hello.py')
    >>> # os.write: one write each, so the two processes' output cannot interleave mid-word
    >>> code = "import os; os.write(1, b'rank %s;' % os.environ['RANK'].encode())"
    >>> _ = open(path, 'w').write(code)
    >>> import re; sorted(re.findall('rank [0-9]', run_torchrun(path, 2, report=False)))
    ['rank 0', 'rank 1']
    """
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"no such script: {script}")
    try:
        _check_world_size(nproc)
    except (TypeError, ValueError) as err:
        raise type(err)(str(err).replace("world_size", "nproc")) from None
    if nnodes != 1:
        raise ValueError("run_torchrun starts one node (--standalone); run the other nodes' "
                         "torchrun yourself (see scripts/slurm_ddp.sbatch)")
    tmp = tempfile.mkdtemp(prefix="dltools_torchrun_")
    report_path = Path(tmp) / "report.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nnodes={nnodes}",
           f"--nproc_per_node={nproc}", str(script), *map(str, script_args)]
    if report:
        cmd += ["--report", str(report_path)]
    child_env = {**os.environ, **(env or {})}
    child_env.setdefault("OMP_NUM_THREADS", str(threads_per_process(nproc)))
    # Its own session, stopped as a whole on a timeout. torchrun's agent starts every worker in a
    # session of its own (and stops them itself on SIGTERM), so its workers are found by parent.
    started = cmd
    if PARENT_WATCH == "guard":   # a watchdog between this process and torchrun
        started = [sys.executable, "-m", "dltools.guard", str(os.getpid()), *cmd]
    proc = subprocess.Popen(started, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=child_env, start_new_session=True,
                            preexec_fn=_die_with_parent() if PARENT_WATCH == "prctl" else None)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except BaseException:
        _stop_torchrun(proc)
        raise
    finally:
        _stop_torchrun(proc)
    try:
        if proc.returncode != 0:
            raise TorchrunError(proc.returncode, cmd, output=output)
        if not report:
            return output
        if not report_path.is_file():
            raise RuntimeError(f"{script.name} exited normally but rank 0 wrote no report to "
                               f"{report_path}; its output:\n{output}")
        try:
            result = json.loads(report_path.read_text())
        except ValueError as err:
            raise RuntimeError(f"{script.name}: rank 0's report at {report_path} is not valid "
                               f"JSON ({err}); its output:\n{output}") from None
        result["log"] = output
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def exit_with_parent(parent=None):
    """Make this process end (SIGTERM) when its parent ends, however it ends: for a script's
    worker under torchrun, so that a torchrun killed outright (SIGKILL, which it cannot pass on)
    does not leave its workers training on and writing over earlier results, and for
    :func:`launch`'s workers. On Linux the parent-death signal; elsewhere a daemon thread that
    looks at the parent every second. Call it first thing in the worker (``scripts/common.py``'s
    ``setup_ddp`` does). ``parent``: the pid the parent had when it started this process, so
    that a parent that ended before this call is noticed too (the parent then is another one).
    """
    parent = os.getppid() if parent is None else parent
    if sys.platform.startswith("linux"):
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
        if os.getppid() != parent:   # the parent ended before the signal was set
            os.kill(os.getpid(), signal.SIGTERM)
        return
    try:
        watched = psutil.Process(parent)
    except psutil.NoSuchProcess:
        os.kill(os.getpid(), signal.SIGTERM)
        return

    def watch():
        while watched.is_running():
            time.sleep(1)
        os.kill(os.getpid(), signal.SIGTERM)
    threading.Thread(target=watch, name="exit_with_parent", daemon=True).start()


#: how run_torchrun's torchrun learns that this process has ended: "prctl" (Linux's parent-death
#: signal, set in the child) or "guard" (a small watchdog process, :mod:`dltools.guard`, that polls
#: this process and stops torchrun's tree; used where there is no such signal, macOS and Windows)
PARENT_WATCH = "prctl" if sys.platform.startswith("linux") else "guard"


def _die_with_parent():
    """On Linux, a function for ``Popen(preexec_fn=)`` that has the kernel send the child SIGTERM
    when this process ends, however it ends (a notebook kernel restarted or killed): torchrun then
    stops its workers. None elsewhere (no parent-death signal; see :func:`_stop_torchrun`).

    >>> callable(_die_with_parent()) == sys.platform.startswith("linux")
    True
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes
    prctl = ctypes.CDLL(None, use_errno=True).prctl   # looked up here, not in the child
    pr_set_pdeathsig = 1

    def set_signal():
        prctl(pr_set_pdeathsig, int(signal.SIGTERM))

    return set_signal


def descendants(pid=None):
    """The pids of the processes below ``pid`` (default: this one), exited ones (zombies) left
    out. psutil finds them on Linux, macOS and Windows.

    >>> import sys
    >>> child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    >>> child.pid in descendants()
    True
    >>> child.kill(); child.wait() != 0
    True
    """
    return [p.pid for p in _processes_below(os.getpid() if pid is None else pid)]


def _processes_below(pid):
    """psutil's processes below ``pid``, zombies left out."""
    try:
        children = psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return []
    found = []
    for child in children:
        try:
            if child.status() != psutil.STATUS_ZOMBIE:
                found.append(child)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return found


def _kill(process):
    """Kill a psutil process (which checks it is still the same process, not a reused pid)."""
    try:
        process.kill()
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        pass


def _stop_torchrun(proc):
    """Stop torchrun, then kill any of its workers still running (they have sessions of their own,
    and outlive a torchrun that was killed before it could stop them)."""
    workers = _processes_below(proc.pid) if proc.poll() is None else []
    _kill_session(proc)
    for process in workers:
        _kill(process)


def _kill_session(proc):
    """Stop torchrun. On Linux and macOS: SIGTERM to its whole session (torchrun stops its workers
    itself), then SIGKILL. Windows has no sessions: torchrun alone is ended (``terminate()`` and
    ``kill()`` are the same there), and :func:`_stop_torchrun` kills the workers it found."""
    if hasattr(os, "killpg"):
        steps = [lambda: os.killpg(proc.pid, signal.SIGTERM),
                 lambda: os.killpg(proc.pid, signal.SIGKILL)]
    else:
        steps = [proc.terminate, proc.kill]
    for step in steps:
        try:
            step()
        except OSError:   # gone already (ProcessLookupError), or not ours to signal
            return
        try:
            proc.wait(timeout=10)
            return
        except subprocess.TimeoutExpired:
            continue
