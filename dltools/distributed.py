"""Distributed helpers: start worker processes from a notebook, all-reduce written from scratch, torchrun.

``launch(fn, world_size, *args)`` runs ``fn(*args)`` in ``world_size`` processes that each have a
process group (``gloo`` on CPUs, ``nccl`` on GPUs) and returns their return values to the caller,
in rank order. It uses PyTorch's own launcher machinery (``start_processes``, what ``torchrun``'s
agent uses), so a failing worker comes back as an error carrying its traceback and no process is
left behind.

The rendezvous store is hosted by the calling process on a port the operating system chooses, so a
busy default port (29500) does not matter, and there is no window between picking a port and using it.

``ring_all_reduce`` and ``naive_all_reduce`` are the two textbook all-reduce algorithms written with
point-to-point ``send``/``recv``; ``time_all_reduce`` times them (and ``dist.all_reduce``) inside a
process group; ``run_torchrun`` starts a training script with ``python -m torch.distributed.run``.
"""
import contextlib
import datetime
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
from pathlib import Path

import torch
import torch.distributed as dist

from .devices import distributed_backend, num_gpus

__all__ = ["WorkerError", "WorkerTimeoutError", "TorchrunError", "launch", "rank_info",
           "run_in_sequence", "single_process_group", "raise_on_rank", "hang_on_rank", "ring_all_reduce",
           "naive_all_reduce", "ring_traffic_per_rank", "naive_traffic_at_root", "alpha_beta_time",
           "check_all_reduce", "time_all_reduce", "collectives_demo", "run_torchrun"]

#: Default seconds a collective may wait for a peer, and the default deadline of a whole launch.
DEFAULT_TIMEOUT = 60.0


class WorkerError(RuntimeError):
    """A worker process failed; the message holds its rank, exit code and traceback."""

    def __init__(self, message, rank=None, exitcode=None, worker_traceback=""):
        super().__init__(message)
        self.rank, self.exitcode, self.worker_traceback = rank, exitcode, worker_traceback


class WorkerTimeoutError(WorkerError, TimeoutError):
    """A worker waited longer than the timeout for its peers (a peer hung or died); see the traceback."""


class TorchrunError(subprocess.CalledProcessError):
    """``torchrun`` exited with an error; ``str(err)`` ends with the last lines of its output."""

    def __str__(self):
        tail = "\n".join((self.output or "").strip().splitlines()[-150:])
        return f"{super().__str__()}\n--- last lines of its output ---\n{tail}"


# ------------------------------------------------------------------ launching workers


def _check_importable(fn):
    """Spawned workers import ``fn`` by name: refuse functions they could not find, with the reason."""
    if not callable(fn):
        raise TypeError(f"fn must be a function, got {fn!r}")
    qualname = getattr(fn, "__qualname__", "")
    module = getattr(fn, "__module__", None)
    where = f"{module}.{qualname}"
    if "<lambda>" in qualname or "<locals>" in qualname:
        raise ValueError(f"{where} cannot be sent to worker processes: lambdas and functions defined "
                         "inside other functions cannot be imported by name. Define it at the top "
                         "level of a .py module.")
    if module == "__main__" and not getattr(sys.modules.get("__main__"), "__file__", None):
        raise ValueError(f"{qualname} is defined in a notebook or an interactive session (module "
                         "__main__), which spawned worker processes cannot import. Put it in a .py "
                         "module (for example next to the notebook) and import it from there.")
    try:
        pickle.dumps(fn)
    except Exception as err:
        raise ValueError(f"{where} cannot be pickled for the worker processes: {err}") from err


def _check_world_size(world_size):
    if isinstance(world_size, bool) or not isinstance(world_size, int):
        raise TypeError(f"world_size must be an int, got {world_size!r}")
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")


def _worker(fn, args, backend, timeout, store_host, store_port):
    """Body of every worker process: join the process group, run ``fn``, leave the group."""
    rank, world_size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    if backend == "nccl":
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    store = dist.TCPStore(store_host, store_port, world_size, is_master=False,
                          timeout=datetime.timedelta(seconds=timeout))
    try:
        dist.init_process_group(backend, store=store, rank=rank, world_size=world_size,
                                timeout=datetime.timedelta(seconds=timeout))
    except BaseException:
        _record_failure(store, rank)
        raise
    try:
        return fn(*args)
    except BaseException:
        _record_failure(store, rank)  # before leaving the group, which makes the others fail
        raise
    finally:
        dist.destroy_process_group()


def _record_failure(store, rank):
    # Tell the launcher who failed first: the others often fail only because this one did.
    with contextlib.suppress(Exception):
        store.set(f"{_FAILED}/{store.add(_FAILED, 1)}", str(rank))


_FAILED = "dltools/failed"


def _first_failure(ctx, store, failure):
    """The failure of the rank that failed first (the launcher only reports the first one it sees)."""
    from torch.distributed.elastic.multiprocessing.errors import ProcessFailure
    with contextlib.suppress(Exception):
        if store.check([f"{_FAILED}/1"]):
            rank = int(store.get(f"{_FAILED}/1").decode())
            if rank != failure.local_rank:
                exitcode = ctx._pc.processes[rank].exitcode if getattr(ctx, "_pc", None) else None
                return rank, ProcessFailure(local_rank=rank, pid=ctx.pids()[rank],
                                            exitcode=exitcode if exitcode is not None else 1,
                                            error_file=ctx.error_files[rank])
    return failure.local_rank, failure


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
    message = failure.message
    if isinstance(message, dict):
        message = message.get("message", "") + "\n" + message.get("extraInfo", {}).get("py_callstack", "")
    if not failure.error_file_data.get("message"):
        # No traceback recorded (the process died before or outside fn): show the end of its stderr.
        with contextlib.suppress(OSError):
            message = "\n".join(Path(stderr_path).read_text(errors="replace").splitlines()[-30:])
    if failure.error_file_data.get("message"):
        reason = "raised an exception"
    elif failure.exitcode is not None and failure.exitcode < 0:
        reason = f"was killed by signal {failure.signal_name()}"
    else:
        reason = f"exited with code {failure.exitcode}"
    return (f"worker rank {rank} of {fn.__module__}.{fn.__qualname__} {reason}.\n"
            f"Its traceback:\n{message}"), message


def launch(fn, world_size, *args, backend=None, timeout=DEFAULT_TIMEOUT, deadline=None, env=None):
    """Run ``fn(*args)`` in ``world_size`` new processes with a process group; return their results.

    Each worker sees ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT`` (as
    under torchrun) and an initialised default process group (``backend`` defaults to
    :func:`dltools.distributed_backend`: ``gloo`` on CPUs, ``nccl`` when there is a GPU per rank).
    ``fn`` must be importable by name (a top-level function of a ``.py`` module): spawned processes
    cannot import functions defined in a notebook.

    The results come back as a list in rank order, so the notebook prints them (output printed by the
    workers themselves goes to the console, which notebook tests do not capture). If a worker raises,
    the others are stopped and :class:`WorkerError` carries the worker's traceback (workers' stderr
    is kept in a file for that and shown only on failure). A collective (and joining the group)
    waits at most ``timeout`` seconds for a peer: a hung peer ends in :class:`WorkerTimeoutError`
    (a ``TimeoutError``). ``deadline`` (seconds, default none) limits the whole run; past it every
    worker is stopped and ``TimeoutError`` is raised. ``env``: extra environment variables.

    >>> from dltools.distributed import rank_info
    >>> [r['rank'] for r in launch(rank_info, 2)]
    [0, 1]
    """
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs, Std, start_processes
    from torch.distributed.elastic.multiprocessing.api import SignalException

    _check_importable(fn)
    _check_world_size(world_size)
    for name, value in (("timeout", timeout), ("deadline", deadline)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or value <= 0):
            raise ValueError(f"{name} must be a positive number of seconds, got {value!r}")
    if timeout is None:
        raise ValueError("timeout must be a positive number of seconds, got None")
    if backend is None:
        backend = "nccl" if num_gpus() >= world_size and distributed_backend() == "nccl" else "gloo"
    if backend == "nccl" and num_gpus() < world_size:
        raise ValueError(f"backend 'nccl' needs one GPU per rank: {world_size} ranks, {num_gpus()} GPUs")

    host = "127.0.0.1"
    # Port 0: the operating system picks a free port, and this process keeps it for the whole run.
    store = dist.TCPStore(host, 0, world_size + 1, is_master=True, wait_for_workers=False,
                          timeout=datetime.timedelta(seconds=timeout))
    threads = str(max(1, (os.cpu_count() or 1) // world_size))
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
                args={r: (fn, args, backend, timeout, host, store.port) for r in range(world_size)},
                envs=envs, start_method="spawn",
                # stderr goes to a file, read back when a worker fails; stdout is left alone.
                logs_specs=DefaultLogsSpecs(log_dir=log_dir, redirects=Std.ERR))
            end = None if deadline is None else time.monotonic() + deadline
            result = None
            while result is None:
                result = ctx.wait(timeout=0.05, period=0.05)
                if result is None and end is not None and time.monotonic() > end:
                    raise TimeoutError(
                        f"{fn.__qualname__} on {world_size} processes did not finish within the "
                        f"deadline of {deadline} s; all workers were stopped.")
        if result.is_failed():
            rank, failure = _first_failure(ctx, store, next(iter(result.failures.values())))
            message, tb = _format_failure(fn, failure, rank, result.stderrs.get(rank, ""))
            error = WorkerError
            first_line = tb.strip().splitlines()[0].lower() if tb.strip() else ""
            if any(word in first_line for word in ("timed out", "timeout")):
                error = WorkerTimeoutError
                message += (f"\nA worker waited more than {timeout} s for its peers: one of them "
                            "is stuck, or never reached the same collective.")
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
    dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def rank_info():
    """Inside a process group: this process's rank, world size, backend and pid (a first worker).

    >>> with single_process_group():
    ...     rank_info()['world_size']
    1
    """
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "backend": dist.get_backend(), "pid": os.getpid()}


def run_in_sequence(calls):
    """Inside a process group: run several ``(function, args)`` pairs in turn; return their results.

    Starting processes costs seconds, so a notebook can do several measurements in one launch.

    >>> with single_process_group():
    ...     [r['rank'] for r in run_in_sequence([(rank_info, ()), (rank_info, ())])]
    [0, 0]
    """
    return [fn(*args) for fn, args in calls]


def raise_on_rank(bad_rank=1, message="something went wrong on this rank"):
    """Inside a process group: rank ``bad_rank`` raises ``ZeroDivisionError``, the others wait at a barrier.

    A worker bug, to see how :func:`launch` reports it.
    """
    if dist.get_rank() == bad_rank:
        raise ZeroDivisionError(f"rank {bad_rank}: {message}")
    dist.barrier()
    return dist.get_rank()


def hang_on_rank(bad_rank=1):
    """Inside a process group: rank ``bad_rank`` sleeps forever, the others wait at a barrier.

    A stuck peer, to see the collectives' timeout end the run.
    """
    if dist.get_rank() == bad_rank:
        while True:
            time.sleep(1)
    dist.barrier()
    return dist.get_rank()


def collectives_demo():
    """Inside a process group: run ``all_reduce``, ``broadcast`` and ``barrier``; return what each gave.

    Rank ``r`` starts with ``r + 1``: the all-reduced sum is ``1 + 2 + ... + N`` on every rank, and
    after ``broadcast`` from rank 0 every rank holds rank 0's tensor.

    >>> [r['all_reduce_sum'] for r in launch(collectives_demo, 2)]     # doctest: +SKIP
    [3.0, 3.0]
    >>> with single_process_group():
    ...     collectives_demo()['all_reduce_sum']
    1.0
    """
    rank, world_size = dist.get_rank(), dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    before = t.item()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    b = torch.tensor([100.0 + rank])
    dist.broadcast(b, src=0)
    dist.barrier()  # nobody gets past this line before everyone has reached it
    return {"rank": rank, "world_size": world_size, "before": before, "all_reduce_sum": t.item(),
            "broadcast_from_0": b.item()}


# ------------------------------------------------------------------ all-reduce from scratch


def _group_ranks(group):
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError("no process group: call this inside a worker started by "
                           "dltools.distributed.launch (or torchrun + dist.init_process_group)")
    rank, world_size = dist.get_rank(group), dist.get_world_size(group)
    to_global = (lambda i: i) if group is None else (lambda i: dist.get_global_rank(group, i))
    return rank, world_size, to_global


def _check_tensor(tensor):
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"expected a torch.Tensor, got {type(tensor).__name__}")


def ring_all_reduce(tensor, group=None):
    """Sum ``tensor`` over all ranks, in place, with the ring algorithm; return it.

    The flattened tensor is cut into ``N`` chunks (``N`` = world size; sizes need not divide evenly).
    **Reduce-scatter**: in ``N - 1`` steps each rank sends one chunk to its right neighbour and adds
    the chunk coming from its left; afterwards rank ``r`` holds the full sum of chunk ``(r + 1) % N``.
    **All-gather**: in ``N - 1`` more steps the finished chunks travel round the ring. Each rank sends
    ``2 (N - 1) / N`` times the tensor's size in total, whatever ``N`` is.

    >>> x = torch.arange(5.0)
    >>> with single_process_group():      # one rank: the sum is the tensor itself
    ...     ring_all_reduce(x)
    tensor([0., 1., 2., 3., 4.])

    With more ranks, see :func:`check_all_reduce` and ``tests/test_distributed.py``.
    """
    _check_tensor(tensor)
    rank, world_size, to_global = _group_ranks(group)
    if world_size == 1 or tensor.numel() == 0:
        return tensor
    flat = tensor.view(-1) if tensor.is_contiguous() else tensor.contiguous().view(-1)
    chunks = list(torch.tensor_split(flat, world_size))  # views into flat, sizes differ by <= 1
    right, left = to_global((rank + 1) % world_size), to_global((rank - 1) % world_size)

    def exchange(send_index, recv_index, accumulate):
        send, recv = chunks[send_index], chunks[recv_index]
        incoming = torch.empty_like(recv) if accumulate else recv
        # isend first, then a blocking recv: every rank does the same, so nobody waits on anybody.
        request = dist.isend(send, right, group=group) if send.numel() else None
        if recv.numel():
            dist.recv(incoming, left, group=group)
        if request is not None:
            request.wait()
        if accumulate and recv.numel():
            recv.add_(incoming)

    for step in range(world_size - 1):        # reduce-scatter
        exchange((rank - step) % world_size, (rank - step - 1) % world_size, accumulate=True)
    for step in range(world_size - 1):        # all-gather
        exchange((rank + 1 - step) % world_size, (rank - step) % world_size, accumulate=False)
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def naive_all_reduce(tensor, group=None):
    """Sum ``tensor`` over all ranks, in place, through rank 0; return it.

    Every rank sends its whole tensor to rank 0, which adds them up and sends the sum back to each
    rank: DataParallel's shape (one master). Rank 0 receives and sends ``N - 1`` full tensors, so its
    traffic grows with the number of ranks.

    >>> with single_process_group():
    ...     naive_all_reduce(torch.ones(3))
    tensor([1., 1., 1.])
    """
    _check_tensor(tensor)
    rank, world_size, to_global = _group_ranks(group)
    if world_size == 1:
        return tensor
    if rank == 0:
        incoming = torch.empty_like(tensor)
        for src in range(1, world_size):     # gather: one full tensor per rank, one after the other
            dist.recv(incoming, to_global(src), group=group)
            tensor.add_(incoming)
        for dst in range(1, world_size):     # broadcast the sum back, again one rank at a time
            dist.send(tensor, to_global(dst), group=group)
    else:
        dist.send(tensor, to_global(0), group=group)
        dist.recv(tensor, to_global(0), group=group)
    return tensor


def ring_traffic_per_rank(num_bytes, world_size):
    """Bytes each rank sends in a ring all-reduce of ``num_bytes``: ``2 (N - 1) / N * num_bytes``.

    >>> ring_traffic_per_rank(100, 2), ring_traffic_per_rank(100, 4), ring_traffic_per_rank(100, 1)
    (100.0, 150.0, 0.0)
    """
    _check_world_size(world_size)
    return 2 * (world_size - 1) / world_size * num_bytes


def naive_traffic_at_root(num_bytes, world_size):
    """Bytes rank 0 receives plus sends in the naive all-reduce: ``2 (N - 1) * num_bytes``.

    >>> naive_traffic_at_root(100, 2), naive_traffic_at_root(100, 4)
    (200, 600)
    """
    _check_world_size(world_size)
    return 2 * (world_size - 1) * num_bytes


def alpha_beta_time(num_bytes, world_size, alpha, beta, algorithm="ring"):
    """Predicted all-reduce time under the alpha-beta model (``alpha`` s per message, ``beta`` s/byte).

    ring: ``2 (N - 1)`` steps, each one message of ``num_bytes / N``:
    ``2 (N - 1) * alpha + 2 (N - 1) / N * num_bytes * beta``.
    naive: rank 0 handles ``2 (N - 1)`` full messages one after the other:
    ``2 (N - 1) * (alpha + num_bytes * beta)``.

    >>> alpha_beta_time(1000, 4, alpha=1e-5, beta=1e-9)
    6.15e-05
    >>> alpha_beta_time(1000, 4, alpha=1e-5, beta=1e-9, algorithm="naive")
    6.6e-05
    """
    _check_world_size(world_size)
    n = world_size
    if algorithm == "ring":
        return 2 * (n - 1) * alpha + ring_traffic_per_rank(num_bytes, n) * beta
    if algorithm == "naive":
        return 2 * (n - 1) * (alpha + num_bytes * beta)
    raise ValueError(f"algorithm must be 'ring' or 'naive', got {algorithm!r}")


def check_all_reduce(sizes, dtype=torch.float32, seed=0):
    """Inside a process group: compare ring and naive all-reduce with ``dist.all_reduce``.

    For each size, every rank makes its own random tensor (seeded by rank), and all three
    algorithms must give the same sum on every rank. Returns, for this rank,
    ``{'rank', 'sizes', 'ring_ok', 'naive_ok', 'max_abs_diff'}``.

    >>> [r['ring_ok'] for r in launch(check_all_reduce, 2, [1, 3])]     # doctest: +SKIP
    [True, True]
    >>> with single_process_group():
    ...     check_all_reduce([1, 3, (2, 2)])['ring_ok']
    True
    """
    rank = dist.get_rank()
    ring_ok, naive_ok, worst = True, True, 0.0
    for size in sizes:
        shape = (size,) if isinstance(size, int) else tuple(size)
        g = torch.Generator().manual_seed(seed + 1000 * rank + math.prod(shape))
        x = (torch.randn(shape, generator=g) * 10).to(dtype)
        expected = x.clone()
        dist.all_reduce(expected)
        ring, naive = ring_all_reduce(x.clone()), naive_all_reduce(x.clone())
        # The algorithms add in different orders: equal up to float rounding.
        tol = dict(rtol=1e-5, atol=1e-5) if dtype.is_floating_point else dict(rtol=0, atol=0)
        ring_ok &= torch.allclose(ring, expected, **tol) and ring.shape == x.shape
        naive_ok &= torch.allclose(naive, expected, **tol) and naive.shape == x.shape
        worst = max(worst, (ring - expected).abs().max().item() if ring.numel() else 0.0)
    return {"rank": rank, "sizes": list(sizes), "ring_ok": bool(ring_ok), "naive_ok": bool(naive_ok),
            "max_abs_diff": worst}


def time_all_reduce(sizes_bytes, repeats=5, algorithms=("builtin", "ring", "naive")):
    """Inside a process group: median seconds of an all-reduce of each size (float32), per algorithm.

    ``builtin`` is ``dist.all_reduce``. Every rank takes part; the result (same on every rank) is
    ``{algorithm: [seconds for each size]}`` with the slowest rank's time for each measurement.

    >>> with single_process_group():
    ...     t = time_all_reduce([4096, 65536], repeats=1)
    >>> sorted(t), len(t['ring'])
    (['builtin', 'naive', 'ring'], 2)
    """
    functions = {"builtin": dist.all_reduce, "ring": ring_all_reduce, "naive": naive_all_reduce}
    unknown = set(algorithms) - set(functions)
    if unknown:
        raise ValueError(f"unknown algorithms {sorted(unknown)}; choose from {sorted(functions)}")
    times = {name: [] for name in algorithms}
    for num_bytes in sizes_bytes:
        x = torch.ones(max(1, int(num_bytes) // 4))
        for name in algorithms:
            functions[name](x)  # warm-up: first use sets up connections and buffers
            samples = []
            for _ in range(repeats):
                dist.barrier()
                start = time.perf_counter()
                functions[name](x)
                elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64)
                dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
                samples.append(elapsed.item())
            times[name].append(sorted(samples)[len(samples) // 2])
            x.fill_(1.0)  # keep the values small: repeated sums would overflow to inf
    return times


# ------------------------------------------------------------------ torchrun


def run_torchrun(script, nproc, *script_args, report=True, nnodes=1, timeout=600, env=None):
    """Run ``script`` with ``python -m torch.distributed.run --standalone --nproc_per_node=nproc``.

    Fails loudly: a non-zero exit raises :class:`TorchrunError` with the end of the output (unlike
    ``!torchrun`` in a notebook, which carries on after "command not found"). ``OMP_NUM_THREADS`` is
    set (cores / processes) so torchrun does not warn. With ``report=True`` the script gets
    ``--report PATH`` appended, rank 0 writes a JSON file there, and that dict is returned with the
    run's output under ``'log'``; otherwise the output (stdout and stderr together) is returned.
    After ``timeout`` seconds the whole process group of torchrun and its workers is stopped.

    >>> import os, tempfile; path = os.path.join(tempfile.mkdtemp(), 'hello.py')
    >>> _ = open(path, 'w').write("import os; print('rank', os.environ['RANK'])")
    >>> sorted(run_torchrun(path, 2, report=False).split())
    ['0', '1', 'rank', 'rank']
    """
    script = Path(script)
    if not script.is_file():
        raise FileNotFoundError(f"no such script: {script}")
    _check_world_size(nproc)
    if nnodes != 1:
        raise ValueError("run_torchrun starts one node (--standalone); run the other nodes' torchrun "
                         "yourself (see scripts/slurm_ddp.sbatch)")
    tmp = tempfile.mkdtemp(prefix="dltools_torchrun_")
    report_path = Path(tmp) / "report.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nnodes={nnodes}",
           f"--nproc_per_node={nproc}", str(script), *map(str, script_args)]
    if report:
        cmd += ["--report", str(report_path)]
    child_env = {**os.environ, **(env or {})}
    child_env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // nproc)))
    # Its own session: on a timeout, torchrun and all its workers are stopped together.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=child_env, start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=timeout)
    except BaseException:
        _kill_session(proc)
        raise
    finally:
        _kill_session(proc)  # also whatever torchrun left in its session
    try:
        if proc.returncode != 0:
            raise TorchrunError(proc.returncode, cmd, output=output)
        if not report:
            return output
        if not report_path.is_file():
            raise RuntimeError(f"{script.name} exited normally but rank 0 wrote no report to "
                               f"{report_path}; its output:\n{output}")
        result = json.loads(report_path.read_text())
        result["log"] = output
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _kill_session(proc):
    for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
