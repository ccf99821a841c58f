"""Two techniques composed on a 2-D device mesh: FSDP2 across one dimension, tensor parallelism
across the other.

With 4 ranks the mesh is 2 x 2: ranks ``(0, 1)`` and ``(2, 3)`` are the two tensor-parallel pairs
(dimension ``"tp"``), ranks ``(0, 2)`` and ``(1, 3)`` the two data-parallel pairs (``"dp"``). Each
block is first split by :func:`~dltools.beyond.tensor_parallel.parallelize_mlp` on the ``"tp"``
mesh, then each rank's part is sharded by FSDP2 on the ``"dp"`` mesh, so every rank holds about a
quarter of the parameters, gradients and optimizer state. The two ranks of a tensor-parallel pair
see the same rows of the batch; the two pairs see different rows, and FSDP2's reduce-scatter
averages their gradients. Call :func:`fsdp_tp_run` inside a process group of 4 ranks (or any even
number), on every rank.
"""
import copy

import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh

from ..devices import rank_device
from .fsdp import shard_model, train_sharded
from .memory import state_bytes
from .model import make_batch, make_model, max_rel_diff, reference_steps, update_diff
from .tensor_parallel import parallelize_mlp

__all__ = ["fsdp_tp_run"]


def fsdp_tp_run(width=64, depth=4, batch=32, steps=2, lr=1e-3, tp=2):
    """Train with FSDP2 over ``"dp"`` and tensor parallelism over ``"tp"`` (``tp`` ranks per
    pair), compare with one process on the whole batch.

    Returns this rank's ``mesh`` coordinates and groups, ``memory`` after the last step, the
    collectives of the last step per phase (``calls``, and ``comm`` in bytes handed to each), and
    the differences from one process (``grad_diff``: first step; ``param_diff``: ``update_diff``
    after the last step).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % tp:
        raise ValueError(f"{world} ranks cannot form pairs of {tp}: use a multiple of {tp}")
    device = rank_device()
    mesh = init_device_mesh(device.type, (world // tp, tp), mesh_dim_names=("dp", "tp"))
    dp_rank, dp = mesh["dp"].get_local_rank(), world // tp
    model, (x, y) = make_model(width, depth), make_batch(batch, width)
    ref_losses, ref_params, ref_grads = reference_steps(model, x, y, steps, lr)
    rows = batch // dp
    x, y = (t[dp_rank * rows:(dp_rank + 1) * rows].to(device) for t in (x, y))

    net = shard_model(parallelize_mlp(copy.deepcopy(model).to(device), mesh["tp"]), mesh["dp"])
    run = train_sharded(net, x, y, steps, lr)   # the loss: the mean over the dp pairs' rows
    opt, losses, grads, fwd, bwd = (run[k] for k in ("optimizer", "losses", "grads", "forward",
                                                     "backward"))
    params = [p.full_tensor() for p in net.parameters()]
    return {"rank": rank, "world_size": world,
            "mesh": {"dp": dp_rank, "tp": mesh["tp"].get_local_rank(),
                     "tp_group": dist.get_process_group_ranks(mesh["tp"].get_group()),
                     "dp_group": dist.get_process_group_ranks(mesh["dp"].get_group())},
            "memory": state_bytes(net, opt),
            "calls": {"forward": dict(fwd.counts), "backward": dict(bwd.counts)},
            "comm": {"forward": dict(fwd.nbytes), "backward": dict(bwd.nbytes)},
            "losses": losses, "ref_losses": ref_losses,
            "param_diff": update_diff(params, ref_params, list(model.parameters())),
            "grad_diff": max_rel_diff(grads, ref_grads)}
