"""DataParallel's four steps over any list of devices: scatter, replicate, parallel_apply, gather.

``torch.nn.parallel``'s functions refuse CPU devices, and ``nn.DataParallel`` without CUDA simply
calls the module. This module implements the same four steps, for any devices, including the same
CPU device several times (each replica runs in its own thread), in the order
``nn.DataParallel.forward`` runs them:

* ``scatter`` splits tensors along ``dim`` with ``torch.chunk`` (uneven last chunk; fewer chunks
  than devices when the batch is small) and recurses into tuples, lists and dicts; other values
  are passed to every replica as the same object;
* ``replicate`` copies the module onto the devices that got rows, as
  ``torch.nn.parallel.replicate`` does: shallow module copies
  (``nn.Module._replicate_for_data_parallel``: hooks and plain attributes are shared with the
  original, attributes set in ``forward`` are lost) whose parameters come from *one* autograd
  function over all parameters and devices, :class:`Broadcast` (PyTorch's is
  ``torch.nn.parallel._functions.Broadcast``), so every replica's parameters have
  ``grad_fn=BroadcastBackward`` and its backward sums all replicas' gradients at once, when the
  last of them is ready, into the original parameters; replica 0 on the source device shares the
  original's memory (as PyTorch's broadcast does);
* ``parallel_apply`` runs replica ``i`` on input chunk ``i`` in thread ``i``;
* ``gather`` concatenates the outputs on ``output_device`` (0-dim outputs are unsqueezed into a
  vector, with PyTorch's warning).

A ``timeline`` list (given to :func:`parallel_apply`, :func:`data_parallel` or set as
``DataParallel.timeline``) records when each step ran, per replica, including the gradient
reduce in backward. On GPUs, recording waits for the devices at every step's start and end
(``torch.cuda.synchronize``), so that the times are the work's, not its launch's; a step that is
recorded loses the overlap the GPUs would otherwise give it.

Where it differs from PyTorch: copies are made with ``Tensor.to`` one tensor at a time (PyTorch
uses ``comm.broadcast_coalesced`` / ``comm.reduce_add_coalesced``, NCCL on GPUs), and a replica on
the source device other than the first gets its own copy (PyTorch has one replica per GPU).
The bytes a step moves are counted by :mod:`dltools.traffic`. ``split_batch`` is d2l's helper for
data parallelism by hand.

On GPUs, prefer ``torch.nn.DataParallel`` itself; :func:`wrap_data_parallel` picks for you.
"""
import collections
import contextlib
import threading
import time
import traceback
import warnings

import torch
from torch import nn

from .devices import try_all_gpus
from .timing import synchronize

__all__ = ["as_device", "chunk_sizes", "Broadcast", "replicate", "scatter", "scatter_kwargs",
           "split_batch", "parallel_apply", "gather", "data_parallel", "DataParallel",
           "wrap_data_parallel", "replica_index"]

_local = threading.local()


def as_device(d):
    """Turn ``0``, ``'cuda:1'``, ``'cpu'`` or a ``torch.device`` into a ``torch.device``
    (an int means a GPU index, as in ``nn.DataParallel``).

    >>> as_device('cpu'), as_device(1)
    (device(type='cpu'), device(type='cuda', index=1))
    """
    if isinstance(d, torch.device):
        return d
    if isinstance(d, bool):
        raise TypeError(f"not a device: {d!r}")
    if isinstance(d, int):
        if d < 0:
            raise ValueError(f"GPU index must be 0 or more, got {d}")
        return torch.device("cuda", d)
    if isinstance(d, str):
        return torch.device(d)
    raise TypeError(f"not a device: {d!r} ({type(d).__name__}); use an int, a string like 'cpu' or "
                    "'cuda:0', or a torch.device")


def _devices(devices, what="devices"):
    if devices is None:
        raise ValueError(f"{what} is None; pass a list such as ['cpu', 'cpu'] or "
                         "dltools.try_all_gpus()")
    devices = [as_device(d) for d in devices]
    if not devices:
        raise ValueError(f"{what} is empty: data parallelism needs at least one device, e.g. "
                         "['cpu', 'cpu'] for two CPU replicas or dltools.try_all_gpus()")
    return devices


def chunk_sizes(batch_size, num_devices):
    """Rows each device gets when a batch of ``batch_size`` is split over ``num_devices``.

    This is ``torch.chunk``'s rule, which ``DataParallel`` uses: chunks of ``ceil(batch/devices)``
    rows, the last one smaller, and fewer chunks than devices whenever ``ceil(batch/devices)``-row
    chunks run out of rows first: with fewer rows than devices, and also with more (6 rows on 4
    devices make 3 chunks of 2, and the fourth device gets nothing).

    >>> chunk_sizes(30, 8)
    [4, 4, 4, 4, 4, 4, 4, 2]
    >>> chunk_sizes(10, 3)
    [4, 4, 2]
    >>> chunk_sizes(3, 8)        # a batch smaller than the device count: 3 replicas run
    [1, 1, 1]
    >>> chunk_sizes(6, 4)        # more rows than devices, yet only 3 replicas run
    [2, 2, 2]
    """
    if batch_size < 1 or num_devices < 1:   # an empty batch: refused, as scatter refuses it
        raise ValueError(f"need batch_size >= 1 and num_devices >= 1, got {batch_size}, "
                         f"{num_devices}")
    return [c.shape[0] for c in torch.empty(batch_size, 0).chunk(num_devices, dim=0)]


def replica_index():
    """Index of the replica the calling code runs in (inside ``parallel_apply``), else ``None``.

    A model's ``forward`` can use it to report which replica saw which rows.

    >>> replica_index() is None
    True
    """
    return getattr(_local, "index", None)


# ------------------------------------------------------------------ scatter


def _scatter_tensor(t, devices, dim):
    if t.dim() == 0:
        raise ValueError("cannot scatter a 0-dim tensor: give every input a batch dimension "
                         f"(got a scalar {t.item()!r})")
    if not -t.dim() <= dim < t.dim():
        raise ValueError(f"cannot split a tensor of shape {tuple(t.shape)} along dim {dim}")
    if t.shape[dim] == 0:
        raise ValueError(f"cannot scatter an empty batch (shape {tuple(t.shape)}, dim {dim})")
    return tuple(c.to(d) for c, d in zip(t.chunk(len(devices), dim), devices))


def scatter(inputs, target_devices, dim=0):
    """Split ``inputs`` (tensors, or tuples/lists/dicts of them) into one piece per device.

    Non-tensor values are repeated for every device. Returns a list with one entry per replica
    that gets data (fewer than devices for a small batch).

    >>> parts = scatter((torch.arange(5), 'tag'), ['cpu', 'cpu'])
    >>> [(x.tolist(), s) for x, s in parts]
    [([0, 1, 2], 'tag'), ([3, 4], 'tag')]
    >>> [p['x'].shape[1] for p in scatter({'x': torch.zeros(2, 6)}, ['cpu'] * 3, dim=1)]
    [2, 2, 2]
    """
    devices = _devices(target_devices, "target_devices")

    def scatter_map(obj):
        if isinstance(obj, torch.Tensor):
            return _scatter_tensor(obj, devices, dim)
        if isinstance(obj, tuple) and hasattr(obj, "_fields"):  # namedtuple
            return [type(obj)(*args) for args in zip(*map(scatter_map, obj))]
        if isinstance(obj, tuple) and len(obj) > 0:
            return list(zip(*map(scatter_map, obj)))
        if isinstance(obj, list) and len(obj) > 0:
            return [list(i) for i in zip(*map(scatter_map, obj))]
        if isinstance(obj, dict) and len(obj) > 0:
            return [type(obj)(i) for i in zip(*map(scatter_map, obj.items()))]
        return [obj for _ in devices]

    return scatter_map(inputs)


def split_batch(X, y, devices):
    """Split features ``X`` and labels ``y`` into one chunk per device, as d2l's ``split_batch``
    (which uses ``nn.parallel.scatter`` and so needs GPUs; this one takes any devices).

    >>> Xs, ys = split_batch(torch.arange(10).reshape(5, 2), torch.arange(5), ['cpu', 'cpu'])
    >>> [x.shape[0] for x in Xs], [t.tolist() for t in ys]
    ([3, 2], [[0, 1, 2], [3, 4]])
    """
    if X.shape[0] != y.shape[0]:
        raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}; they must match")
    return scatter(X, devices), scatter(y, devices)


def scatter_kwargs(inputs, kwargs, target_devices, dim=0):
    """Scatter positional and keyword inputs; both results have the same length.

    >>> ins, kws = scatter_kwargs((torch.ones(4, 2),), {'scale': 2.0}, ['cpu', 'cpu'])
    >>> len(ins), kws
    (2, ({'scale': 2.0}, {'scale': 2.0}))
    """
    scattered_inputs = scatter(inputs, target_devices, dim) if inputs else []
    scattered_kwargs = scatter(kwargs, target_devices, dim) if kwargs else []
    if len(scattered_inputs) < len(scattered_kwargs):
        scattered_inputs.extend(() for _ in range(len(scattered_kwargs) - len(scattered_inputs)))
    elif len(scattered_kwargs) < len(scattered_inputs):
        scattered_kwargs.extend({} for _ in range(len(scattered_inputs) - len(scattered_kwargs)))
    return tuple(scattered_inputs), tuple(scattered_kwargs)


# ------------------------------------------------------------------ replicate


def _now(sync, device=None):
    """``time.perf_counter()``; when ``sync`` (a timeline is being recorded), first wait for the
    GPU work already queued (on ``device``, or on every GPU). GPUs run asynchronously: without the
    wait a span would time the launch of its kernels, not their work."""
    if sync:
        synchronize(device)
    return time.perf_counter()


class Broadcast(torch.autograd.Function):
    """Copy tensors to devices as one autograd node, as ``torch.nn.parallel._functions.Broadcast``.

    ``Broadcast.apply(devices, timeline, *tensors)`` returns, device by device, one copy of every
    tensor (``len(devices) * len(tensors)`` outputs). The first device, when it is the tensors'
    own, gets the tensors themselves (same memory). All outputs share one ``grad_fn``
    (``BroadcastBackward``), so autograd runs its backward once, after every replica's gradients
    have been computed: it sums them on the source device, as PyTorch's ``ReduceAddCoalesced``
    does, and records a ``'reduce gradients'`` event in ``timeline`` (a list) if one is given.

    >>> w = torch.ones(2, requires_grad=True)
    >>> a, b = Broadcast.apply(['cpu', 'cpu'], None, w)
    >>> type(a.grad_fn).__name__, a.data_ptr() == w.data_ptr(), b.data_ptr() == w.data_ptr()
    ('BroadcastBackward', True, False)
    >>> (2 * a + 3 * b).sum().backward()
    >>> w.grad.tolist()
    [5.0, 5.0]
    """

    @staticmethod
    def forward(ctx, devices, timeline, *tensors):
        devices = [as_device(d) for d in devices]
        source = tensors[0].device if tensors else torch.device("cpu")
        ctx.source, ctx.num_inputs, ctx.timeline = source, len(tensors), timeline
        outputs = []
        for j, device in enumerate(devices):
            if j == 0 and device == source:
                outputs.extend(tensors)  # autograd turns these into views: same memory
            else:
                outputs.extend(t.to(device, copy=True) for t in tensors)
        # As PyTorch's: copies of tensors that need no gradient need none either.
        ctx.mark_non_differentiable(*[out for i, out in enumerate(outputs)
                                      if not ctx.needs_input_grad[2 + i % len(tensors)]])
        return tuple(outputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        start = _now(ctx.timeline is not None)
        n = ctx.num_inputs
        grads = []
        for i in range(n):
            total = None
            for g in grad_outputs[i::n]:  # the gradient of tensor i in every replica
                g = g.to(ctx.source)
                total = g.clone() if total is None else total.add_(g)
            grads.append(total)
        if ctx.timeline is not None:
            ctx.timeline.append({"lane": "master", "what": "reduce gradients", "start": start,
                                 "end": _now(True)})
        return (None, None, *grads)


def replicate(network, devices, detach=False, *, timeline=None):
    """Copy ``network`` to every device as ``torch.nn.parallel.replicate`` does; one module each.

    Each replica module is made by ``nn.Module._replicate_for_data_parallel``, a *shallow* copy:
    it shares the original's ``__dict__`` entries, so forward hooks and plain attributes are the
    original's (removing a hook from the original removes it from every replica), and an attribute
    that ``forward`` sets on a replica is lost with the replica. Then, per device:

    * parameters become differentiable copies (plain attributes, not ``Parameter``s; ``detach``
      gives detached copies), all outputs of one :class:`Broadcast`, so ``backward()`` sums every
      replica's gradient into the originals at once, after the last replica's gradients are
      computed (``timeline``, a list, records that reduce);
    * buffers become copies on the device.

    Replica 0, when on the network's own device, shares the original's parameter and buffer memory
    (as PyTorch's broadcast does), so its in-place buffer updates (BatchNorm statistics) are kept.

    >>> net = nn.Linear(3, 1)
    >>> r0, r1 = replicate(net, ['cpu', 'cpu'])
    >>> torch.equal(r1.weight, net.weight), r1.weight is net.weight, r1.weight.requires_grad
    (True, False, True)
    >>> r1._forward_hooks is net._forward_hooks      # shallow: hooks are shared
    True
    >>> type(r0.weight.grad_fn).__name__, r0.weight.grad_fn is r1.weight.grad_fn   # one node
    ('BroadcastBackward', True)
    >>> (r0(torch.ones(1, 3)) + r1(torch.ones(1, 3))).sum().backward()
    >>> net.weight.grad.tolist()    # both replicas' gradients, summed into the original
    [[2.0, 2.0, 2.0]]
    """
    devices = _devices(devices)
    params = list(network.parameters())
    source = params[0].device if params else _module_device(network)
    modules = list(network.modules())
    position = {id(m): i for i, m in enumerate(modules)}
    # One copy per original tensor (tied parameters stay tied), all from one autograd node.
    if detach or not params:
        with torch.no_grad():
            flat = Broadcast.forward(_NoCtx(len(params)), devices, None,
                                     *[p.detach() for p in params])
        flat = [t.detach() for t in flat]
    else:
        flat = Broadcast.apply(devices, timeline, *params)
    replicas = []
    for j, device in enumerate(devices):
        share = j == 0 and device == source
        param_copies = {id(p): flat[j * len(params) + i] for i, p in enumerate(params)}
        copies = [m._replicate_for_data_parallel() for m in modules]
        for m, rep in zip(modules, copies):
            rep._former_parameters = collections.OrderedDict()  # as torch's replicate (for DDP)
            for key, child in m._modules.items():
                rep._modules[key] = None if child is None else copies[position[id(child)]]
            for key, p in m._parameters.items():
                if p is None:
                    rep._parameters[key] = None
                else:
                    # Replica parameters are not leaves: set them as plain attributes.
                    setattr(rep, key, param_copies[id(p)])
                    rep._former_parameters[key] = param_copies[id(p)]
            for key, b in m._buffers.items():
                if b is None or share:
                    continue  # the copied _buffers dict already holds the original tensor
                keep_grad = b.requires_grad and not detach
                rep._buffers[key] = (b if keep_grad else b.detach()).to(device, copy=True)
        replicas.append(copies[0])
    return replicas


class _NoCtx:
    """Stands in for autograd's ``ctx`` when :class:`Broadcast` copies without a graph."""

    def __init__(self, num_inputs):
        self.needs_input_grad = (False, False) + (False,) * num_inputs

    def mark_non_differentiable(self, *tensors):
        pass


# ------------------------------------------------------------------ parallel_apply


def _autocast_state(device):
    kind = device.type
    try:
        return torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
    except (AttributeError, RuntimeError, TypeError):
        return False, None


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None, *, timeline=None):
    """Run ``modules[i](*inputs[i], **kwargs_tup[i])`` in parallel threads; return the outputs in
    order.

    An exception in any replica is raised in the caller with the replica's index and traceback.
    Replicas on the CPU split torch's intra-op threads between them while they run (k replicas get
    ``torch.get_num_threads() // k`` each, at least 1), so they do not oversubscribe the cores.
    With a list as ``timeline``, one event per replica is appended to it (in replica order):
    ``{'lane': 'replica i', 'what': 'forward', 'start': s, 'end': e}``, times from
    ``time.perf_counter()``.

    >>> outs = parallel_apply([nn.Identity(), nn.Identity()], [(torch.zeros(1),), (torch.ones(1),)])
    >>> [o.item() for o in outs]
    [0.0, 1.0]
    >>> events = []
    >>> _ = parallel_apply([nn.Identity()] * 2, [(torch.zeros(1),)] * 2, timeline=events)
    >>> [(e['lane'], e['what'], e['end'] >= e['start']) for e in events]
    [('replica 0', 'forward', True), ('replica 1', 'forward', True)]
    """
    if len(modules) != len(inputs):
        raise ValueError(f"{len(modules)} modules but {len(inputs)} inputs")
    if kwargs_tup is None:
        kwargs_tup = ({},) * len(modules)
    elif len(kwargs_tup) != len(modules):
        raise ValueError(f"{len(modules)} modules but {len(kwargs_tup)} kwargs")
    if devices is None:   # as PyTorch does: the device of each replica's input
        devices = [_input_device(inp, m) for m, inp in zip(modules, inputs)]
    else:
        devices = _devices(devices)
        if len(devices) != len(modules):
            raise ValueError(f"{len(modules)} modules but {len(devices)} devices")
    grad_enabled = torch.is_grad_enabled()
    timed = timeline is not None
    # As PyTorch's parallel_apply: the caller's current stream on each GPU, read here because the
    # current stream is per thread; the replicas run on it, after the copies queued there.
    streams = [torch.cuda.current_stream(d) if d.type == "cuda" else None for d in devices]
    results = [None] * len(modules)
    times = [None] * len(modules)

    def worker(i, module, inp, kwargs, device):
        _local.index = i
        start = _now(timed, device)
        try:
            enabled, dtype = _autocast_state(device)
            none = contextlib.nullcontext()
            on_device = torch.cuda.device(device) if device.type == "cuda" else none
            stream = torch.cuda.stream(streams[i]) if streams[i] is not None else none
            autocast = torch.autocast(device.type, dtype=dtype) if enabled else none
            with torch.set_grad_enabled(grad_enabled), on_device, stream, autocast:
                if not isinstance(inp, (list, tuple)):
                    inp = (inp,)
                results[i] = ("ok", module(*inp, **kwargs))
        except BaseException as err:  # noqa: B036 - re-raised in the caller
            results[i] = ("error", err, traceback.format_exc())
        finally:
            times[i] = (start, _now(timed, device))
            _local.index = None

    args = list(zip(range(len(modules)), modules, inputs, kwargs_tup, devices))
    if len(modules) == 1:
        worker(*args[0])
    else:
        # Replicas on the CPU share its cores: each thread would otherwise start a full team of
        # torch's intra-op threads, and k replicas would run k times as many threads as cores.
        # A new thread takes torch's thread count when it first computes, so set it before.
        threads_before = torch.get_num_threads()
        cpu_replicas = sum(d.type == "cpu" for d in devices)
        if cpu_replicas > 1:
            torch.set_num_threads(max(1, threads_before // cpu_replicas))
        try:
            threads = [threading.Thread(target=worker, args=a, name=f"replica-{a[0]}")
                       for a in args]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        finally:
            torch.set_num_threads(threads_before)
    if timeline is not None:
        # Appended here, in replica order, rather than from the threads (whose order varies).
        timeline.extend({"lane": f"replica {i}", "what": "forward", "start": s, "end": e}
                        for i, (s, e) in enumerate(times))
    outputs = []
    for i, r in enumerate(results):
        if r[0] == "error":
            _, err, tb = r
            if _rebuildable(err):
                raise type(err)(f"{err}\n(raised in replica {i} on device {devices[i]}; its "
                                f"traceback:)\n{tb}") from err
            raise err
        outputs.append(r[1])
    return outputs


def _rebuildable(err):
    try:
        type(err)("probe")
        return True
    except Exception:
        return False


def _input_device(inp, module):
    """The device of the first tensor in ``inp`` (as ``torch.nn.parallel.parallel_apply`` takes
    it, with ``get_a_var``), else of ``module``'s first parameter or buffer (a replica keeps its
    parameter copies as plain attributes, not parameters), else the CPU.

    >>> _input_device((torch.zeros(1, device='meta'),), nn.Linear(1, 1))
    device(type='meta')
    """
    if isinstance(inp, torch.Tensor):
        return inp.device
    items = inp.values() if isinstance(inp, dict) else inp if isinstance(inp, (list, tuple)) else ()
    for item in items:
        found = _input_device(item, None)
        if found is not None:
            return found
    return None if module is None else _module_device(module)


def _module_device(module):
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return torch.device("cpu")


# ------------------------------------------------------------------ gather


def gather(outputs, target_device, dim=0):
    """Concatenate per-replica outputs on ``target_device`` (recursing into tuples/lists/dicts).

    0-dim outputs (e.g. a loss computed inside ``forward``) cannot be concatenated: as PyTorch does,
    they are unsqueezed into a vector of per-replica values, with a warning.

    >>> gather([torch.zeros(2, 3), torch.ones(1, 3)], 'cpu').shape
    torch.Size([3, 3])
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter('always')
    ...     v = gather([torch.tensor(1.0), torch.tensor(3.0)], 'cpu')
    >>> v.tolist(), 'scalars' in str(w[0].message)
    ([1.0, 3.0], True)
    """
    target = as_device(target_device)
    if not outputs:
        raise ValueError("gather needs at least one output")

    def gather_map(outs):
        out = outs[0]
        if isinstance(out, torch.Tensor):
            tensors = list(outs)
            if all(t.dim() == 0 for t in tensors) and dim == 0:
                warnings.warn("Was asked to gather along dimension 0, but all input tensors were "
                              "scalars; will instead unsqueeze and return a vector.")
                tensors = [t.view(1) for t in tensors]
            return torch.cat([t.to(target) for t in tensors], dim=dim)
        if out is None:
            return None
        if isinstance(out, dict):
            if not all(len(out) == len(d) for d in outs):
                raise ValueError("all dicts must have the same number of keys")
            return type(out)((k, gather_map([d[k] for d in outs])) for k in out)
        if isinstance(out, tuple) and hasattr(out, "_fields"):
            return type(out)(*map(gather_map, zip(*outs)))
        if isinstance(out, (list, tuple)):
            return type(out)(map(gather_map, zip(*outs)))
        return out

    return gather_map(outputs)


# ------------------------------------------------------------------ the whole thing


def _check_on_source(module, src_device):
    for t in list(module.parameters()) + list(module.buffers()):
        if t.device != src_device:
            raise RuntimeError(
                f"module must have its parameters and buffers on device {src_device} "
                f"(device_ids[0]) but found one of them on device: {t.device}; "
                f"call .to({str(src_device)!r}) on the model (or the wrapper) before its first "
                "forward")


@contextlib.contextmanager
def _span(timeline, what, lane="master"):
    """Append ``{'lane', 'what', 'start', 'end'}`` for the ``with`` block to a ``timeline`` list
    (on GPUs, from the end of the work queued before the block to the end of the block's work)."""
    start = _now(timeline is not None)
    try:
        yield
    finally:
        if timeline is not None:
            timeline.append({"lane": lane, "what": what, "start": start, "end": _now(True)})


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None,
                  *, timeline=None):
    """Evaluate ``module(*inputs)`` data-parallel over ``device_ids``: the four steps in one call.

    As in PyTorch, ``module`` must be on ``device_ids[0]``. With a list as ``timeline``, the steps
    are recorded in it: ``scatter``, ``replicate`` and ``gather`` on lane ``'master'``, each
    replica's ``forward`` (see :func:`parallel_apply`) and, during backward, the ``reduce
    gradients`` of the :class:`Broadcast` node.

    >>> net = nn.Linear(4, 2)
    >>> X = torch.randn(6, 4)
    >>> torch.allclose(data_parallel(net, X, ['cpu'] * 3), net(X), atol=1e-6)
    True
    >>> events = []
    >>> _ = data_parallel(net, X, ['cpu'] * 2, timeline=events)
    >>> [(e['lane'], e['what']) for e in events]      # doctest: +NORMALIZE_WHITESPACE
    [('master', 'scatter'), ('master', 'replicate'), ('replica 0', 'forward'),
     ('replica 1', 'forward'), ('master', 'gather')]
    """
    if device_ids is None:
        device_ids = [_module_device(module)]
    devices = _devices(device_ids, "device_ids")
    _check_on_source(module, devices[0])
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    output_device = as_device(output_device) if output_device is not None else devices[0]
    with _span(timeline, "scatter"):
        ins, kws = scatter_kwargs(inputs, module_kwargs or {}, devices, dim)
    if not ins and not kws:
        ins, kws = ((),), ({},)
    if len(devices) == 1:
        # One device: no copies, no threads (as nn.DataParallel does).
        with _span(timeline, "forward", "replica 0"):
            return module(*ins[0], **kws[0])
    used = devices[:len(ins)]
    with _span(timeline, "replicate"):
        replicas = replicate(module, used, not torch.is_grad_enabled(), timeline=timeline)
    outputs = parallel_apply(replicas, ins, kws, used, timeline=timeline)
    with _span(timeline, "gather"):
        return gather(outputs, output_device, dim)


class DataParallel(nn.Module):
    """``nn.DataParallel`` for any devices (same constructor), CPU replicas included.

    The wrapped network is ``.module``, so ``state_dict()`` keys gain the same ``module.`` prefix.
    Set ``.timeline`` to a list to record every forward's steps in it (see :func:`data_parallel`).

    >>> net = DataParallel(nn.Linear(4, 2), device_ids=['cpu', 'cpu'])
    >>> net(torch.randn(5, 4)).shape, list(net.state_dict())
    (torch.Size([5, 2]), ['module.weight', 'module.bias'])
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        if device_ids is None:
            device_ids = try_all_gpus()
        self.module = module
        self.device_ids = _devices(device_ids, "device_ids")
        self.output_device = (as_device(output_device) if output_device is not None
                              else self.device_ids[0])
        self.dim = dim
        self.src_device = self.device_ids[0]
        self.timeline = None

    def forward(self, *inputs, **kwargs):
        return data_parallel(self.module, inputs, self.device_ids, self.output_device, self.dim,
                             kwargs, timeline=self.timeline)


def wrap_data_parallel(net, devices):
    """Move ``net`` to ``devices[0]`` and wrap it for data parallelism over ``devices``.

    Several GPUs: ``torch.nn.DataParallel``. Several entries otherwise (e.g. ``['cpu', 'cpu']``):
    this module's thread-replica :class:`DataParallel`. One device: the network itself.

    >>> type(wrap_data_parallel(nn.Linear(2, 2), ['cpu', 'cpu'])).__module__   # not torch's
    'dltools.parallel'
    >>> type(wrap_data_parallel(nn.Linear(2, 2), ['cpu'])).__name__
    'Linear'
    """
    devices = _devices(devices)
    net = net.to(devices[0])
    if len(devices) == 1:
        return net
    if all(d.type == "cuda" for d in devices):
        return nn.DataParallel(net, device_ids=devices)
    return DataParallel(net, device_ids=devices)
