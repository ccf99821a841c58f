"""How many bytes data-parallel training moves, per link and in total.

One place for the formulas, so every notebook and benchmark counts the same way.

* :func:`collective_bytes` gives the bytes of one collective over ``world_size`` ranks, for the
  busiest rank, for the root and summed over all links (each byte counted once);
* :func:`dp_step_bytes` gives ``nn.DataParallel``'s traffic in one training step, phase by phase,
  for the master's link (device 0) and in total;
* :func:`pipelined_broadcast` and :func:`pipelined_reduce` run the chain algorithms message by
  message on real tensors and count the bytes each link carries: a check of the bookkeeping (the
  bytes of real tensors, sent through a simulation of the chain, against the formulas' shapes),
  and of the values the algorithms deliver; not a measurement of NCCL.

The algorithms counted are a ring all-reduce (one of those NCCL chooses from by message size,
device count and topology, with trees among others, so its numbers are the ring's, not a promise
of NCCL's), and broadcast/reduce pipelined along a chain of devices, as NCCL runs them (each link
carries the whole tensor once; the root sends or receives it once). ``nn.DataParallel``
broadcasts parameters with ``comm.broadcast_coalesced`` and sums gradients with
``comm.reduce_add_coalesced``, which use NCCL on GPUs when PyTorch is built with it and
``torch.cuda.nccl.is_available`` accepts the tensors (else plain copies), so its master link
carries about one model per direction per step, while all links together carry ``k - 1`` models
each way.
"""
import collections
import copy

import torch

from .parallel import scatter

__all__ = ["OPS", "collective_bytes", "dp_step_bytes", "pipelined_broadcast", "pipelined_reduce",
           "tensor_bytes"]

OPS = ("all_reduce", "reduce_scatter", "all_gather", "broadcast", "reduce", "naive_all_reduce")


def _num(x):
    """An int when the value is whole, else a float (2(N-1)/N*S need not be whole)."""
    return int(x) if float(x).is_integer() else float(x)


def collective_bytes(op, num_bytes, world_size):
    """Bytes one collective moves: ``{'sent_per_rank', 'received_per_rank', 'root_sent',
    'root_received', 'total'}``.

    ``num_bytes`` is the full (unsharded) size ``S`` of the tensor. ``sent_per_rank`` and
    ``received_per_rank`` are the busiest rank's bytes in each direction; ``root_*`` are rank 0's
    (the root of broadcast/reduce); ``total`` sums every link, each byte counted once.

    * ``all_reduce`` (ring): every rank sends and receives ``2(N-1)/N*S``; total ``2(N-1)*S``;
    * ``reduce_scatter``, ``all_gather`` (ring): ``(N-1)/N*S`` per rank; total ``(N-1)*S``;
    * ``broadcast``, ``reduce`` (pipelined chain): each link carries ``S``; total ``(N-1)*S``;
      the root only sends (broadcast) or only receives (reduce) ``S``;
    * ``naive_all_reduce`` (gather to the root, then broadcast from it): the root receives and
      sends ``(N-1)*S``; total ``2(N-1)*S``.

    >>> r = collective_bytes('all_reduce', 100, 4)
    >>> r['sent_per_rank'], r['received_per_rank'], r['total']
    (150, 150, 600)
    >>> b = collective_bytes('broadcast', 100, 4)
    >>> b['root_sent'], b['root_received'], b['sent_per_rank'], b['total']
    (100, 0, 100, 300)
    >>> n = collective_bytes('naive_all_reduce', 100, 4)
    >>> n['root_received'], n['root_sent'], n['total']
    (300, 300, 600)
    >>> collective_bytes('all_gather', 100, 1)['total']
    0
    """
    if op not in OPS:
        raise ValueError(f"unknown collective {op!r}; use one of {', '.join(OPS)}")
    if isinstance(world_size, bool) or not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be an int >= 1, got {world_size!r}")
    if isinstance(num_bytes, bool) or not isinstance(num_bytes, (int, float)) or num_bytes < 0:
        raise ValueError(f"num_bytes must be a number >= 0, got {num_bytes!r}")
    n, s = world_size, num_bytes
    if n == 1:
        return dict.fromkeys(("sent_per_rank", "received_per_rank", "root_sent", "root_received",
                              "total"), 0)
    if op == "all_reduce":
        per = 2 * (n - 1) * s / n
        r = dict(sent_per_rank=per, received_per_rank=per, root_sent=per, root_received=per,
                 total=2 * (n - 1) * s)
    elif op in ("reduce_scatter", "all_gather"):
        per = (n - 1) * s / n
        r = dict(sent_per_rank=per, received_per_rank=per, root_sent=per, root_received=per,
                 total=(n - 1) * s)
    elif op == "broadcast":
        r = dict(sent_per_rank=s, received_per_rank=s, root_sent=s, root_received=0,
                 total=(n - 1) * s)
    elif op == "reduce":
        r = dict(sent_per_rank=s, received_per_rank=s, root_sent=0, root_received=s,
                 total=(n - 1) * s)
    else:  # naive_all_reduce
        r = dict(sent_per_rank=(n - 1) * s, received_per_rank=(n - 1) * s,
                 root_sent=(n - 1) * s, root_received=(n - 1) * s, total=2 * (n - 1) * s)
    return {k: _num(v) for k, v in r.items()}


def tensor_bytes(obj, floating_only=False):
    """Bytes held by the tensors in ``obj`` (a tensor, or tuples/lists/dicts of them).

    ``floating_only`` counts only tensors that can carry gradients (floating point or complex).

    >>> tensor_bytes(torch.zeros(2, 3)), tensor_bytes({'a': torch.zeros(4, dtype=torch.float64)})
    (24, 32)
    >>> tensor_bytes((torch.zeros(2), torch.arange(2)), floating_only=True)
    8
    """
    if isinstance(obj, torch.Tensor):
        if floating_only and not (obj.is_floating_point() or obj.is_complex()):
            return 0
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(tensor_bytes(o, floating_only) for o in obj)
    if isinstance(obj, dict):
        return sum(tensor_bytes(o, floating_only) for o in obj.values())
    return 0


def dp_step_bytes(module, inputs, num_devices, dim=0):
    """``nn.DataParallel``'s traffic in one training step, phase by phase.

    Returns ``{phase: {'master_sent', 'master_received', 'total'}}`` for the phases in the order
    ``DataParallel`` runs them, plus ``'step'`` (their sum) and ``'replicas'`` (``k``, the number
    of devices that get rows: fewer than ``num_devices`` for a small batch):

    * ``scatter``: input chunks 1..k-1 copied from the master to their devices (the batch is on
      the master, as in the notebooks; a batch in host memory goes to each GPU straight from there);
    * ``broadcast``: parameters and buffers to the k replicas (``broadcast_coalesced``; pipelined,
      so the master sends one copy and all links carry ``k - 1``);
    * ``gather``: outputs of replicas 1..k-1 copied to the master;
    * ``output_grads``: in backward, the gradient of those outputs scattered back;
    * ``reduce``: parameter gradients summed into the master (``reduce_add_coalesced``; pipelined,
      the master receives one copy and all links carry ``k - 1``).

    Scatter and gather copy each chunk straight between the master and its device, so the master's
    link carries all of it. The outputs are measured by running a copy of ``module`` in eval mode
    on PyTorch's ``meta`` device (shapes only, no arithmetic); a module that cannot run there is
    run for real, without gradients.

    >>> from torch import nn
    >>> t = dp_step_bytes(nn.Linear(10, 2), torch.zeros(8, 10), num_devices=4)
    >>> t['replicas'], t['scatter']
    (4, {'master_sent': 240, 'master_received': 0, 'total': 240})
    >>> t['broadcast']       # the master sends one model (88 bytes); the 3 links carry 3
    {'master_sent': 88, 'master_received': 0, 'total': 264}
    >>> t['reduce'], t['step']['master_received'], t['step']['total']
    ({'master_sent': 0, 'master_received': 88, 'total': 264}, 136, 864)
    """
    if isinstance(num_devices, bool) or not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be an int >= 1, got {num_devices!r}")
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    chunks = scatter(inputs, ["cpu"] * num_devices, dim)  # only the chunking matters here
    k = len(chunks)
    outs = _output_shapes(module, chunks[1:])
    params = list(module.parameters())
    model_bytes = tensor_bytes(params) + tensor_bytes(list(module.buffers()))
    # Every parameter is reduced, frozen ones too: they come out of the same Broadcast node, whose
    # backward receives a zero gradient for each and reduce-adds them all (``ReduceAddCoalesced``).
    grad_bytes = tensor_bytes(params)
    bcast = collective_bytes("broadcast", model_bytes, k)
    reduce = collective_bytes("reduce", grad_bytes, k)
    to_master = tensor_bytes(outs)
    from_master = tensor_bytes(chunks[1:])
    grads_out = tensor_bytes(outs, floating_only=True)
    phases = {
        "scatter": (from_master, 0, from_master),
        "broadcast": (bcast["root_sent"], 0, bcast["total"]),
        "gather": (0, to_master, to_master),
        "output_grads": (grads_out, 0, grads_out),
        "reduce": (0, reduce["root_received"], reduce["total"]),
    }
    keys = ("master_sent", "master_received", "total")
    result = {name: dict(zip(keys, v)) for name, v in phases.items()}
    result["step"] = {key: sum(result[name][key] for name in phases) for key in keys}
    result["replicas"] = k
    return result


def _output_shapes(module, chunks):
    """The module's outputs for each chunk: on the meta device if possible (shapes, no compute)."""
    def to_meta(obj):
        if isinstance(obj, torch.Tensor):
            return obj.to("meta")
        if isinstance(obj, (list, tuple)) and not hasattr(obj, "_fields"):
            return type(obj)(to_meta(o) for o in obj)
        if isinstance(obj, dict):
            return type(obj)((k, to_meta(v)) for k, v in obj.items())
        return obj

    if not chunks:
        return []
    with torch.no_grad():
        try:
            meta = copy.deepcopy(module).to("meta").eval()
            return [meta(*to_meta(c)) for c in chunks]
        except (NotImplementedError, RuntimeError, TypeError):
            pass
        # Fall back to a real run; eval mode leaves BatchNorm statistics alone.
        modes = [(m, m.training) for m in module.modules()]
        try:
            module.eval()
            return [module(*c) for c in chunks]
        finally:
            for m, training in modes:
                m.training = training


def _pieces(t, num_pieces):
    return list(t.reshape(-1).chunk(num_pieces))


def pipelined_broadcast(tensors, num_devices, num_pieces=4):
    """Broadcast ``tensors`` from device 0 along the chain 0 -> 1 -> ... -> k-1, message by message.

    Each tensor is cut into ``num_pieces`` pieces; at every tick, each device passes on to the
    next the piece it received at the previous tick (so the pieces flow down the chain as in a
    pipeline). Returns ``(copies, link_bytes)``: ``copies[j]`` is the list of tensors device ``j``
    ends up with, and ``link_bytes[(i, j)]`` the bytes of the messages sent from ``i`` to ``j``.

    >>> copies, links = pipelined_broadcast([torch.arange(6.0)], 3)
    >>> [c[0].tolist() == list(range(6)) for c in copies], dict(links)
    ([True, True, True], {(0, 1): 24, (1, 2): 24})
    """
    if not isinstance(num_devices, int) or num_devices < 1:
        raise ValueError(f"num_devices must be an int >= 1, got {num_devices!r}")
    links = collections.Counter()
    copies = [[] for _ in range(num_devices)]
    for t in tensors:
        pieces = _pieces(t, num_pieces)
        have = [[None] * len(pieces) for _ in range(num_devices)]
        have[0] = pieces
        for tick in range(len(pieces) + num_devices - 2):
            for i in range(num_devices - 1):
                p = tick - i  # device i forwards the piece it got at the previous tick
                if 0 <= p < len(pieces):
                    message = have[i][p]
                    have[i + 1][p] = message.clone()
                    links[(i, i + 1)] += tensor_bytes(message)
        for j in range(num_devices):
            copies[j].append(torch.cat(have[j]).reshape(t.shape) if pieces else t.clone())
    return copies, links


def pipelined_reduce(per_device, num_pieces=4):
    """Sum tensors held by ``k`` devices onto device 0 along the chain k-1 -> ... -> 1 -> 0.

    ``per_device[j]`` is the list of tensors on device ``j`` (the same shapes on every device).
    Device ``k-1`` sends its pieces down the chain; each device adds its own piece to the one it
    receives and passes the partial sum on. Returns ``(sums, link_bytes)``: the summed tensors on
    device 0 and the bytes sent over each link ``(i, j)``.

    >>> sums, links = pipelined_reduce([[torch.ones(4)], [2 * torch.ones(4)], [3 * torch.ones(4)]])
    >>> sums[0].tolist(), dict(links)
    ([6.0, 6.0, 6.0, 6.0], {(2, 1): 16, (1, 0): 16})
    """
    k = len(per_device)
    if k < 1:
        raise ValueError("pipelined_reduce needs the tensors of at least one device")
    links = collections.Counter()
    sums = []
    for i in range(len(per_device[0])):
        partial = [_pieces(per_device[j][i].clone(), num_pieces) for j in range(k)]
        num = len(partial[0])
        for tick in range(num + k - 2):
            for j in range(k - 1, 0, -1):
                p = tick - (k - 1 - j)  # device j passes on the partial sum it completed
                if 0 <= p < num:
                    message = partial[j][p]
                    partial[j - 1][p] = partial[j - 1][p] + message
                    links[(j, j - 1)] += tensor_bytes(message)
        shape = per_device[0][i].shape
        sums.append(torch.cat(partial[0]).reshape(shape) if num else per_device[0][i].clone())
    return sums, links
