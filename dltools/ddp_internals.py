"""What ``DistributedDataParallel`` does inside ``backward()``, shown on real processes.

Worker functions for notebook 03, run with :func:`dltools.distributed.launch` (each one runs inside
an initialised process group and returns plain Python data to the notebook):

* :func:`bucket_log` trains a few steps with a communication hook that records every all-reduce
  DDP launches (which bucket, how many bytes, which parameters), for a given ``bucket_cap_mb``;
* :func:`no_sync_log` counts the all-reduces of gradient accumulation with and without
  ``no_sync()``;
* :func:`unused_parameters_log` shows the error DDP raises for a parameter that gets no gradient,
  and that ``find_unused_parameters=True`` removes it;
* :func:`checkpoint_roundtrip` saves on rank 0 and loads on every rank, as PyTorch's DDP tutorial
  does;
* :func:`internals_demo` runs all of them in one launch (each launch costs seconds);
* :func:`run_source` runs a function given as source code (the exercise checks use it).

The notebook prints :class:`AllReduceLog` and :func:`logged_all_reduce`: that is the code to read.
"""
import os
import tempfile
import textwrap
from collections import OrderedDict

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from .devices import rank_device

__all__ = ["AllReduceLog", "logged_all_reduce", "demo_model", "wrap_ddp", "bucket_log",
           "no_sync_log", "unused_parameters_log", "checkpoint_roundtrip", "internals_demo",
           "run_source"]


class AllReduceLog:
    """State of :func:`logged_all_reduce`: what happened, in order, tagged with the current step."""

    def __init__(self, model):
        self.names = {p: name for name, p in model.named_parameters()}
        self.step = 0
        self.events = []    # in the order they happened (bucket_log also logs gradients)

    def all_reduces(self):
        return [e for e in self.events if e["what"] == "all_reduce"]


def logged_all_reduce(log, bucket):
    """A DDP communication hook: average the bucket over the ranks as DDP does, and log the call."""
    buffer = bucket.buffer()                    # this bucket's gradients, flattened into one tensor
    log.events.append({"what": "all_reduce", "step": log.step, "index": bucket.index(),
                       "bytes": buffer.numel() * buffer.element_size(),
                       "params": [log.names[p] for p in bucket.parameters()]})
    buffer.div_(dist.get_world_size())          # the hook must average: DDP does not divide for it
    future = dist.all_reduce(buffer, async_op=True).get_future()
    return future.then(lambda fut: fut.value()[0])   # DDP copies this tensor back into the .grads


def demo_model(seed=0):
    """An MLP with about 2.6 MB of float32 parameters: more than DDP's 1 MiB first bucket.

    >>> sum(p.numel() for p in demo_model().parameters()) * 4
    2648104
    """
    torch.manual_seed(seed)
    return nn.Sequential(OrderedDict([
        ("fc1", nn.Linear(256, 512)), ("relu1", nn.ReLU()),
        ("fc2", nn.Linear(512, 512)), ("relu2", nn.ReLU()),
        ("fc3", nn.Linear(512, 512)), ("relu3", nn.ReLU()),
        ("fc4", nn.Linear(512, 10))]))


def wrap_ddp(model, **kwargs):
    """Move ``model`` to this rank's device and wrap it in DDP (``device_ids`` only on a GPU)."""
    device = rank_device()
    model = model.to(device)
    return DDP(model, device_ids=[device.index] if device.type == "cuda" else None, **kwargs)


def _loss(model, rank, step, rows=8):
    g = torch.Generator().manual_seed(1000 * step + rank)   # every rank has its own data
    X, y = torch.randn(rows, 256, generator=g), torch.randint(0, 10, (rows,), generator=g)
    device = next(model.parameters()).device
    return nn.functional.cross_entropy(model(X.to(device)), y.to(device))


def bucket_log(bucket_cap_mb=None, steps=3, **ddp_kwargs):
    """Train ``steps`` steps of :func:`demo_model` under DDP with :func:`logged_all_reduce`.

    Besides the all-reduces, the log records when autograd computes each weight's gradient
    (``{'what': 'grad', 'step', 'param'}``), to show which all-reduces start before backward ends.
    ``ddp_kwargs`` go to ``DDP``. Returns ``{'events': [...], 'param_bytes': {name: bytes}}``.
    """
    ddp = wrap_ddp(demo_model(), bucket_cap_mb=bucket_cap_mb, **ddp_kwargs)
    log = AllReduceLog(ddp.module)
    ddp.register_comm_hook(log, logged_all_reduce)
    for name, p in ddp.module.named_parameters():
        if name.endswith("weight"):
            p.register_hook(lambda grad, name=name: log.events.append(
                {"what": "grad", "step": log.step, "param": name}))
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
    for step in range(steps):
        log.step = step
        opt.zero_grad()
        _loss(ddp, dist.get_rank(), step).backward()
        opt.step()
    sizes = {n: p.numel() * p.element_size() for n, p in ddp.module.named_parameters()}
    return {"events": log.events, "param_bytes": sizes}


def no_sync_log(micro_batches=4):
    """Accumulate gradients over ``micro_batches`` micro-batches twice: all-reducing after every
    backward, then inside ``no_sync()`` except for the last one. Returns the number of all-reduces
    of each way and the largest difference between the two accumulated gradients."""
    ddp = wrap_ddp(demo_model())
    log = AllReduceLog(ddp.module)
    ddp.register_comm_hook(log, logged_all_reduce)
    _loss(ddp, dist.get_rank(), -1).backward()   # first step: DDP rebuilds its buckets after it
    rank, grads, counts = dist.get_rank(), {}, {}
    for way in ("every backward", "no_sync"):
        ddp.zero_grad()
        before = len(log.all_reduces())
        for i in range(micro_batches):
            last = i == micro_batches - 1
            if way == "no_sync" and not last:
                with ddp.no_sync():              # forward AND backward inside: no all-reduce
                    _loss(ddp, rank, i).backward()
            else:
                _loss(ddp, rank, i).backward()
        counts[way] = len(log.all_reduces()) - before
        grads[way] = [p.grad.detach().clone() for p in ddp.parameters()]
    diff = max((a - b).abs().max().item()
               for a, b in zip(grads["every backward"], grads["no_sync"]))
    same = all(_same_on_all_ranks(g) for g in grads["no_sync"])
    return {"all_reduces": counts, "buckets_per_step": counts["no_sync"],
            "max_grad_diff": diff, "grads_same_on_all_ranks": same}


def _same_on_all_ranks(tensor):
    """True on every rank when all ranks hold the same values (a collective: all ranks call it)."""
    copies = [torch.empty_like(tensor) for _ in range(dist.get_world_size())]
    dist.all_gather(copies, tensor.detach().contiguous())
    return all(torch.equal(c, copies[0]) for c in copies)


class TwoHeads(nn.Module):
    """Two heads; ``forward`` uses only ``head_a``: ``head_b`` never gets a gradient."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Linear(16, 16)
        self.head_a = nn.Linear(16, 4)
        self.head_b = nn.Linear(16, 4)

    def forward(self, x):
        return self.head_a(torch.relu(self.body(x)))


def unused_parameters_log(steps=2):
    """Train a model with an unused head under DDP, without and with ``find_unused_parameters``.

    Returns ``{'error': the error without it (or None), 'error_step': the step that raised it,
    'first_step_averaged': whether the used parameters' gradients were averaged in the step before,
    'steps_with_flag': steps completed with it, 'unused_grad_is_none': ...}``.
    """
    rank = dist.get_rank()
    result = {"error": None, "error_step": None, "first_step_averaged": None}
    for flag in (False, True):
        ddp = wrap_ddp(TwoHeads(), find_unused_parameters=flag)
        device = next(ddp.parameters()).device
        done = 0
        try:
            for step in range(steps):
                g = torch.Generator().manual_seed(10 * step + rank)
                x, y = torch.randn(4, 16, generator=g), torch.randint(0, 4, (4,), generator=g)
                ddp.zero_grad()
                nn.functional.cross_entropy(ddp(x.to(device)), y.to(device)).backward()
                if not flag and step == 0:
                    result["first_step_averaged"] = _same_on_all_ranks(ddp.module.body.weight.grad)
                done += 1
        except RuntimeError as err:
            if flag:
                raise
            result["error"], result["error_step"] = str(err), done
        if flag:
            result["steps_with_flag"] = done
            result["unused_grad_is_none"] = ddp.module.head_b.weight.grad is None
    return result


def checkpoint_roundtrip(path):
    """Save on rank 0, ``barrier``, load on every rank with ``map_location``, as in PyTorch's
    DDP tutorial. Returns whether this rank's parameters differed from the checkpoint before
    loading and equal it after."""
    rank, device = dist.get_rank(), rank_device()
    ddp = wrap_ddp(demo_model())
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    _loss(ddp, rank, 0).backward()
    opt.step()
    if rank == 0:
        torch.save(ddp.module.state_dict(), path)   # the plain model's keys: no "module." prefix
    dist.barrier()                                   # nobody reads before rank 0 has written
    fresh = demo_model(seed=1 + rank).to(device)     # a different start on every rank
    differed = any(not torch.equal(a, b) for a, b in
                   zip(fresh.state_dict().values(), ddp.module.state_dict().values()))
    state = torch.load(path, map_location=device, weights_only=True)
    fresh.load_state_dict(state)
    equal = all(torch.equal(a, b) for a, b in
                zip(fresh.state_dict().values(), ddp.module.state_dict().values()))
    return {"rank": rank, "differed_before": differed, "equal_after": equal,
            "loaded_to": str(next(iter(state.values())).device)}  # where map_location put it


def internals_demo(checkpoint_path, small_cap_mb=0.25):
    """All the demos above in one process group: ``{'default', 'small_cap', 'find_unused',
    'no_sync', 'unused', 'checkpoint'}``."""
    return {"default": bucket_log(None), "small_cap": bucket_log(small_cap_mb),
            "find_unused": bucket_log(None, steps=2, find_unused_parameters=True),
            "no_sync": no_sync_log(), "unused": unused_parameters_log(),
            "checkpoint": checkpoint_roundtrip(checkpoint_path)}


def run_source(source, name, *args):
    """Define the functions in ``source`` in a fresh namespace and return ``name(*args)``.

    Spawned workers cannot import a function defined in a notebook; its source text travels fine.

    >>> run_source("def double(x):\\n    return 2 * x\\n", "double", 21)
    42
    """
    namespace = {"__name__": "learner_worker"}
    exec(compile(textwrap.dedent(source), "<your worker>", "exec"), namespace)  # noqa: S102
    return namespace[name](*args)



class _Recorded(torch.utils.data.Dataset):
    """A dataset that records the index of every example read from it, in a file: a DataLoader
    with ``num_workers > 0`` reads in worker processes, whose memory the rank never sees."""

    def __init__(self, dataset):
        self.dataset = dataset
        handle, self.path = tempfile.mkstemp(prefix="dltools_reads_", suffix=".txt")
        os.close(handle)

    def __len__(self):
        return len(self.dataset)

    def __getitem__(self, index):
        with open(self.path, "a") as reads:   # one short append per read: whole lines
            reads.write(f"{int(index)}\n")
        return self.dataset[index]

    @property
    def seen(self):
        with open(self.path) as reads:
            return [int(line) for line in reads.read().split()]


def run_worker_for_check(source, name, dataset, *args):
    """``run_source`` for an exercise check: returns ``(result, indices read on this rank)``.

    Each rank's random generator is seeded with its rank first, so ranks that build their models
    without seeding start apart and only DDP's broadcast of rank 0's parameters makes them equal;
    the dataset records the examples each rank reads, so the check can see how the data was split.
    """
    torch.manual_seed(dist.get_rank())
    recorded = _Recorded(dataset)
    try:
        return run_source(source, name, recorded, *args), recorded.seen
    finally:
        os.remove(recorded.path)
