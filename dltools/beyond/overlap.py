"""When does an all-gather hide behind compute? The alpha-beta model, measured in one run.

FSDP2 can all-gather the next block's parameters while the current block computes: on a GPU it
does (its all-gathers run on their own CUDA stream while the CPU queues kernels ahead); under gloo
on a CPU it waits for each gather before the block runs. The gather costs nothing when it takes
no longer than the compute beside it. :func:`overlap_run` measures, on every rank of a process
group and in the same run:

- the time of an all-gather for several sizes ``S`` (bytes of the gathered tensor), to fit
  notebook 03's model ``t = (N - 1) * alpha + (N - 1) / N * S * beta`` (:func:`fit_alpha_beta`:
  ``alpha`` seconds per message, ``beta`` seconds per byte, a ring's N - 1 messages);
- the time of one block's forward for several numbers of rows per rank, to fit
  ``t = t0 + rows * c`` (:func:`fit_cost`); :func:`crossing` finds the rows from which it
  outlasts a gather;
- the time of the gather of one block's parameters started with ``async_op=True`` while the
  block's forward runs, then waited for, as an explicit prefetch would: what overlapping really
  gives on this machine.

Each time is the best of ``repeats`` tries (the noise of a busy machine only adds time), and the
slowest rank's (a collective ends when its last rank does). Timings depend on the machine: they
are printed, never asserted.
"""
import time

import torch
import torch.distributed as dist

from ..devices import rank_device
from ..stats import fit_costs
from ..timing import synchronize
from .memory import CollectiveBytes
from .model import Block

__all__ = ["crossing", "fit_alpha_beta", "fit_cost", "overlap_run"]


def _timed(fn, repeats, device):
    """Fewest seconds of ``fn()`` in ``repeats`` tries (after one untimed try), the slowest
    rank's; every rank calls it."""
    fn()
    times = []
    for _ in range(repeats):
        synchronize(device)
        dist.barrier()
        start = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - start)
    slowest = torch.tensor([min(times)], dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return float(slowest)


def fit_cost(units, seconds):
    """``(fixed, per_unit)``, both at least 0, of ``seconds = fixed + per_unit * units``
    (:func:`dltools.stats.fit_costs`: least squares on relative errors, as notebook 03 fits).

    >>> [round(v, 9) for v in fit_cost([1, 2, 4], [3.0, 5.0, 9.0])]
    [1.0, 2.0]
    """
    fixed, per_unit = fit_costs([[1.0] * len(units), units], seconds)
    return fixed, per_unit


def fit_alpha_beta(sizes, seconds, world_size):
    """``(alpha, beta)``, seconds per message and per byte, of notebook 03's ring model for an
    all-gather, ``t = (N - 1) * alpha + (N - 1) / N * S * beta``, fitted (:func:`fit_cost`) to
    all-gathers of ``sizes`` bytes (the gathered tensor) that took ``seconds``.

    >>> a, b = fit_alpha_beta([1000, 2000], [1e-3 + 500e-9, 1e-3 + 1000e-9], 2)
    >>> round(a, 9), round(b, 15)
    (0.001, 1e-09)
    """
    n = world_size
    alpha, beta = fit_costs([[n - 1] * len(sizes), [(n - 1) / n * s for s in sizes]], seconds)
    return alpha, beta


def crossing(rows, seconds, target):
    """The number of rows at which ``seconds`` (measured at each of the increasing ``rows``)
    first reach ``target``, interpolated linearly between the two measurements around it:
    ``rows[0]`` when the first already does, ``None`` when none does.

    >>> crossing([10, 20, 40], [1.0, 2.0, 4.0], 3.0), crossing([10, 20], [1.0, 2.0], 0.5)
    (30.0, 10.0)
    >>> crossing([10, 20], [1.0, 2.0], 5.0) is None
    True
    """
    if seconds[0] >= target:
        return float(rows[0])
    for r0, s0, r1, s1 in zip(rows, seconds, rows[1:], seconds[1:]):
        if s1 >= target:
            return r0 + (target - s0) / (s1 - s0) * (r1 - r0)
    return None


def overlap_run(width=64, sizes=(2**12, 2**14, 2**16, 2**18, 2**20, 2**22),
                rows=(16, 64, 256, 1024, 4096), repeats=10):
    """Time all-gathers, one :class:`~dltools.beyond.model.Block`'s forward and both overlapped,
    on every rank of the process group; returns the slowest rank's times (the same on every
    rank): ``gather_s`` for each of ``sizes`` (bytes gathered), ``forward_s`` and
    ``overlapped_s`` for each of ``rows`` (rows per rank), ``block_gather_s`` (the gather of one
    block's parameters alone), with ``block_bytes``, ``matmul_params`` (the weights a row is
    multiplied by: 2 FLOPs each), and ``counted`` and ``calls`` (the bytes and the calls
    :class:`CollectiveBytes` saw for the block's gather).
    """
    world, device = dist.get_world_size(), rank_device()
    block = Block(width).to(device)
    flat = torch.cat([p.detach().reshape(-1) for p in block.parameters()])
    block_bytes = flat.numel() * flat.element_size()
    if flat.numel() % world:
        raise ValueError(f"a block of width {width} has {flat.numel()} parameters, not divisible "
                         f"by {world} ranks: pick a width divisible by the number of ranks")
    shard = flat.chunk(world)[dist.get_rank()].clone()

    def gather(n_bytes):
        local = torch.ones(n_bytes // 4 // world, device=device)
        out = torch.empty(local.numel() * world, device=device)
        return lambda: dist.all_gather_into_tensor(out, local)

    gather_s = [_timed(gather(s), repeats, device) for s in sizes]
    whole = torch.empty_like(flat)
    with CollectiveBytes() as seen:
        dist.all_gather_into_tensor(whole, shard)
    block_gather_s = _timed(lambda: dist.all_gather_into_tensor(whole, shard), repeats, device)

    forward_s, overlapped_s = [], []
    for n in rows:
        x = torch.randn(n, width, device=device)
        forward_s.append(_timed(lambda: block(x), repeats, device))

        def both():
            work = dist.all_gather_into_tensor(whole, shard, async_op=True)
            block(x)   # runs while the gather travels, as FSDP2 prefetches the next block
            work.wait()
        overlapped_s.append(_timed(both, repeats, device))
    return {"world_size": world, "width": width, "sizes": list(sizes), "gather_s": gather_s,
            "rows": list(rows), "forward_s": forward_s, "overlapped_s": overlapped_s,
            "block_bytes": block_bytes, "block_gather_s": block_gather_s,
            "counted": dict(seen.nbytes), "calls": dict(seen.counts),
            "matmul_params": sum(m.weight.numel() for m in (block.up, block.down))}
