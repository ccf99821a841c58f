"""Distributed training, the part to read: all-reduce written from scratch, what it costs, and
small worker functions that show the collectives.

``ring_all_reduce`` and ``naive_all_reduce`` are the two textbook all-reduce algorithms, written
with point-to-point sends and receives; ``alpha_beta_time`` is their cost model;
``check_all_reduce`` and ``time_all_reduce`` compare them with ``dist.all_reduce`` inside a process
group. The functions marked "inside a process group" are worker functions: run them with
:func:`launch`, e.g. ``launch(collectives_demo, 2)``.

The machinery (starting workers, failures, ``torchrun``) lives in :mod:`dltools.launch`, the
device rule (``rank_device``, ``backend_for``) in :mod:`dltools.devices`; their names are
importable from here too.
"""
import math
import os
import time

import torch
import torch.distributed as dist

from .devices import backend_for, rank_device
from .launch import (
    DEFAULT_TIMEOUT,
    TorchrunError,
    WorkerError,
    WorkerTimeoutError,
    captured_stderr,
    launch,
    run_torchrun,
    setup_process_group,
    single_process_group,
    threads_per_process,
)
from .timing import synchronize
from .traffic import collective_bytes

__all__ = ["ring_all_reduce", "naive_all_reduce", "ring_traffic_per_rank",
           "naive_traffic_at_root", "ring_messages", "alpha_beta_time", "simulate_all_reduce",
           "count_ring_sends", "check_all_reduce", "time_all_reduce",
           "collectives_demo", "rank_info", "run_in_sequence", "raise_on_rank", "hang_on_rank",
           # from dltools.launch:
           "launch", "run_torchrun", "captured_stderr", "WorkerError", "WorkerTimeoutError",
           "TorchrunError",
           "single_process_group", "setup_process_group", "threads_per_process",
           "DEFAULT_TIMEOUT",
           # from dltools.devices:
           "rank_device", "backend_for"]


# ------------------------------------------------------------------ all-reduce from scratch


PIECE_NUMEL = 65536  # elements per piece of a reduce-scatter message (256 KB of float32)


def ring_all_reduce(tensor, group=None):
    """Sum ``tensor`` over all ranks, in place, with the ring algorithm; return it.

    The flattened tensor is cut into ``N`` chunks (``N`` = world size; sizes need not divide
    evenly). **Reduce-scatter**: in ``N - 1`` steps each rank sends one chunk to its right
    neighbour and adds the chunk coming from its left; afterwards rank ``r`` holds the full sum of
    chunk ``(r + 1) % N``. **All-gather**: in ``N - 1`` more steps the finished chunks travel round
    the ring. Each rank sends ``2 (N - 1) / N`` times the tensor's size in total, whatever ``N`` is.

    In the reduce-scatter a large chunk travels in pieces of up to 8 (each at least
    :data:`PIECE_NUMEL` elements), and each piece is added as soon as it has arrived, while the next
    ones are still on the wire: the additions overlap the communication instead of following it,
    as in gloo's and NCCL's rings.

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
        # Send right and receive from the left at the same time. In the reduce-scatter the
        # chunks travel in pieces, each added as soon as it has arrived, while the next pieces
        # are still on their way; the all-gather receives whole chunks straight into place.
        cut = _pieces if accumulate else _whole
        incoming = torch.empty_like(recv) if accumulate else recv
        ops = ([dist.P2POp(dist.isend, piece, right, group) for piece in cut(send)]
               + [dist.P2POp(dist.irecv, piece, left, group) for piece in cut(incoming)])
        for arrived, target in zip(_arrivals(ops), cut(recv), strict=True):
            if accumulate:
                target.add_(arrived)

    for step in range(world_size - 1):        # reduce-scatter
        exchange((rank - step) % world_size, (rank - step - 1) % world_size, accumulate=True)
    for step in range(world_size - 1):        # all-gather
        exchange((rank + 1 - step) % world_size, (rank - step) % world_size, accumulate=False)
    if flat.data_ptr() != tensor.data_ptr() or not tensor.is_contiguous():
        tensor.copy_(flat.view_as(tensor))
    return tensor


def _pieces(chunk):
    """``chunk`` cut into up to 8 pieces of at least ``PIECE_NUMEL`` elements (none if empty).

    The sender and the receiver of a chunk hold chunks of the same size, so they cut the same
    pieces.
    """
    count = _piece_count(chunk.numel())
    return torch.tensor_split(chunk, count) if count else ()


def _piece_count(numel):
    """How many pieces :func:`_pieces` cuts a chunk of ``numel`` elements into."""
    return min(8, max(1, numel // PIECE_NUMEL)) if numel else 0


def _whole(chunk):
    return (chunk,) if chunk.numel() else ()


def _arrivals(ops):
    """Post every send and receive of ``ops`` (sends first) at once; yield each received tensor
    when it has arrived, in order; finish when the sends are done too (so run it to the end).

    ``batch_isend_irecv`` posts them all before any wait, so no rank waits for another to finish
    sending first. gloo returns one request per operation, so each piece can be used as soon as it
    has arrived; NCCL returns one request for the whole batch.
    """
    if not ops:
        return
    requests = dist.batch_isend_irecv(ops)
    received = [op.tensor for op in ops if op.op is dist.irecv]
    if len(requests) != len(ops):
        for request in requests:
            request.wait()
        yield from received
        return
    sends = len(ops) - len(received)
    for request, tensor in zip(requests[sends:], received):
        request.wait()      # wait on each request once: a second wait can hang in gloo
        yield tensor
    for request in requests[:sends]:
        request.wait()


def naive_all_reduce(tensor, group=None):
    """Sum ``tensor`` over all ranks, in place, through rank 0; return it.

    Every rank sends its whole tensor to rank 0, which adds them up and sends the sum back to each
    rank: DataParallel's shape (one master). Rank 0 receives and sends ``N - 1`` full tensors, so
    its traffic grows with the number of ranks.

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


# ------------------------------------------------------------------ what they cost


def ring_traffic_per_rank(num_bytes, world_size):
    """Bytes each rank sends in a ring all-reduce of ``num_bytes``: ``2 (N - 1) / N * num_bytes``.

    (From :func:`dltools.traffic.collective_bytes`, which has every collective's volumes.)

    >>> ring_traffic_per_rank(100, 2), ring_traffic_per_rank(100, 4), ring_traffic_per_rank(100, 1)
    (100, 150, 0)
    """
    return collective_bytes("all_reduce", num_bytes, world_size)["sent_per_rank"]


def naive_traffic_at_root(num_bytes, world_size):
    """Bytes rank 0 receives plus sends in the naive all-reduce: ``2 (N - 1) * num_bytes``.

    >>> naive_traffic_at_root(100, 2), naive_traffic_at_root(100, 4)
    (200, 600)
    """
    volumes = collective_bytes("naive_all_reduce", num_bytes, world_size)
    return volumes["root_received"] + volumes["root_sent"]


def _chunk_numels(num_bytes, world_size):
    """Elements of each chunk of a float32 tensor of ``num_bytes`` cut by ``torch.tensor_split``."""
    numel = max(1, int(num_bytes) // 4)
    return [numel // world_size + (1 if r < numel % world_size else 0) for r in range(world_size)]


def ring_messages(num_bytes, world_size):
    """Messages the busiest rank sends in :func:`ring_all_reduce` of a float32 tensor of
    ``num_bytes``: one per piece in each reduce-scatter step (up to 8 for a large chunk), one per
    chunk in each all-gather step. The textbook ring sends ``2 (N - 1)``.

    >>> ring_messages(4_000, 4), ring_messages(2**24, 4)   # 16 MB: 3 steps of 8 pieces, then 3
    (6, 27)
    """
    n = world_size
    if n < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}")
    sizes = _chunk_numels(num_bytes, n)
    return max(sum(_piece_count(sizes[(r - s) % n]) + (1 if sizes[(r + 1 - s) % n] else 0)
                   for s in range(n - 1)) for r in range(n))


def alpha_beta_time(num_bytes, world_size, alpha, beta, algorithm="ring"):
    """Predicted all-reduce time in the alpha-beta model (``alpha`` s per message, ``beta`` s/byte).

    ring: ``2 (N - 1)`` steps, each sending ``num_bytes / N`` while as much is received, in
    :func:`ring_messages` messages (a large reduce-scatter chunk travels in pieces):
    ``ring_messages * alpha + 2 (N - 1) / N * num_bytes * beta`` (for a tensor of at least ``N``
    elements; a smaller one leaves chunks empty, see :func:`simulate_all_reduce`).
    naive: rank 0 handles ``2 (N - 1)`` full messages one after the other:
    ``2 (N - 1) * (alpha + num_bytes * beta)``.

    >>> alpha_beta_time(1000, 4, alpha=1e-5, beta=1e-9)
    6.15e-05
    >>> alpha_beta_time(1000, 4, alpha=1e-5, beta=1e-9, algorithm="naive")
    6.6e-05
    """
    n = world_size
    if algorithm == "ring":
        return ring_messages(num_bytes, n) * alpha + ring_traffic_per_rank(num_bytes, n) * beta
    if algorithm == "naive":
        return 2 * (n - 1) * alpha + naive_traffic_at_root(num_bytes, n) * beta
    raise ValueError(f"algorithm must be 'ring' or 'naive', got {algorithm!r}")


def simulate_all_reduce(algorithm, num_bytes, world_size, alpha, beta, piece_bytes=2**20):
    """Seconds an all-reduce of a float32 tensor of ``num_bytes`` takes on a **simulated**
    network, where every rank has its own full-duplex link: one message at a time out, one at a
    time in, each taking ``alpha + bytes * beta``. Nothing is sent: the messages of each
    algorithm are replayed, in their order, on that network (an event simulation).

    - ``"ring"``, :func:`ring_all_reduce`: each step, every rank sends its chunk (in pieces, as
      the real one) to its right neighbour; a rank starts a step when it and its neighbour have
      finished the previous one.
    - ``"naive"``, :func:`naive_all_reduce`: rank 0 receives the ``N - 1`` tensors one after
      another on its one link, then sends the sum back the same way.
    - ``"chain"``, DataParallel's way with NCCL: the gradients are reduced along the chain
      ``1 -> 2 -> ... -> N-1 -> 0`` in pieces of ``piece_bytes`` (each rank adds its own and passes
      a piece on as soon as it has it), then the parameters are broadcast along
      ``0 -> 1 -> ... -> N-1`` the same way, once the reduce is complete.

    >>> round(simulate_all_reduce("ring", 4_000, 4, alpha=1e-5, beta=1e-9), 9)   # 6 x 1000 B
    6.6e-05
    >>> round(simulate_all_reduce("naive", 4_000, 4, alpha=1e-5, beta=1e-9), 9)  # 6 x 4000 B
    8.4e-05
    """
    n = world_size
    if algorithm not in ("ring", "naive", "chain"):
        raise ValueError(f"algorithm must be 'ring', 'naive' or 'chain', got {algorithm!r}")
    if n < 1 or alpha < 0 or beta < 0 or piece_bytes < 4:
        raise ValueError(f"need world_size >= 1, alpha, beta >= 0 and piece_bytes >= 4; got "
                         f"{world_size}, {alpha}, {beta}, {piece_bytes}")
    out_free, in_free = [0.0] * n, [0.0] * n     # when each rank's link is free, each way

    def send(src, dst, size, ready):
        start = max(ready, out_free[src], in_free[dst])
        out_free[src] = in_free[dst] = start + alpha + size * beta
        return out_free[src]

    if n == 1:
        return 0.0
    size = max(1, int(num_bytes) // 4) * 4
    if algorithm == "naive":
        gathered = max(send(r, 0, size, 0.0) for r in range(1, n))
        return max(send(0, r, size, gathered) for r in range(1, n))
    if algorithm == "chain":
        count = -(-size // int(piece_bytes))
        pieces = [size // 4 // count * 4] * count
        pieces[-1] += size - sum(pieces)
        reduced = 0.0
        for piece in pieces:                      # reduce: 1 -> 2 -> ... -> N-1 -> 0
            arrived = 0.0
            for src in range(1, n):
                arrived = send(src, (src + 1) % n, piece, arrived)
            reduced = max(reduced, arrived)
        done = reduced
        for piece in pieces:                      # broadcast: 0 -> 1 -> ... -> N-1
            arrived = reduced
            for src in range(n - 1):
                arrived = send(src, src + 1, piece, arrived)
            done = max(done, arrived)
        return done
    sizes = _chunk_numels(num_bytes, n)
    done = [0.0] * n                              # when each rank finished its previous step
    for phase in ("reduce-scatter", "all-gather"):
        for s in range(n - 1):
            finished = list(done)
            for r in range(n):
                numel = sizes[(r - s) % n] if phase == "reduce-scatter" else sizes[(r + 1 - s) % n]
                pieces = _piece_count(numel) if phase == "reduce-scatter" else int(numel > 0)
                ready = max(done[r], done[(r + 1) % n])
                for i in range(pieces):
                    piece = numel // pieces + (1 if i < numel % pieces else 0)
                    end = send(r, (r + 1) % n, piece * 4, ready)
                    finished[r] = max(finished[r], end)
                    finished[(r + 1) % n] = max(finished[(r + 1) % n], end)
            done = finished
    return max(done)


# ------------------------------------------------------------------ worker functions


def count_ring_sends(num_bytes):
    """Inside a process group: run :func:`ring_all_reduce` on a float32 tensor of ``num_bytes``
    and count what this rank really posted: ``{"messages": ..., "bytes": ...}`` (every
    ``isend``, recorded as it is made).

    >>> with single_process_group():      # one rank sends nothing
    ...     count_ring_sends(4000)
    {'messages': 0, 'bytes': 0}
    """
    sent = []

    class Recorded(dist.P2POp):
        def __init__(self, op, tensor, *args, **kwargs):
            if op is dist.isend:
                sent.append(tensor.numel() * tensor.element_size())
            super().__init__(op, tensor, *args, **kwargs)

    real, dist.P2POp = dist.P2POp, Recorded
    try:
        ring_all_reduce(torch.ones(max(1, int(num_bytes) // 4), device=rank_device()))
    finally:
        dist.P2POp = real
    return {"messages": len(sent), "bytes": sum(sent)}


def rank_info():
    """Inside a process group: this process's rank, world size, backend, device and pid.

    >>> with single_process_group():
    ...     rank_info()['world_size']
    1
    """
    return {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "backend": dist.get_backend(), "device": str(rank_device()), "pid": os.getpid()}


def run_in_sequence(calls):
    """Inside a process group: run several ``(function, args)`` pairs in turn; return their results.

    Starting processes costs seconds, so a notebook can do several measurements in one launch.

    >>> with single_process_group():
    ...     [r['rank'] for r in run_in_sequence([(rank_info, ()), (rank_info, ())])]
    [0, 0]
    """
    return [fn(*args) for fn, args in calls]


def collectives_demo():
    """Inside a process group: ``all_reduce``, ``broadcast`` and ``barrier``; return what each gave.

    Rank ``r`` starts with ``r + 1``: the all-reduced sum is ``1 + 2 + ... + N`` on every rank, and
    after ``broadcast`` from rank 0 every rank holds rank 0's tensor. The tensors live on the
    rank's device (:func:`rank_device`), as every tensor of a collective should.

    >>> with single_process_group():
    ...     collectives_demo()['all_reduce_sum']
    1.0
    """
    rank, world_size, device = dist.get_rank(), dist.get_world_size(), rank_device()
    t = torch.tensor([float(rank + 1)], device=device)
    before = t.item()
    dist.all_reduce(t, op=dist.ReduceOp.SUM)
    b = torch.tensor([100.0 + rank], device=device)
    dist.broadcast(b, src=0)
    dist.barrier()  # nobody gets past this line before everyone has reached it
    return {"rank": rank, "world_size": world_size, "before": before, "all_reduce_sum": t.item(),
            "broadcast_from_0": b.item()}


def raise_on_rank(bad_rank=1, message="something went wrong on this rank"):
    """Inside a process group: rank ``bad_rank`` raises ``ZeroDivisionError``, the others wait at a
    barrier.

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


def check_all_reduce(sizes, dtype=torch.float32, seed=0):
    """Inside a process group: compare ring and naive all-reduce with ``dist.all_reduce``.

    For each size, every rank makes its own random tensor (seeded by rank) on its device, and all
    three algorithms must give the same sum on every rank. Returns, for this rank,
    ``{'rank', 'sizes', 'ring_ok', 'naive_ok', 'max_abs_diff'}``.

    >>> with single_process_group():
    ...     check_all_reduce([1, 3, (2, 2)])['ring_ok']
    True
    """
    rank, device = dist.get_rank(), rank_device()
    ring_ok, naive_ok, worst = True, True, 0.0
    for size in sizes:
        shape = (size,) if isinstance(size, int) else tuple(size)
        g = torch.Generator().manual_seed(seed + 1000 * rank + math.prod(shape))
        x = (torch.randn(shape, generator=g) * 10).to(dtype).to(device)
        expected = x.clone()
        dist.all_reduce(expected)
        ring, naive = ring_all_reduce(x.clone()), naive_all_reduce(x.clone())
        # The algorithms add in different orders: equal up to float rounding.
        tol = dict(rtol=1e-5, atol=1e-5) if dtype.is_floating_point else dict(rtol=0, atol=0)
        ring_ok &= torch.allclose(ring, expected, **tol) and ring.shape == x.shape
        naive_ok &= torch.allclose(naive, expected, **tol) and naive.shape == x.shape
        worst = max(worst, (ring - expected).abs().max().item() if ring.numel() else 0.0)
    return {"rank": rank, "sizes": list(sizes), "ring_ok": bool(ring_ok),
            "naive_ok": bool(naive_ok), "max_abs_diff": worst}


def time_all_reduce(sizes_bytes, repeats=5, algorithms=("builtin", "ring", "naive"),
                    keep_samples=False):
    """Inside a process group: median seconds of an all-reduce of each size (float32), by algorithm.

    ``builtin`` is ``dist.all_reduce``. The algorithms take turns within each repeat (builtin,
    ring, naive, builtin, ...), so a slow moment of the machine hits them alike. Each time is the
    slowest rank's (every call starts after a barrier). The result, the same on every rank, is
    ``{algorithm: [median seconds for each size]}``; with ``keep_samples``, every repeat's time
    instead, ``{algorithm: [[seconds of each repeat] for each size]}``, in the order they ran, so
    that the k-th samples of two algorithms were taken side by side.

    >>> with single_process_group():
    ...     t = time_all_reduce([4096, 65536], repeats=1)
    >>> sorted(t), len(t['ring'])
    (['builtin', 'naive', 'ring'], 2)
    """
    functions = {"builtin": dist.all_reduce, "ring": ring_all_reduce, "naive": naive_all_reduce}
    unknown = set(algorithms) - set(functions)
    if unknown:
        raise ValueError(f"unknown algorithms {sorted(unknown)}; choose from {sorted(functions)}")
    device = rank_device()
    times = {name: [] for name in algorithms}
    for num_bytes in sizes_bytes:
        x = torch.ones(max(1, int(num_bytes) // 4), device=device)
        samples = {name: [] for name in algorithms}
        for name in algorithms:
            functions[name](x)  # warm-up: first use sets up connections and buffers
        for _ in range(repeats):
            for name in algorithms:
                x.fill_(1.0)  # keep the values small: repeated sums would overflow to inf
                samples[name].append(_slowest_rank_seconds(functions[name], x))
        for name in algorithms:
            times[name].append(samples[name] if keep_samples
                               else sorted(samples[name])[len(samples[name]) // 2])
    return times


def _slowest_rank_seconds(all_reduce, x):
    synchronize(x.device)
    dist.barrier()
    start = time.perf_counter()
    all_reduce(x)
    synchronize(x.device)  # on a GPU the call returns before the work is done
    elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=x.device)
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    return elapsed.item()
