"""Where training memory goes, measured from tensors, and the formulas it is checked against.

Measured: :func:`state_bytes` adds up the bytes of the parameters, gradients and optimizer state a
rank *holds* (for a sharded ``DTensor`` only its local shard); :func:`saved_activation_bytes` adds
up the tensors autograd keeps for backward; :class:`CollectiveBytes` counts the bytes each
collective is handed.
Predicted: :func:`bytes_per_param` (the Ultra-Scale Playbook's table) and :func:`per_rank_bytes`
(the same divided by the ZeRO stage's sharding).
"""
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from ..timing import synchronize

__all__ = [
    "GB",
    "CollectiveBytes",
    "allocated_bytes",
    "bytes_per_param",
    "per_rank_bytes",
    "saved_activation_bytes",
    "state_bytes",
    "tensor_nbytes",
]

GB = 1e9


def tensor_nbytes(t):
    """Bytes this process holds for ``t``: a ``DTensor``'s local shard, else the whole tensor.

    >>> tensor_nbytes(torch.zeros(3, 4)), tensor_nbytes(None)
    (48, 0)
    """
    if t is None:
        return 0
    local = t.to_local() if hasattr(t, "to_local") else t
    return local.numel() * local.element_size()


def allocated_bytes(device):
    """Peak bytes the CUDA caching allocator handed out on ``device`` since its last
    ``torch.cuda.reset_peak_memory_stats`` (:func:`~dltools.beyond.runs.run_all` resets it before
    each technique). ``None`` on a CPU, which has no such counter: there the tensor bytes of
    :func:`state_bytes` are the measurement. The peak counts everything the run allocated on the
    device: activations, communication buffers and, for the runs that keep one, the
    single-process reference model they compare with, so it is above :func:`state_bytes`.

    >>> allocated_bytes(torch.device("cpu")) is None
    True
    """
    if device.type != "cuda":
        return None
    synchronize(device)
    return torch.cuda.max_memory_allocated(device)


def state_bytes(model, optimizer=None):
    """``{'params', 'grads', 'optimizer'}``: bytes of the tensors this rank holds right now.

    Optimizer state is read from ``optimizer.state`` (for ``ZeroRedundancyOptimizer``: from the
    local optimizer, which only has this rank's share). The step counters Adam keeps are 0-dim
    tensors and are counted too (4 bytes each), as they take memory.

    >>> net = torch.nn.Linear(10, 2)
    >>> opt = torch.optim.Adam(net.parameters())
    >>> net(torch.ones(1, 10)).sum().backward(); opt.step()
    >>> state_bytes(net, opt)
    {'params': 88, 'grads': 88, 'optimizer': 184}
    """
    params = list(model.parameters())
    result = {"params": sum(tensor_nbytes(p) for p in params),
              "grads": sum(tensor_nbytes(p.grad) for p in params), "optimizer": 0}
    if optimizer is not None:
        opt = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's local optimizer
        result["optimizer"] = sum(tensor_nbytes(v) for state in opt.state.values()
                                  for v in state.values() if isinstance(v, torch.Tensor))
    return result


def bytes_per_param(precision="fp32", optimizer="adam"):
    """Bytes per parameter for ``{'params', 'grads', 'optimizer'}``.

    ``fp32``: 4 + 4 + 8 (Adam's two moments). ``bf16`` mixed precision as in the Ultra-Scale
    Playbook: bf16 parameters and gradients (2 + 2) and, in the optimizer, an fp32 master copy
    plus the two fp32 moments (12). ``optimizer='sgd'`` keeps no state (momentum would add one
    copy).

    >>> bytes_per_param('fp32'), bytes_per_param('bf16')
    ({'params': 4, 'grads': 4, 'optimizer': 8}, {'params': 2, 'grads': 2, 'optimizer': 12})
    """
    moments = {"adam": 2, "sgd": 0, "momentum": 1}[optimizer]
    if precision == "fp32":
        return {"params": 4, "grads": 4, "optimizer": 4 * moments}
    if precision == "bf16":
        return {"params": 2, "grads": 2, "optimizer": 4 + 4 * moments}
    raise ValueError(f"precision must be 'fp32' or 'bf16', got {precision!r}")


def per_rank_bytes(num_params, world_size, stage=0, precision="fp32", optimizer="adam"):
    """Predicted bytes per rank ``{'params', 'grads', 'optimizer', 'total'}`` for ZeRO ``stage``.

    Stage 0 is DDP (everything replicated); stage 1 shards the optimizer state, stage 2 also the
    gradients, stage 3 also the parameters: each sharded part is divided by ``world_size``.
    Tensor parallelism shards all three like stage 3 (for the layers it splits).

    >>> per_rank_bytes(1000, 4, stage=1)
    {'params': 4000, 'grads': 4000, 'optimizer': 2000.0, 'total': 10000.0}
    """
    per = bytes_per_param(precision, optimizer)
    sharded = {0: (), 1: ("optimizer",), 2: ("optimizer", "grads"),
               3: ("optimizer", "grads", "params")}[stage]
    result = {k: num_params * v / (world_size if k in sharded else 1) for k, v in per.items()}
    result = {k: int(v) if float(v).is_integer() and k not in sharded else v
              for k, v in result.items()}
    result["total"] = sum(result.values())
    return result


def saved_activation_bytes(fn, *args, params=None):
    """Run ``fn(*args)`` and return ``(output, bytes of the tensors autograd saved for backward)``.

    Parameters saved for backward (``Linear`` keeps its weight to compute the input's gradient)
    are not activations: tensors sharing storage with ``params`` (default: ``fn.parameters()``
    when ``fn`` is a module) are left out, as they are counted once, as parameters. Each storage
    counts once, however many tensors saved it.

    >>> net = torch.nn.Sequential(torch.nn.Linear(10, 20), torch.nn.ReLU())
    >>> _, nbytes = saved_activation_bytes(net, torch.ones(8, 10))
    >>> nbytes   # the input of Linear (8x10) and the output of ReLU (8x20), float32
    960
    """
    seen, total = set(), [0]
    if params is None and isinstance(fn, torch.nn.Module):
        params = fn.parameters()
    skip = {p.untyped_storage().data_ptr() for p in (params or ())}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in skip and ptr not in seen:
            seen.add(ptr)
            total[0] += t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, total[0]


# op name in the dispatcher -> (our name, which argument holds the full tensor)
_OPS = {"allreduce_": ("all_reduce", "in"), "all_reduce": ("all_reduce", "in"),
        "broadcast_": ("broadcast", "in"), "broadcast": ("broadcast", "in"),
        "_allgather_base_": ("all_gather", "out"), "all_gather_into_tensor": ("all_gather", "out"),
        "allgather_": ("all_gather", "out"),
        "allgather_into_tensor_coalesced_": ("all_gather", "out"),
        "_reduce_scatter_base_": ("reduce_scatter", "in"),
        "reduce_scatter_tensor": ("reduce_scatter", "in"),
        "reduce_scatter_": ("reduce_scatter", "in"),
        "reduce_scatter_tensor_coalesced_": ("reduce_scatter", "in")}


class CollectiveBytes(TorchDispatchMode):
    """Count every collective this process runs under it, with the bytes of its full tensor.

    ``counts[op]`` is the number of calls and ``nbytes[op]`` the sum of ``S``, the full (unsharded)
    size in the sense of :func:`dltools.traffic.collective_bytes`: the output of an all-gather,
    the input of a reduce-scatter, the tensor of an all-reduce or broadcast. It sees every
    collective that goes through PyTorch's dispatcher: ``torch.distributed`` calls, DTensor's
    functional collectives, FSDP2's, and DDP's gradient all-reduce (``zero1_run`` also counts
    that one with a DDP communication hook; notebook 05 checks the hook's bytes against the
    parameters' own bytes, which neither counter reads).

    >>> import torch.distributed as dist
    >>> from dltools.distributed import single_process_group
    >>> with single_process_group(), CollectiveBytes() as c:
    ...     dist.all_reduce(torch.ones(10))
    >>> dict(c.counts), dict(c.nbytes)
    ({'all_reduce': 1}, {'all_reduce': 40})
    """
    def __init__(self):
        super().__init__()
        self.counts, self.nbytes = collections.Counter(), collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        ns, name = func.namespace, func._schema.name.split("::")[-1]
        if ns in ("c10d", "_c10d_functional") and name in _OPS:
            op, which = _OPS[name]
            self.counts[op] += 1
            self.nbytes[op] += self._full_bytes(func, name, which, args)
        return func(*args, **kwargs)

    @staticmethod
    def _full_bytes(func, name, which, args):
        def flat(x):
            if isinstance(x, torch.Tensor):
                return [x]
            if isinstance(x, (list, tuple)):
                return [t for y in x for t in flat(y)]
            return []
        if func.namespace == "_c10d_functional":
            # (input, ..., group_size, group_name): an all-gather's full size is input x group
            size = args[0].numel() * args[0].element_size()
            return size * args[-2] if name == "all_gather_into_tensor" else size
        # c10d's in-place ops: args[0] the output(s), args[1] the input(s); all-reduce and
        # broadcast work in place on args[0]
        tensors = flat(args[0]) if which == "out" or name in ("allreduce_", "broadcast_") \
            else flat(args[1])
        return sum(t.numel() * t.element_size() for t in tensors)
