"""Tests of dltools.distributed and dltools.launch: the device rule, the launcher, its failure
paths, and the from-scratch all-reduce.

Each launch starts real processes (a few seconds each), so the checks are grouped into few launches.
"""
import contextlib
import datetime
import inspect
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from dltools import distributed as dd
from dltools import launch as launch_module
from support.processes import assert_no_process_left, descendants, gone

# The last two are cut into pieces (2 to 8 per chunk, uneven) by the ring's pipelined exchange.
CHECK_SIZES = [1, 2, 3, 4, 5, 7, 64, 1000, 1001, (3, 5), (2, 3, 7), 393221, 2097159]


@pytest.fixture(autouse=True, scope="module")
def no_process_left_after_module():
    yield
    assert_no_process_left()


def subgroup_ring(sizes):
    """Worker: ring all-reduce inside the group of ranks 1..N-1 (rank 0 sits out)."""
    ranks = list(range(1, dist.get_world_size()))
    group = dist.new_group(ranks)
    if dist.get_rank() not in ranks:
        return True
    ok = True
    for size in sizes:
        x = torch.full((size,), float(dist.get_rank()))
        dd.ring_all_reduce(x, group=group)
        ok &= bool(torch.all(x == sum(ranks)))
    return ok


def torch_threads():
    """Worker: how many threads torch uses in this worker."""
    return torch.get_num_threads()


def visible_gpus():
    """Worker: what CUDA_VISIBLE_DEVICES this worker was given."""
    return os.environ.get("CUDA_VISIBLE_DEVICES")


# ------------------------------------------------------------------ the device rule


def fake_gpus(monkeypatch, count):
    """Pretend the machine has ``count`` GPUs; return the list that ``set_device`` appends to."""
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    return current


def local(monkeypatch, rank, size):
    monkeypatch.setenv("LOCAL_RANK", str(rank))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(size))


@pytest.mark.parametrize("gpus, local_rank, local_world_size, expected", [
    (4, 2, 4, torch.device("cuda", 2)),     # a GPU per local process: its own
    (8, 1, 2, torch.device("cuda", 1)),     # more GPUs than processes: still cuda:LOCAL_RANK
    (1, 0, 2, torch.device("cpu")),         # 1 GPU, 2 processes: all on the CPU, rank 0 too
    (3, 2, 4, torch.device("cpu")),
    (0, 0, 1, torch.device("cpu")),
])
def test_rank_device_follows_the_rule(monkeypatch, gpus, local_rank, local_world_size, expected):
    current = fake_gpus(monkeypatch, gpus)
    local(monkeypatch, local_rank, local_world_size)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dd.rank_device() == expected
    assert current == ([expected] if expected.type == "cuda" else [])  # set_device on GPUs only
    # GPUs left unused because there are too few of them: said, never silent
    unused = 0 < gpus < local_world_size
    assert [str(w.message) for w in caught if "every rank runs on the CPU" in str(w.message)] == (
        [f"{gpus} GPU(s) for {local_world_size} processes on this node: every rank runs on the "
         f"CPU (gloo). Start one process per GPU (--nproc_per_node={gpus}) to use them."]
        if unused else [])


def test_rank_device_refuses_an_impossible_local_rank(monkeypatch):
    fake_gpus(monkeypatch, 2)
    local(monkeypatch, 2, 2)
    with pytest.raises(ValueError, match="LOCAL_RANK=2"):
        dd.rank_device()


def test_backend_takes_cpu_tensors_too(monkeypatch):
    config = dist.distributed_c10d.BackendConfig
    fake_gpus(monkeypatch, 2)
    # What torch makes of the string: gloo for CPU tensors, NCCL for CUDA ones.
    assert config(dd.backend_for(torch.device("cuda", 0))).get_device_backend_map() == {
        "cpu": "gloo", "cuda": "nccl"}
    assert config(dd.backend_for(torch.device("cpu"))).get_device_backend_map()["cpu"] == "gloo"
    monkeypatch.setattr(dist, "is_nccl_available", lambda: False)
    with pytest.raises(RuntimeError, match="no NCCL"):
        dd.backend_for("cuda:0")


@pytest.mark.parametrize("gpus, backend, device_id", [
    (2, "cpu:gloo,cuda:nccl", torch.device("cuda", 1)),
    (1, "gloo", None),
])
def test_launch_workers_join_the_group_by_the_rule(monkeypatch, gpus, backend, device_id):
    """launch's worker body, in this process, on pretend GPUs: the group it asks torch for."""
    fake_gpus(monkeypatch, gpus)
    local(monkeypatch, 1, 2)
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    joined = []
    monkeypatch.setattr(dist, "init_process_group", lambda b, **kw: joined.append((b, kw)))
    monkeypatch.setattr(dist, "destroy_process_group", lambda: None)
    monkeypatch.setattr(launch_module, "exit_with_parent", lambda parent: None)   # not pytest's
    store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, wait_for_workers=False)
    with warnings.catch_warnings(record=True) as caught:  # 1 GPU, 2 processes: said, not silent
        warnings.simplefilter("always")
        device = launch_module._worker(dd.rank_device, (), None, 5, "127.0.0.1", store.port,
                                       os.getppid())
    assert any("every rank runs on the CPU" in str(w.message) for w in caught) == (gpus == 1)
    assert device == (device_id or torch.device("cpu"))
    [(asked, options)] = joined
    assert asked == backend and options["device_id"] == device_id
    assert (options["rank"], options["world_size"]) == (1, 2)
    assert options["timeout"] == datetime.timedelta(seconds=5)


# ------------------------------------------------------------------ launch + all-reduce


MESSAGE_SIZES = [4, 40, 4_000, 2**21]   # bytes; 2 MB: reduce-scatter chunks travel in pieces


@pytest.mark.parametrize("world_size", [2, 3, 4])
def test_ring_and_naive_match_builtin_all_reduce(world_size):
    calls = [(dd.rank_info, ()), (dd.collectives_demo, ()), (dd.check_all_reduce, (CHECK_SIZES,)),
             (dd.check_all_reduce, (CHECK_SIZES, torch.int64)), (subgroup_ring, ([1, 5, 10],)),
             (dd.time_all_reduce, ([64, 4096], 2)),
             *[(dd.count_ring_sends, (b,)) for b in MESSAGE_SIZES]]
    results = dd.launch(dd.run_in_sequence, world_size, calls)
    assert len(results) == world_size
    # The cost model counts the messages the ring really sends (its busiest rank's), and the bytes.
    counted = [[r[6 + i] for r in results] for i in range(len(MESSAGE_SIZES))]
    for num_bytes, ranks in zip(MESSAGE_SIZES, counted):
        assert max(c["messages"] for c in ranks) == dd.ring_messages(num_bytes, world_size)
        numel = max(1, num_bytes // 4)
        assert sum(c["bytes"] for c in ranks) == 2 * (world_size - 1) * numel * 4
    assert max(c["messages"] for c in counted[-1]) > 2 * (world_size - 1)   # pieces: > 2 (N - 1)
    for rank, (info, demo, floats, ints, subgroup, times, *_) in enumerate(results):
        assert info["rank"] == rank and info["world_size"] == world_size  # rank order
        if not torch.cuda.is_available():
            assert (info["backend"], info["device"]) == ("gloo", "cpu")
        assert demo["all_reduce_sum"] == world_size * (world_size + 1) / 2
        assert demo["broadcast_from_0"] == 100.0
        assert floats["ring_ok"] and floats["naive_ok"], floats
        assert ints["ring_ok"] and ints["naive_ok"] and ints["max_abs_diff"] == 0, ints
        assert subgroup
        assert times == results[0][5]  # every rank reports the slowest rank's times
        assert all(len(t) == 2 and min(t) > 0 for t in times.values())
    assert len({info["pid"] for info, *_ in results}) == world_size  # really separate processes
    assert_no_process_left()


def test_simulated_network_replays_the_algorithms():
    alpha, beta, size = 5e-6, 1e-10, 100e6
    # The pipelined chain: each phase takes (pieces + N - 2) piece-times, pieces of 1 MiB.
    pieces = -(-int(size) // 2**20)
    for n in (2, 5, 16):
        piece_time = alpha + size / pieces * beta
        assert dd.simulate_all_reduce("chain", size, n, alpha, beta) == pytest.approx(
            2 * (pieces + n - 2) * piece_time, rel=1e-3)
    # Every algorithm moves about 2 (N - 1) S in all; spread over the links, ring and chain stay
    # near 2 S beta, the root's link makes the naive one grow as N - 1.
    at32 = {a: dd.simulate_all_reduce(a, size, 32, alpha, beta) for a in ("ring", "chain", "naive")}
    assert at32["ring"] < at32["chain"] < 3 * size * beta < at32["naive"] / 10
    for n in (2, 3, 4, 8, 16):
        for algorithm in ("ring", "naive"):   # the event simulation agrees with the closed form
            simulated = dd.simulate_all_reduce(algorithm, size, n, alpha, beta)
            assert simulated == pytest.approx(dd.alpha_beta_time(size, n, alpha, beta, algorithm),
                                              rel=1e-6), (algorithm, n)
    ring = [dd.simulate_all_reduce("ring", size, n, alpha, beta) for n in (2, 32)]
    naive = [dd.simulate_all_reduce("naive", size, n, alpha, beta) for n in (2, 32)]
    assert ring[1] < 2.2 * ring[0] and ring[1] < 2 * size * beta * 1.1   # bounded: < 2 S beta
    assert naive[1] > 30 * naive[0]                                        # N - 1 times
    # Uneven chunks: a step lasts as long as its largest chunk, never shorter than the average.
    assert dd.simulate_all_reduce("ring", 4 * 1001, 4, 0.0, 1.0) == 6 * 4 * 251
    assert dd.simulate_all_reduce("ring", 40, 1, 1.0, 1.0) == 0.0
    # One element on 4 ranks: no rank sends more than 2 messages, but the one non-empty chunk
    # still makes 6 hops, one after the other (the closed form holds from N elements on).
    assert dd.ring_messages(4, 4) == 2 and dd.simulate_all_reduce("ring", 4, 4, 1.0, 0.0) == 6
    for bad in ({"algorithm": "tree"}, {"world_size": 0}, {"alpha": -1.0}, {"piece_bytes": 0}):
        args = {"algorithm": "ring", "num_bytes": 8, "world_size": 2, "alpha": 0.0, "beta": 0.0}
        with pytest.raises(ValueError):
            dd.simulate_all_reduce(**{**args, **bad})


def test_ring_all_reduce_is_in_place_and_keeps_shape():
    with dd.single_process_group():
        x = torch.arange(6.0).reshape(2, 3)
        assert dd.ring_all_reduce(x) is x
        y = torch.arange(6.0).reshape(3, 2).t()  # not contiguous
        assert torch.equal(dd.ring_all_reduce(y), torch.arange(6.0).reshape(3, 2).t())


def test_all_reduce_needs_a_process_group_and_a_tensor():
    with pytest.raises(RuntimeError, match="no process group"):
        dd.ring_all_reduce(torch.ones(3))
    with pytest.raises(RuntimeError, match="no process group"):
        dd.naive_all_reduce(torch.ones(3))
    with dd.single_process_group():
        with pytest.raises(TypeError, match="torch.Tensor"):
            dd.ring_all_reduce([1.0, 2.0])
        with pytest.raises(ValueError, match="unknown algorithms"):
            dd.time_all_reduce([4], algorithms=("tree",))


def test_traffic_formulas():
    assert dd.ring_traffic_per_rank(800, 8) == 1400
    assert dd.naive_traffic_at_root(800, 8) == 11200
    for n in range(1, 100):  # the ring's volume per rank stays below twice the tensor
        assert dd.ring_traffic_per_rank(1.0, n) < 2
    assert dd.alpha_beta_time(16_000, 4, alpha=1.0, beta=0.0) == 6  # 2 (N - 1) latencies
    # A 16 MB tensor: each reduce-scatter chunk (1 M elements) travels in 8 pieces: 3 x 8 + 3.
    assert dd.alpha_beta_time(2**24, 4, alpha=1.0, beta=0.0) == 27
    # Bandwidth terms: the ring moves 2(N-1)/N of the tensor per rank, the naive root 2(N-1) x it.
    assert dd.alpha_beta_time(1000, 4, alpha=0.0, beta=1.0) == 1500
    assert dd.alpha_beta_time(1000, 4, alpha=0.0, beta=1.0, algorithm="naive") == 6000
    with pytest.raises(ValueError, match="'ring' or 'naive'"):
        dd.alpha_beta_time(10, 2, 1e-5, 1e-9, algorithm="tree")
    with pytest.raises(ValueError, match="world_size"):
        dd.ring_traffic_per_rank(10, 0)


# ------------------------------------------------------------------ bad input


def test_launch_rejects_functions_workers_cannot_import(monkeypatch):
    with pytest.raises(ValueError, match="lambda"):
        dd.launch(lambda: 1, 2)

    def local():
        return 1
    with pytest.raises(ValueError, match="inside other functions"):
        dd.launch(local, 2)

    # A function defined in a notebook: module __main__, and that module has no file.
    namespace = {"__name__": "__main__"}
    exec("def from_notebook():\n    return 1", namespace)
    monkeypatch.setitem(sys.modules, "__main__", type(sys)("__main__"))
    with pytest.raises(ValueError, match="notebook"):
        dd.launch(namespace["from_notebook"], 2)
    with pytest.raises(TypeError, match="must be a function"):
        dd.launch(42, 2)
    assert descendants() == []  # refused before starting anything


@pytest.mark.parametrize("world_size, error", [(0, ValueError), (-1, ValueError), ("2", TypeError),
                                               (True, TypeError), (2.0, TypeError)])
def test_launch_rejects_bad_world_size(world_size, error):
    with pytest.raises(error, match="world_size"):
        dd.launch(dd.rank_info, world_size)


def test_launch_rejects_bad_timeouts_and_nccl_without_gpus():
    with pytest.raises(ValueError, match="timeout"):
        dd.launch(dd.rank_info, 2, timeout=0)
    with pytest.raises(ValueError, match="deadline"):
        dd.launch(dd.rank_info, 2, deadline=-1)
    if torch.cuda.device_count() < 2:
        with pytest.raises(ValueError, match="one GPU per rank"):
            dd.launch(dd.rank_info, 2, backend="nccl")


def test_launch_workers_do_not_oversubscribe_the_cores():
    # OMP_NUM_THREADS reaches the workers after torch is imported: launch must apply it itself.
    assert dd.launch(torch_threads, 2) == [dd.threads_per_process(2)] * 2
    assert dd.launch(torch_threads, 1, env={"OMP_NUM_THREADS": "1"}) == [1]


def sum_then_leave():
    """A worker that ends as those of PyTorch's DDP tutorial do: it leaves the group itself."""
    t = torch.ones(1)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.item()


def test_a_worker_may_leave_the_group_itself():
    assert dd.launch(sum_then_leave, 2) == [2.0, 2.0]
    assert_no_process_left()


def start_a_child_then_raise(pid_file):
    """A worker that starts a long subprocess, then fails."""
    import subprocess
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    Path(pid_file).write_text(str(child.pid))
    raise RuntimeError("failed after starting a subprocess")


def pid_writing_script(tmp_path):
    """A torchrun script whose ranks write their pids to ``tmp_path/pid<RANK>``, then wait."""
    return write_script(tmp_path, textwrap.dedent(f"""\
        import os, time
        open(os.path.join({str(tmp_path)!r}, "pid" + os.environ["RANK"]), "w").write(
            str(os.getpid()))
        while True:
            time.sleep(1)
        """))


def worker_pids(tmp_path, nproc=2):
    return [int((tmp_path / f"pid{r}").read_text()) for r in range(nproc)]


def test_what_a_failed_worker_started_does_not_outlive_it(tmp_path):
    with pytest.raises(dd.WorkerError, match="failed after starting a subprocess"):
        dd.launch(start_a_child_then_raise, 1, str(tmp_path / "pid"))
    assert gone([int((tmp_path / "pid").read_text())])
    assert_no_process_left()


def leave_a_pool(pid_file, fail):
    """A worker that leaves a multiprocessing pool busy, then raises or returns."""
    import multiprocessing
    pool = multiprocessing.get_context("fork").Pool(2)
    pool.apply_async(time.sleep, (120,))
    Path(pid_file).write_text(" ".join(str(p.pid) for p in pool._pool))
    time.sleep(0.5)
    if fail:
        raise RuntimeError("failed after starting a pool")
    return "returned"


@pytest.mark.parametrize("fail", [True, False], ids=["raises", "returns"])
def test_a_pool_a_worker_left_does_not_hang_it(tmp_path, fail):
    """Sweep 3 (O4): the pool's workers killed, multiprocessing's clean-up of the pool at the
    worker's exit waited forever for a lock a dead one held; launch ran to its deadline and
    blamed a loop. The worker now terminates such pools first: the learner's error (or result)
    comes back at once, and nothing is left."""
    start = time.monotonic()
    if fail:
        with pytest.raises(dd.WorkerError, match="failed after starting a pool"):
            dd.launch(leave_a_pool, 1, str(tmp_path / "pid"), fail, deadline=60)
    else:
        assert dd.launch(leave_a_pool, 1, str(tmp_path / "pid"), fail, deadline=60) == \
            ["returned"]
    assert time.monotonic() - start < 30
    assert gone([int(pid) for pid in (tmp_path / "pid").read_text().split()])
    assert_no_process_left()


@pytest.mark.parametrize("value", [lambda x: x, (i for i in range(2)), threading.Lock()],
                         ids=["lambda", "generator", "lock"])
def test_an_argument_the_workers_cannot_receive_is_named_before_starting(value):
    """Sweep 3 (S5, S6a): multiprocessing's bare "cannot pickle 'generator' object" from deep
    inside the start of the workers."""
    with pytest.raises(ValueError, match=r"argument 2 of dltools\.distributed\.rank_info \(\w+\) "
                                         r"cannot be sent to the worker processes"):
        dd.launch(dd.rank_info, 2, 1, value)
    assert_no_process_left()


def leave_a_thread_running():
    """A worker whose function returns with a thread (not a daemon) still running."""
    import threading
    threading.Thread(target=time.sleep, args=(120,), name="learners_thread").start()
    return dist.get_rank()


def test_a_worker_that_cannot_end_after_returning_does_not_hang_launch(monkeypatch):
    """Sweep 3 (O4b): once every rank had returned, torch's poll waited with no limit for the
    worker processes to end, past launch's deadline; a thread the function left running kept
    one alive for ever. The results now come back, the process is stopped, and a warning
    says why."""
    monkeypatch.setattr(launch_module, "EXIT_GRACE", 2)
    start = time.monotonic()
    with pytest.warns(RuntimeWarning, match=r"rank\(s\) \[0, 1\] .* returned, but their "
                                            r"processes did not end within 2 s"):
        assert dd.launch(leave_a_thread_running, 2, deadline=60) == [0, 1]
    assert time.monotonic() - start < 30
    assert_no_process_left()


def init_the_group_again():
    """A worker written as PyTorch's DDP tutorial's are: it makes its own process group."""
    dist.init_process_group("gloo")
    return dist.get_rank()


def test_a_worker_that_makes_the_group_itself_is_told_launch_made_it():
    """Sweep 3 (E9): torch's "trying to initialize the default process group twice!" alone."""
    with pytest.raises(dd.WorkerError, match="launch made the process group before calling it: "
                                             "remove that call"):
        dd.launch(init_the_group_again, 2)
    assert_no_process_left()


def start_a_daemon_then_return(pid_file):
    """A worker whose subprocess outlives its parent shell (``sh -c "... &"``): an orphan."""
    import subprocess
    subprocess.run(["sh", "-c", f"sleep 120 & echo $! > {pid_file}"], check=True)
    return 1


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a Linux-only guarantee")
def test_an_orphan_a_worker_started_does_not_outlive_it(tmp_path):
    # The shell exits at once: without the worker as its subreaper, sleep would go to init.
    assert dd.launch(start_a_daemon_then_return, 1, str(tmp_path / "pid")) == [1]
    assert gone([int((tmp_path / "pid").read_text())])
    assert_no_process_left()


def interrupted():
    raise KeyboardInterrupt


def exits_quietly():
    os._exit(0)


@pytest.mark.parametrize("worker, says", [
    (interrupted, "raised KeyboardInterrupt on rank"),
    (exits_quietly, "ended (exit code 0) without returning"),
])
def test_a_worker_that_ends_without_a_result_is_reported_at_once(worker, says):
    start = time.monotonic()
    with pytest.raises(dd.WorkerError) as info:
        dd.launch(worker, 2, deadline=120)
    assert says in str(info.value)
    assert time.monotonic() - start < 100   # not a timing claim: it did not wait out the deadline
    assert_no_process_left()


@pytest.mark.parametrize("name", ["timeout", "deadline"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_launch_refuses_a_time_that_is_not_a_number(name, value):
    with pytest.raises(ValueError, match=f"{name} must be a positive number"):
        dd.launch(dd.rank_info, 2, **{name: value})


@pytest.mark.parametrize("watch", ["prctl", "guard"])
def test_torchrun_stops_when_the_notebook_dies(tmp_path, watch):
    """A kernel restart kills the notebook's process (SIGKILL after 2.5 s): torchrun, started by
    run_torchrun, gets the parent-death signal (Linux) or is stopped by dltools.guard (macOS,
    Windows; tried here on Linux too), and its workers stop."""
    import signal
    import subprocess

    import psutil
    script = pid_writing_script(tmp_path)
    kernel = subprocess.Popen([sys.executable, "-c", "import sys; import dltools.launch as L; "
                               f"L.PARENT_WATCH = {watch!r}; "
                               "L.run_torchrun(sys.argv[1], 2, report=False)", str(script)])
    end = time.monotonic() + 60
    while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
        assert time.monotonic() < end and kernel.poll() is None, "torchrun did not start"
        time.sleep(0.2)
    started = [p.pid for p in psutil.Process(kernel.pid).children(recursive=True)]
    workers = worker_pids(tmp_path)
    assert set(workers) <= set(started)
    kernel.send_signal(signal.SIGKILL)
    kernel.wait()
    assert gone(started, wait=30), [p for p in started if psutil.pid_exists(p)]


def sleep_in_a_loop_that_swallows_interrupts(pid_file):
    """A learner's worker whose loop catches everything, KeyboardInterrupt included."""
    Path(f"{pid_file}{os.environ['RANK']}").write_text(str(os.getpid()))
    end = time.monotonic() + 120
    while time.monotonic() < end:
        try:
            time.sleep(0.2)
        except:  # noqa: E722 - the point of the test
            pass


def _marked(mark):
    import psutil
    found = []
    for process in psutil.process_iter():
        try:
            if process.environ().get("DP_TEST_MARK") == mark:
                found.append(process.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


@pytest.mark.parametrize("when", ["while the workers start", "while a worker swallows Ctrl-C"])
def test_launch_workers_end_with_a_launcher_killed_outright(tmp_path, when):
    """Sweep 3 (K8, K9, K11): a notebook kernel killed as launch's workers were starting, or while
    a worker's bare except swallowed torch's parent-death signal (SIGINT), left the workers
    running. Each worker now has its own parent-death signal (SIGTERM), set first thing, and
    checks that the launcher is still its parent."""
    import signal
    import subprocess
    import uuid
    mark = uuid.uuid4().hex
    code = ("import sys, test_distributed as t, dltools.launch as L\n"
            "if __name__ == '__main__':\n"
            "    L.launch(t.sleep_in_a_loop_that_swallows_interrupts, 2, sys.argv[1],"
            " deadline=300)\n")
    script = tmp_path / "kernel.py"
    script.write_text(code)
    env = {**os.environ, "DP_TEST_MARK": mark, "PYTHONPATH": os.pathsep.join(
        [str(Path(__file__).parent), *filter(None, [os.environ.get("PYTHONPATH")])])}
    kernel = subprocess.Popen([sys.executable, str(script), str(tmp_path / "pid")], env=env)
    end = time.monotonic() + 60
    if when == "while the workers start":
        while not set(_marked(mark)) - {kernel.pid}:   # spawned, not yet running the function
            assert time.monotonic() < end and kernel.poll() is None, "no worker started"
            time.sleep(0.05)
    else:
        while not all((tmp_path / f"pid{r}").exists() for r in range(2)):
            assert time.monotonic() < end and kernel.poll() is None, "the workers did not start"
            time.sleep(0.2)
    kernel.send_signal(signal.SIGKILL)
    kernel.wait()
    end = time.monotonic() + 30
    while _marked(mark) and time.monotonic() < end:
        time.sleep(0.2)
    left = _marked(mark)
    for pid in left:   # do not leave them to the rest of the suite
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left


def test_launch_with_gloo_hides_the_gpus():
    assert dd.launch(visible_gpus, 2, backend="gloo") == ["", ""]
    assert_no_process_left()


def test_single_process_group_refuses_to_nest():
    with dd.single_process_group():
        with pytest.raises(RuntimeError, match="already exists"):
            with dd.single_process_group():
                pass
    assert not dist.is_initialized()


# ------------------------------------------------------------------ failures


def test_worker_exception_reaches_the_caller_with_its_traceback():
    with pytest.raises(dd.WorkerError) as info:
        dd.launch(dd.raise_on_rank, 2, 1, "bad batch")
    err = info.value
    assert err.rank == 1  # the rank that failed first, not rank 0 that lost its peer
    assert "ZeroDivisionError: rank 1: bad batch" in str(err)
    assert "raise_on_rank" in err.worker_traceback  # the worker's own stack
    assert not isinstance(err, TimeoutError)
    assert_no_process_left()


def exit_on_rank_1(how):
    """Rank 1 ends without a Python exception (or by sys.exit); rank 0 waits at a barrier."""
    if dist.get_rank() == 1:
        if how == "os._exit":
            os._exit(7)
        if how == "segfault":
            import ctypes
            ctypes.string_at(0)
        if how == "sys.exit":
            sys.exit(3)
    dist.barrier()
    return dist.get_rank()


@pytest.mark.parametrize("how, says", [
    ("os._exit", "exited with code 7 without a Python exception"),
    ("segfault", "killed by signal SIGSEGV: a crash in native code"),
    ("sys.exit", "called sys.exit(3) on rank 1"),
])
def test_a_worker_that_dies_is_named_with_its_cause(how, says):
    # Rank 0 then fails too (its peer is gone, and the launcher stops it with SIGTERM): the error
    # must name rank 1 and why it ended, not rank 0's SIGTERM.
    with pytest.raises(dd.WorkerError) as info:
        dd.launch(exit_on_rank_1, 2, how)
    assert info.value.rank == 1
    assert f"worker rank 1 of {__name__}.exit_on_rank_1" in str(info.value)
    assert says in str(info.value)
    assert "SIGTERM" not in str(info.value)
    assert_no_process_left()


def mismatched_all_reduce():
    t = torch.ones(3 if dist.get_rank() == 0 else 5)
    dist.all_reduce(t)
    return t


def test_mismatched_collective_sizes_name_the_crash_and_gloos_reason():
    with pytest.raises(dd.WorkerError) as info:
        dd.launch(mismatched_all_reduce, 2)
    message = str(info.value)
    assert "killed by signal SIGABRT: a crash in native code" in message
    assert "collective mismatch" in message   # gloo's own words, from the worker's stderr
    assert_no_process_left()


def barrier_on_rank_1_only():
    if dist.get_rank() == 1:
        dist.barrier()
    return dist.get_rank()


def test_a_rank_that_returned_while_a_peer_waits_is_named():
    with pytest.raises(dd.WorkerError) as info:
        dd.launch(barrier_on_rank_1_only, 2)
    assert info.value.rank == 1
    assert "Rank(s) [0] had already returned while rank 1 waited" in str(info.value)
    assert_no_process_left()


def return_a_lock():
    import threading
    return threading.Lock()


def test_a_result_that_cannot_be_sent_back_is_named():
    with pytest.raises(dd.WorkerError, match="returned lock, which cannot be pickled"):
        dd.launch(return_a_lock, 2)
    assert_no_process_left()


def test_launch_refuses_a_function_of_a_script_read_from_stdin():
    code = textwrap.dedent("""
        from dltools import distributed as dd
        def work():
            return 1
        if __name__ == "__main__":
            try:
                dd.launch(work, 2)
            except ValueError as err:
                print(err)
    """)
    out = subprocess.run([sys.executable, "-"], input=code, capture_output=True, text=True,
                         timeout=120, cwd=Path(__file__).parents[1])
    assert "read from standard input" in out.stdout, out.stdout + out.stderr


def test_launch_has_a_deadline_by_default():
    # A notebook cell that launches a worker stuck in a loop must end: by default within the
    # notebook tests' cell timeout (600 s). test_deadline_stops_a_run_that_never_ends shows a
    # deadline stops such a run.
    deadline = inspect.signature(dd.launch).parameters["deadline"].default
    assert deadline is not None and 0 < deadline <= 600


def test_busy_default_port_does_not_matter(monkeypatch):
    busy = socket.socket()
    try:
        try:
            busy.bind(("127.0.0.1", 29500))
            busy.listen()
        except OSError:
            pass  # something else holds it already: busy either way
        monkeypatch.setenv("MASTER_PORT", "29500")
        monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
        infos = dd.launch(dd.rank_info, 2)
    finally:
        busy.close()
    assert [i["rank"] for i in infos] == [0, 1]
    assert_no_process_left()


def test_hung_peer_ends_in_a_timeout_error():
    start = time.monotonic()
    with pytest.raises(dd.WorkerTimeoutError) as info:
        dd.launch(dd.hang_on_rank, 2, 1, timeout=5)
    assert isinstance(info.value, TimeoutError)
    assert "waited more than 5 s" in str(info.value)
    assert info.value.rank == 0  # the rank that gave up waiting
    assert "Rank(s) [1] had neither returned nor raised" in str(info.value)  # the stuck one
    assert time.monotonic() - start < 300  # not a timing claim: only "it did not hang"
    assert_no_process_left()


def test_a_timeout_names_the_stuck_rank_not_only_the_one_that_gave_up():
    with pytest.raises(dd.WorkerTimeoutError) as info:
        dd.launch(dd.hang_on_rank, 3, 2, timeout=5)
    assert info.value.rank in (0, 1)
    assert "had neither returned nor raised" in str(info.value)
    assert "2]" in str(info.value).split("had neither returned")[0]  # rank 2 is named
    assert_no_process_left()


def test_deadline_stops_a_run_that_never_ends():
    with pytest.raises(TimeoutError, match="deadline of 3 s"):
        dd.launch(dd.hang_on_rank, 1, 0, deadline=3)
    assert_no_process_left()


# ------------------------------------------------------------------ run_torchrun


def write_script(tmp_path, body):
    path = tmp_path / "script.py"
    path.write_text(textwrap.dedent(body))
    return path


def test_run_torchrun_returns_rank_0_report(tmp_path):
    script = write_script(tmp_path, """
        import argparse, json, os
        parser = argparse.ArgumentParser()
        parser.add_argument("--report")
        parser.add_argument("word")
        args = parser.parse_args()
        # one write (PIPE_BUF-atomic) per line: print's separate pieces interleave across ranks
        # when Python runs unbuffered (PYTHONUNBUFFERED, as on CI)
        os.write(1, ("rank %s threads %s\\n" % (os.environ["RANK"],
                                               os.environ["OMP_NUM_THREADS"])).encode())
        if os.environ["RANK"] == "0":
            report = {"world": int(os.environ["WORLD_SIZE"]), "word": args.word}
            json.dump(report, open(args.report, "w"))
        """)
    report = dd.run_torchrun(script, 2, "hello")
    assert report["world"] == 2 and report["word"] == "hello"
    assert "rank 0" in report["log"] and "rank 1" in report["log"]
    assert "OMP_NUM_THREADS" not in report["log"].replace("threads", "")  # no torchrun warning
    assert_no_process_left()


def test_run_torchrun_fails_loudly(tmp_path):
    script = write_script(tmp_path, """
        import os
        if os.environ["RANK"] == "1":
            raise ValueError("worker 1 is broken")
        """)
    with pytest.raises(dd.TorchrunError) as info:
        dd.run_torchrun(script, 2, report=False)
    assert info.value.returncode != 0
    assert "worker 1 is broken" in str(info.value)
    with pytest.raises(FileNotFoundError, match="no such script"):
        dd.run_torchrun(tmp_path / "missing.py", 2)
    with pytest.raises(ValueError, match="standalone"):
        dd.run_torchrun(script, 2, nnodes=2)
    assert_no_process_left()


def test_run_torchrun_names_its_own_arguments_and_a_broken_report(tmp_path):
    script = write_script(tmp_path, "print('hi')")
    with pytest.raises(ValueError, match="nproc must be at least 1"):
        dd.run_torchrun(script, 0)
    broken = write_script(tmp_path, textwrap.dedent("""\
        import os, sys
        if os.environ["RANK"] == "0":
            open(sys.argv[sys.argv.index("--report") + 1], "w").write("{not json")
        """))
    with pytest.raises(RuntimeError, match="rank 0's report at .* is not valid JSON"):
        dd.run_torchrun(broken, 1)


def test_far_more_processes_than_the_machine_runs_are_refused_at_once(tmp_path, monkeypatch):
    """launch(fn, 64) on 2 cores spent the whole 600 s deadline starting workers (a sweep's hang):
    both entry points now refuse before starting anything, and say how many to use."""
    import psutil

    class Memory:
        available = 64e9

    monkeypatch.setattr(launch_module, "usable_cores", lambda: 2)
    monkeypatch.setattr(launch_module, "num_gpus", lambda: 0)
    monkeypatch.setattr(psutil, "virtual_memory", lambda: Memory)
    assert launch_module.max_processes() == 8           # 4 per core, at least 8
    script = write_script(tmp_path, "print('hi')")
    start = time.monotonic()
    with pytest.raises(ValueError, match=r"world_size 64 .*\(2 CPU cores.* Use at most 8;"):
        dd.launch(dd.rank_info, 64)
    with pytest.raises(ValueError, match=r"nproc 9 .* Use at most 8;"):
        dd.run_torchrun(script, 9, report=False)
    assert time.monotonic() - start < 5
    assert_no_process_left()
    monkeypatch.setattr(launch_module, "usable_cores", lambda: 16)
    assert launch_module.max_processes() == 64
    monkeypatch.setattr(launch_module, "num_gpus", lambda: 80)
    assert launch_module.max_processes() == 80           # one per GPU on a large GPU machine
    Memory.available = 1e9                                # 0.3 GB each: 3 fit
    assert launch_module.max_processes() == 3
    with pytest.raises(ValueError, match=r"world_size 4 .* 1\.0 GB of free memory.* at most 3;"):
        dd.launch(dd.rank_info, 4)


def test_run_torchrun_complains_when_no_report_is_written(tmp_path):
    script = write_script(tmp_path, "import sys\n")
    with pytest.raises(RuntimeError, match="wrote no report"):
        dd.run_torchrun(script, 1)


def test_run_torchrun_kills_workers_a_killed_torchrun_left_behind(tmp_path, monkeypatch):
    """torchrun starts its workers in sessions of their own: if torchrun dies before stopping them
    (here: SIGKILLed at once), they must not survive it as orphans."""
    import signal
    import subprocess
    script = pid_writing_script(tmp_path)

    def kill_at_once(proc):  # a torchrun that gets no chance to stop its workers
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        proc.wait()

    monkeypatch.setattr(launch_module, "_kill_session", kill_at_once)
    with pytest.raises(subprocess.TimeoutExpired):
        dd.run_torchrun(script, 2, report=False, timeout=15)
    pids = worker_pids(tmp_path)
    assert gone(pids, wait=10), pids


def test_run_torchrun_stops_its_workers_where_there_are_no_sessions(tmp_path, monkeypatch):
    """As on Windows: no os.killpg, terminate() kills at once (TerminateProcess), and torchrun is
    started through dltools.guard; on a timeout its workers are found and killed all the same."""
    import subprocess
    monkeypatch.setattr(launch_module, "PARENT_WATCH", "guard")
    monkeypatch.delattr(os, "killpg")
    monkeypatch.setattr(subprocess.Popen, "terminate", subprocess.Popen.kill)
    script = pid_writing_script(tmp_path)
    with pytest.raises(subprocess.TimeoutExpired):
        dd.run_torchrun(script, 2, report=False, timeout=15)
    # orphaned workers are no longer this process's descendants: look them up by pid
    assert gone(worker_pids(tmp_path))
    assert_no_process_left()


def test_run_torchrun_through_the_guard_reports_and_fails_as_without_it(tmp_path, monkeypatch):
    """Where there is no parent-death signal, torchrun runs under dltools.guard: rank 0's report,
    torchrun's output and a failing rank's exit code and message come through it unchanged."""
    monkeypatch.setattr(launch_module, "PARENT_WATCH", "guard")
    script = write_script(tmp_path, """
        import argparse, json, os
        parser = argparse.ArgumentParser()
        parser.add_argument("--report")
        args = parser.parse_args()
        if os.environ["RANK"] == "1" and os.environ.get("FAIL"):
            raise ValueError("worker 1 is broken")
        if os.environ["RANK"] == "0":
            json.dump({"world": int(os.environ["WORLD_SIZE"])}, open(args.report, "w"))
        """)
    assert dd.run_torchrun(script, 2)["world"] == 2
    with pytest.raises(dd.TorchrunError) as info:
        dd.run_torchrun(script, 2, env={"FAIL": "1"})
    assert info.value.returncode == 1 and "worker 1 is broken" in str(info.value)
    assert_no_process_left()


def test_run_torchrun_timeout_stops_torchrun_and_its_workers(tmp_path):
    script = write_script(tmp_path, "import time\nwhile True:\n    time.sleep(1)\n")
    import subprocess
    with pytest.raises(subprocess.TimeoutExpired):
        dd.run_torchrun(script, 2, report=False, timeout=8)
    assert_no_process_left()


@pytest.mark.parametrize("gpus", [0, 1, 4])
def test_rank_device_cpu_puts_every_rank_on_the_cpu_without_a_warning(monkeypatch, gpus):
    current = fake_gpus(monkeypatch, gpus)
    local(monkeypatch, 1, 2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dd.rank_device("cpu") == torch.device("cpu")
    assert current == []  # no GPU made current


@pytest.mark.parametrize("gpus", [0, 1])
def test_rank_device_cuda_refuses_to_fall_back(monkeypatch, gpus):
    fake_gpus(monkeypatch, gpus)
    local(monkeypatch, 0, 2)
    with pytest.raises(RuntimeError, match=f"{gpus} GPU\\(s\\) for 2 processes"):
        dd.rank_device("cuda")


def test_rank_device_cuda_with_a_gpu_per_process(monkeypatch):
    current = fake_gpus(monkeypatch, 2)
    local(monkeypatch, 1, 2)
    assert dd.rank_device("cuda") == torch.device("cuda", 1)
    assert current == [torch.device("cuda", 1)]


def test_rank_device_refuses_an_unknown_device_type(monkeypatch):
    local(monkeypatch, 0, 1)
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        dd.rank_device("gpu")


def test_a_script_that_launches_without_a_main_guard_is_told_so(tmp_path):
    """Each spawned worker imports the calling script again; without `if __name__ ==
    "__main__":` it launches too, and multiprocessing stops it before it could say why (sweep 2,
    E4: the message blamed os._exit or native code)."""
    (tmp_path / "work.py").write_text("def ok():\n    return 1\n")
    script = tmp_path / "unguarded.py"
    script.write_text(textwrap.dedent(f"""\
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import work
        from dltools.distributed import launch
        launch(work.ok, 2)
        """))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         timeout=120, cwd=tmp_path)
    assert out.returncode != 0 and 'put the call under `if __name__ == "__main__":`' in out.stderr
    assert_no_process_left()
