"""ZeRO-1: DDP averages the gradients, ``ZeroRedundancyOptimizer`` shards Adam's state.

Each rank keeps Adam's two moments only for the parameters it owns (PyTorch assigns whole
parameters to ranks, largest first, to the least-loaded rank), updates only those, then broadcasts
them so every rank has the full model again. Gradients and parameters stay replicated.
Call :func:`zero1_run` inside a process group (every rank), e.g. through
``dltools.distributed.launch``.
"""
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from ..devices import rank_device
from ..launch import single_process_group
from .memory import CollectiveBytes, allocated_bytes, state_bytes
from .model import (
    make_batch,
    make_model,
    max_rel_diff,
    reference_steps,
    update_diff,
)

__all__ = ["ddp_gradient_bytes", "zero1_run"]


def ddp_gradient_bytes(gradient_as_bucket_view, width=64, depth=4, batch=32, steps=2):
    """Train ``steps`` steps of DDP in a one-rank gloo group and count the bytes of its gradients
    and of its all-reduce buckets after the last one: ``{"grads", "buckets", "extra"}``, where
    ``extra`` is the bucket bytes that are not also gradient storage.

    DDP all-reduces flat buckets. By default each gradient is copied into its bucket and back,
    so the buckets are a second copy of the gradients (``extra`` = the gradients' bytes). With
    ``gradient_as_bucket_view=True`` the gradients are views into the buckets (``extra`` = 0),
    from the second step on (DDP's docstring: "gradients will be views after first
    iteration"), since DDP rebuilds its buckets after the first.
    Only the last step's buckets are counted.

    >>> plain, views = (ddp_gradient_bytes(view, width=8, depth=1) for view in (False, True))
    >>> plain["grads"], plain["extra"], views["extra"]   # 552 fp32 parameters: 2,208 bytes
    (2208, 2208, 0)
    """
    with single_process_group():
        torch.manual_seed(0)
        model = DDP(make_model(width=width, depth=depth),
                    gradient_as_bucket_view=gradient_as_bucket_view)
        buckets = {}

        def note_bucket(state, bucket):
            storage = bucket.buffer().untyped_storage()
            buckets[storage.data_ptr()] = storage.nbytes()
            return allreduce_hook(state, bucket)

        model.register_comm_hook(None, note_bucket)
        for _ in range(steps):
            buckets.clear()
            model.zero_grad(set_to_none=False)
            x, y = make_batch(batch, width)
            nn.functional.mse_loss(model(x), y).backward()
        grads = {p.grad.untyped_storage().data_ptr(): p.grad.untyped_storage().nbytes()
                 for p in model.parameters()}
    return {"grads": sum(grads.values()), "buckets": sum(buckets.values()),
            "extra": sum(n for ptr, n in buckets.items() if ptr not in grads)}


def counting_allreduce_hook(counter, bucket):
    """DDP's default all-reduce, after noting the bucket's bytes (DDP's C++ reducer runs it)."""
    counter["all_reduce"] += bucket.buffer().numel() * bucket.buffer().element_size()
    counter["buckets"] += 1
    return allreduce_hook(None, bucket)


def zero1_run(width=64, depth=4, batch=32, steps=2, lr=1e-3, shard_optimizer=True):
    """Train with DDP + Adam (``shard_optimizer=False``) or DDP + ZeRO-1, compare with one process.

    Every rank takes ``batch / world_size`` rows of the same global batch. Returns this rank's
    ``memory`` (bytes held after the last step), ``comm`` (bytes handed to each collective in the
    last step: DDP's gradient all-reduce counted by a comm hook, ZeRO's parameter broadcasts),
    ``backward_seen_by_dispatcher`` (the backward's collectives as ``CollectiveBytes`` saw them),
    the global ``losses`` and the differences from single-process training: ``grad_diff`` (first
    step's gradients, relative to the largest) and ``param_diff`` (``update_diff`` after the last
    step).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    model, (x, y) = make_model(width, depth), make_batch(batch, width)
    ref_losses, ref_params, ref_grads = reference_steps(model, x, y, steps, lr)
    rows = batch // world
    x, y = x[rank * rows:(rank + 1) * rows].to(device), y[rank * rows:(rank + 1) * rows].to(device)

    # gradient_as_bucket_view: the gradients are views into DDP's buckets (no second copy)
    ddp = DDP(copy.deepcopy(model).to(device), gradient_as_bucket_view=True)
    if shard_optimizer:
        opt = ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=torch.optim.Adam, lr=lr)
    else:
        opt = torch.optim.Adam(ddp.parameters(), lr=lr)
    ddp_bytes = {"all_reduce": 0, "buckets": 0}
    ddp.register_comm_hook(ddp_bytes, counting_allreduce_hook)
    losses, grads = [], None
    for _ in range(steps):
        ddp_bytes.update(all_reduce=0, buckets=0)
        opt.zero_grad()
        loss = nn.functional.mse_loss(ddp(x), y)
        with CollectiveBytes() as in_backward:
            loss.backward()
        grads = grads or [p.grad.detach().clone() for p in ddp.module.parameters()]
        with CollectiveBytes() as counted:
            opt.step()
        global_loss = loss.detach().clone()
        dist.all_reduce(global_loss)
        losses.append(global_loss.item() / world)
    params = [p.detach() for p in ddp.module.parameters()]
    return {"rank": rank, "world_size": world, "memory": state_bytes(ddp.module, opt),
            "comm": {"all_reduce": ddp_bytes["all_reduce"], **dict(counted.nbytes)},
            "backward_seen_by_dispatcher": dict(in_backward.nbytes),
            "hook_buckets": ddp_bytes["buckets"],
            "step_calls": dict(counted.counts),   # ZeRO-1: one broadcast per parameter tensor
            # independent of the hook: what DDP must average, from the parameters themselves
            "grad_bytes": sum(p.numel() * p.element_size() for p in ddp.module.parameters()
                              if p.requires_grad),
            "allocated": allocated_bytes(device),
            "num_params": sum(p.numel() for p in params),
            "losses": losses, "ref_losses": ref_losses,
            "param_diff": update_diff(params, ref_params, list(model.parameters())),
            "grad_diff": max_rel_diff(grads, ref_grads)}
