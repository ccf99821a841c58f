"""Tensor parallelism: each MLP block split column-wise, then row-wise (Megatron-LM's layout).

``ColwiseParallel`` gives rank ``r`` the ``r``-th slice of ``up``'s output features (rows of its
weight), so each rank computes a slice of the hidden activations, and GELU works on its slice
alone. ``RowwiseParallel`` gives rank ``r`` the matching input features (columns) of ``down``:
each rank's partial product has the full output shape, and **one all-reduce** sums them. Backward
mirrors this: one all-reduce of the input's gradient per block. Every rank sees the whole batch.
Call :func:`tp_run` inside a process group, on every rank.
"""
import copy

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    RowwiseParallel,
    parallelize_module,
)

from ..devices import rank_device
from .memory import CollectiveBytes, allocated_bytes, state_bytes
from .model import make_batch, make_model, max_rel_diff, update_diff

__all__ = ["parallelize_mlp", "tp_run"]


def parallelize_mlp(model, mesh):
    """Split every block's ``up`` by output features and ``down`` by input features."""
    for block in model:
        parallelize_module(block, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    return model


def tp_run(width=64, depth=4, batch=32, steps=2, lr=1e-3, input_grad=True):
    """Train with tensor parallelism and Adam, compare with one process.

    Returns this rank's ``memory`` after the last step, the collectives of the last step per
    phase (``calls`` and ``comm``, bytes ``S`` per collective), and the differences from one
    process: outputs (``out_diff``), first-step gradients (``grad_diff``), parameters after the
    last step (``param_diff``, see ``update_diff``). ``input_grad``: whether the input requires a
    gradient (as it would inside a network: then backward all-reduces it in the first block too).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    device = rank_device()
    mesh = init_device_mesh(device.type, (world,))
    model, (x, y) = make_model(width, depth), make_batch(batch, width)
    x, y = x.to(device).requires_grad_(input_grad), y.to(device)
    ref = copy.deepcopy(model).to(device)
    tp = parallelize_mlp(copy.deepcopy(model).to(device), mesh)
    ref_opt = torch.optim.Adam(ref.parameters(), lr=lr)
    opt = torch.optim.Adam(tp.parameters(), lr=lr)
    losses, ref_losses, grads, ref_grads, out_diff = [], [], None, None, None
    for _ in range(steps):
        for net, o, ls in ((ref, ref_opt, ref_losses), (tp, opt, losses)):
            o.zero_grad()
            with CollectiveBytes() as fwd:
                out = net(x)
                loss = nn.functional.mse_loss(out, y)
            with CollectiveBytes() as bwd:
                loss.backward()
            ls.append(loss.item())
            if net is ref:
                ref_out = out.detach()
                ref_grads = ref_grads or [p.grad.clone() for p in ref.parameters()]
            else:
                out_diff = out_diff if out_diff is not None else max_rel_diff([out], [ref_out])
                grads = grads or [p.grad.full_tensor().clone() for p in tp.parameters()]
            o.step()
    params = [p.full_tensor() for p in tp.parameters()]
    return {"rank": rank, "world_size": world, "memory": state_bytes(tp, opt),
            "allocated": allocated_bytes(device),
            "calls": {"forward": dict(fwd.counts), "backward": dict(bwd.counts)},
            "comm": {"forward": dict(fwd.nbytes), "backward": dict(bwd.nbytes)},
            "activation_bytes": out.numel() * out.element_size(),
            "num_params": sum(p.numel() for p in params), "losses": losses,
            "ref_losses": ref_losses, "out_diff": out_diff,
            "param_diff": update_diff(params, list(ref.parameters()),
                                      list(model.parameters())),
            "grad_diff": max_rel_diff(grads, ref_grads)}
