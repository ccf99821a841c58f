"""ZeRO-2 and ZeRO-3 with FSDP2's ``fully_shard``.

``fully_shard(block)`` replaces each parameter of ``block`` by a ``DTensor`` sharded on dim 0: rank
``r`` keeps rows ``r/N`` to ``(r+1)/N``. Before the block's forward, FSDP all-gathers its full
parameters; after backward, it reduce-scatters the gradients, so each rank keeps (and Adam updates)
only its shard. ``reshard_after_forward=True`` frees the full parameters after forward and
all-gathers them again in backward (ZeRO-3); ``False`` keeps them until backward (ZeRO-2: less
traffic, more memory): between forward and backward a rank then holds its shards *and* the
gathered parameters, ``P(1 + 1/N)`` bytes of parameters, and only ``P/N`` at rest after the step.
:func:`held_param_bytes` measures both from FSDP2's own buffers.
Call :func:`fsdp_run` inside a process group, on every rank.
"""
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ..devices import rank_device
from .memory import CollectiveBytes, allocated_bytes, state_bytes
from .model import (
    make_batch,
    make_model,
    max_rel_diff,
    reference_steps,
    update_diff,
)

__all__ = ["fsdp_run", "held_param_bytes", "shard_model", "train_sharded"]


def shard_model(model, mesh, reshard_after_forward=True):
    """``fully_shard`` each block, then the root (bottom-up, as FSDP2 wants): one collective per
    block and phase (an all-gather in forward; a reduce-scatter in backward, after a second
    all-gather for ZeRO-3)."""
    for block in model:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward)
    return fully_shard(model, mesh=mesh, reshard_after_forward=reshard_after_forward)


def held_param_bytes(model):
    """``{'sharded', 'unsharded'}``: bytes of parameter storage this rank holds right now under
    FSDP2, read from each ``FSDPParam``'s buffers (a private API of torch 2.x: the sharded
    storage, padded to a multiple of N rows, and the all-gathered one while it is allocated).
    Each storage counts once."""
    seen, held = set(), {"sharded": 0, "unsharded": 0}
    for module in model.modules():
        state = module._get_fsdp_state() if hasattr(module, "_get_fsdp_state") else None
        for group in (state._fsdp_param_groups if state else ()):
            for fp in group.fsdp_params:
                for kind, t in (("sharded", fp._sharded_param_data),
                                ("unsharded", getattr(fp, "_unsharded_param", None))):
                    storage = t.untyped_storage() if t is not None else None
                    if storage is None or storage.nbytes() == 0 or storage.data_ptr() in seen:
                        continue
                    seen.add(storage.data_ptr())
                    held[kind] += storage.nbytes()
    return held


def train_sharded(net, x, y, steps, lr, after_forward=None):
    """``steps`` Adam steps of ``net``, whose parameters are ``DTensor``s (FSDP2, tensor
    parallelism or both), on this rank's rows ``x`` and ``y``; every rank calls it.

    Returns ``optimizer``, ``losses`` (each step's loss averaged over all ranks), ``grads`` (the
    first step's gradients, all-gathered whole by ``full_tensor()``: for the comparison with one
    process only), ``forward`` and ``backward`` (the last step's :class:`CollectiveBytes`) and
    ``after_forward`` (what ``after_forward()``, called between forward and backward, returned
    in the last step).
    """
    world = dist.get_world_size()
    opt = torch.optim.Adam(net.parameters(), lr=lr)
    losses, grads, seen = [], None, None
    for _ in range(steps):
        opt.zero_grad()
        with CollectiveBytes() as fwd:
            loss = nn.functional.mse_loss(net(x), y)
        seen = after_forward() if after_forward else None
        with CollectiveBytes() as bwd:
            loss.backward()
        grads = grads or [p.grad.full_tensor().detach().clone() for p in net.parameters()]
        opt.step()
        total = loss.detach().clone()
        dist.all_reduce(total)   # a tensor-parallel pair holds equal copies: still the mean
        losses.append(total.item() / world)
    return {"optimizer": opt, "losses": losses, "grads": grads, "forward": fwd, "backward": bwd,
            "after_forward": seen}


def fsdp_run(width=64, depth=4, batch=32, steps=2, lr=1e-3, reshard_after_forward=True):
    """Train with FSDP2 and Adam, compare with one process, measure memory and traffic.

    Returns this rank's ``memory`` after the last step, ``held_after_forward`` and
    ``held_after_step`` (:func:`held_param_bytes` between forward and backward, and after the
    step),
    ``comm`` per phase of the last step (``{'forward': {...}, 'backward': {...}}``, the bytes
    ``S`` handed to each collective) and the differences from single-process training
    (``grad_diff`` relative, first step; ``param_diff``: ``update_diff`` after the last step).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    mesh = init_device_mesh(device.type, (world,))
    model, (x, y) = make_model(width, depth), make_batch(batch, width)
    ref_losses, ref_params, ref_grads = reference_steps(model, x, y, steps, lr)
    rows = batch // world
    x, y = x[rank * rows:(rank + 1) * rows].to(device), y[rank * rows:(rank + 1) * rows].to(device)

    sharded = shard_model(copy.deepcopy(model).to(device), mesh, reshard_after_forward)
    run = train_sharded(sharded, x, y, steps, lr, after_forward=lambda: held_param_bytes(sharded))
    opt, losses, grads, fwd, bwd, after_forward = (
        run[k] for k in ("optimizer", "losses", "grads", "forward", "backward", "after_forward"))
    memory = state_bytes(sharded, opt)
    after_step = held_param_bytes(sharded)
    params = [p.full_tensor() for p in sharded.parameters()]
    return {"rank": rank, "world_size": world, "memory": memory,
            "allocated": allocated_bytes(device),
            "held_after_forward": after_forward, "held_after_step": after_step,
            "comm": {"forward": dict(fwd.nbytes), "backward": dict(bwd.nbytes)},
            "calls": {"forward": dict(fwd.counts), "backward": dict(bwd.counts)},
            "num_params": sum(p.numel() for p in params),
            "losses": losses, "ref_losses": ref_losses,
            "param_diff": update_diff(params, ref_params, list(model.parameters())),
            "grad_diff": max_rel_diff(grads, ref_grads)}
