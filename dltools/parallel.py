"""DataParallel's four steps, over any list of devices: replicate -> scatter -> parallel_apply -> gather.

``torch.nn.parallel``'s functions refuse CPU devices, and ``nn.DataParallel`` without CUDA simply
calls the module. This module implements the same four steps with the same semantics, for any
devices, including the same CPU device several times (each replica runs in its own thread):

* ``scatter`` splits tensors along ``dim`` with ``torch.chunk`` (uneven last chunk; fewer chunks than
  devices when the batch is small) and recurses into tuples, lists and dicts;
* ``replicate`` copies the module to each device; replica parameters are differentiable copies of the
  originals, so ``backward()`` sums every replica's gradient into the original parameters;
  replica 0 on the source device shares the original's memory (as PyTorch's broadcast does);
* ``parallel_apply`` runs replica ``i`` on input chunk ``i`` in thread ``i``;
* ``gather`` concatenates the outputs on ``output_device`` (0-dim outputs are unsqueezed into a
  vector, with PyTorch's warning).

Two tools look at the cost: :func:`step_traffic` counts the bytes one training step moves to and
from the master device, and a ``timeline`` list (given to :func:`parallel_apply`,
:func:`data_parallel` or set as ``DataParallel.timeline``) records when each step ran, per replica.

On GPUs, prefer ``torch.nn.DataParallel`` itself; :func:`wrap_data_parallel` picks for you.
"""
import contextlib
import copy
import threading
import time
import traceback
import warnings

import torch
from torch import nn

__all__ = ["as_device", "chunk_sizes", "replicate", "scatter", "scatter_kwargs", "parallel_apply",
           "gather", "data_parallel", "DataParallel", "wrap_data_parallel", "replica_index",
           "step_traffic", "tensor_bytes"]

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
        raise ValueError(f"{what} is None; pass a list such as ['cpu', 'cpu'] or dltools.try_all_gpus()")
    devices = [as_device(d) for d in devices]
    if not devices:
        raise ValueError(f"{what} is empty: data parallelism needs at least one device, e.g. "
                         "['cpu', 'cpu'] for two CPU replicas or dltools.try_all_gpus()")
    return devices


def chunk_sizes(batch_size, num_devices):
    """Rows each device gets when a batch of ``batch_size`` is split over ``num_devices``.

    This is ``torch.chunk``'s rule, which ``DataParallel`` uses: chunks of ``ceil(batch/devices)``
    rows, the last one smaller, and fewer chunks than devices when there are not enough rows.

    >>> chunk_sizes(30, 8)
    [4, 4, 4, 4, 4, 4, 4, 2]
    >>> chunk_sizes(10, 3)
    [4, 4, 2]
    >>> chunk_sizes(3, 8)        # a batch smaller than the device count: 3 replicas run
    [1, 1, 1]
    """
    if batch_size < 0 or num_devices < 1:
        raise ValueError(f"need batch_size >= 0 and num_devices >= 1, got {batch_size}, {num_devices}")
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


def replicate(network, devices, detach=False):
    """Copy ``network`` to every device; returns one module per device.

    Replica parameters are differentiable copies (unless ``detach``), so gradients computed on a
    replica flow back into ``network``'s parameters. Buffers (e.g. BatchNorm statistics) are plain
    copies; replica 0, when on the network's own device, shares them, so its in-place updates are
    kept, as in ``nn.DataParallel``.

    >>> net = nn.Linear(3, 1)
    >>> r0, r1 = replicate(net, ['cpu', 'cpu'])
    >>> torch.equal(r1.weight, net.weight), r1.weight is net.weight, r1.weight.requires_grad
    (True, False, True)
    >>> (r0(torch.ones(1, 3)) + r1(torch.ones(1, 3))).sum().backward()
    >>> net.weight.grad.tolist()    # both replicas' gradients, summed into the original
    [[2.0, 2.0, 2.0]]
    """
    devices = _devices(devices)
    params = list(network.parameters())
    source = params[0].device if params else devices[0]
    replicas = []
    for j, device in enumerate(devices):
        share = j == 0 and device == source
        # Parameters and (for the sharing replica) buffers are not deep-copied: they are replaced below.
        memo = {id(p): p for p in params}
        if share:
            memo.update({id(b): b for b in network.buffers()})
        replica = copy.deepcopy(network, memo)
        for orig, rep in zip(network.modules(), replica.modules()):
            for name, p in orig._parameters.items():
                if p is None:
                    continue
                if detach:
                    t = p.detach() if share else p.detach().to(device, copy=True)
                else:
                    t = p.view_as(p) if share else p.to(device, copy=True)
                del rep._parameters[name]
                setattr(rep, name, t)
            if not share:
                for name, b in rep._buffers.items():
                    if b is not None:
                        rep._buffers[name] = b.to(device)
        replicas.append(replica)
    return replicas


# ------------------------------------------------------------------ parallel_apply


def _autocast_state(device):
    kind = device.type
    try:
        return torch.is_autocast_enabled(kind), torch.get_autocast_dtype(kind)
    except (AttributeError, RuntimeError, TypeError):
        return False, None


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None, *, timeline=None):
    """Run ``modules[i](*inputs[i], **kwargs_tup[i])`` in parallel threads; return the outputs in order.

    An exception in any replica is raised in the caller with the replica's index and traceback.
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
    if devices is None:
        devices = [_module_device(m) for m in modules]
    else:
        devices = _devices(devices)
        if len(devices) != len(modules):
            raise ValueError(f"{len(modules)} modules but {len(devices)} devices")
    grad_enabled = torch.is_grad_enabled()
    results = [None] * len(modules)
    times = [None] * len(modules)

    def worker(i, module, inp, kwargs, device):
        _local.index = i
        start = time.perf_counter()
        try:
            enabled, dtype = _autocast_state(device)
            with torch.set_grad_enabled(grad_enabled), \
                    (torch.cuda.device(device) if device.type == "cuda" else _nullcontext()), \
                    (torch.autocast(device.type, dtype=dtype) if enabled else _nullcontext()):
                if not isinstance(inp, (list, tuple)):
                    inp = (inp,)
                results[i] = ("ok", module(*inp, **kwargs))
        except BaseException as err:  # noqa: B036 - re-raised in the caller
            results[i] = ("error", err, traceback.format_exc())
        finally:
            times[i] = (start, time.perf_counter())
            _local.index = None

    args = list(zip(range(len(modules)), modules, inputs, kwargs_tup, devices))
    if len(modules) == 1:
        worker(*args[0])
    else:
        threads = [threading.Thread(target=worker, args=a, name=f"replica-{a[0]}") for a in args]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
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


class _nullcontext:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


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
                f"call .to({str(src_device)!r}) on the model before wrapping it")


@contextlib.contextmanager
def _span(timeline, what, lane="master"):
    """Append ``{'lane', 'what', 'start', 'end'}`` for the ``with`` block to ``timeline`` (if a list)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        if timeline is not None:
            timeline.append({"lane": lane, "what": what, "start": start, "end": time.perf_counter()})


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None,
                  *, timeline=None):
    """Evaluate ``module(*inputs)`` data-parallel over ``device_ids``: the four steps in one call.

    As in PyTorch, ``module`` must be on ``device_ids[0]``. With a list as ``timeline``, the steps
    are recorded in it: ``scatter``, ``replicate`` and ``gather`` on lane ``'master'``, and each
    replica's ``forward`` (see :func:`parallel_apply`).

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
    devices = _devices(device_ids if device_ids is not None else [_module_device(module)], "device_ids")
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
        replicas = replicate(module, used, not torch.is_grad_enabled())
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
            from .devices import try_all_gpus
            device_ids = try_all_gpus()
        self.module = module
        self.device_ids = _devices(device_ids, "device_ids")
        self.output_device = as_device(output_device) if output_device is not None else self.device_ids[0]
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

    >>> wrap_data_parallel(nn.Linear(2, 2), ['cpu', 'cpu']).__class__.__name__
    'DataParallel'
    >>> wrap_data_parallel(nn.Linear(2, 2), ['cpu']).__class__.__name__
    'Linear'
    """
    devices = _devices(devices)
    net = net.to(devices[0])
    if len(devices) == 1:
        return net
    if all(d.type == "cuda" for d in devices):
        return nn.DataParallel(net, device_ids=devices)
    return DataParallel(net, device_ids=devices)


# ------------------------------------------------------------------ traffic accounting


def tensor_bytes(obj, floating_only=False):
    """Bytes held by the tensors in ``obj`` (a tensor, or tuples/lists/dicts of them).

    ``floating_only`` counts only tensors that can carry gradients (floating point or complex).

    >>> tensor_bytes(torch.zeros(2, 3)), tensor_bytes({'a': torch.zeros(4, dtype=torch.float64), 'b': 'x'})
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


def step_traffic(module, inputs, num_devices, dim=0):
    """Bytes one DataParallel training step moves between the master (device 0) and the others.

    Counted as ``nn.DataParallel`` does the step, with the batch on the master: ``scatter`` (input
    chunks sent to replicas 1..k-1), ``broadcast`` (parameters and buffers copied to them),
    ``gather`` (their outputs sent back), ``output_grads`` (backward: the gradient of those outputs
    scattered back to them) and ``reduce`` (their parameter gradients summed into the master's).
    ``k`` is the number of replicas that get rows (fewer than ``num_devices`` for a small batch).
    ``inputs`` is a tensor or a tuple of inputs. The outputs of chunks 1..k-1 are measured by
    running a copy of the module in eval mode on PyTorch's ``meta`` device, which computes shapes
    only (no arithmetic); a module that cannot run there is run for real, without gradients.

    >>> t = step_traffic(nn.Linear(10, 2), torch.zeros(8, 10), num_devices=2)
    >>> t['scatter'], t['broadcast'], t['gather'], t['output_grads'], t['reduce'], t['total']
    (160, 88, 32, 32, 88, 400)
    >>> step_traffic(nn.Linear(10, 2), torch.zeros(8, 10), num_devices=1)['total']
    0
    """
    if not isinstance(num_devices, int) or isinstance(num_devices, bool) or num_devices < 1:
        raise ValueError(f"num_devices must be an int >= 1, got {num_devices!r}")
    if not isinstance(inputs, tuple):
        inputs = (inputs,)
    devices = ["cpu"] * num_devices  # only the chunking matters here, not where chunks go
    chunks = scatter(inputs, devices, dim)
    out_chunks = [None] + _output_shapes(module, chunks[1:])  # chunk 0's output stays on the master
    others = len(chunks) - 1
    params = list(module.parameters())
    param_bytes = sum(tensor_bytes(p) for p in params)
    grad_bytes = sum(tensor_bytes(p) for p in params if p.requires_grad)
    traffic = {
        "scatter": sum(tensor_bytes(c) for c in chunks[1:]),
        "broadcast": others * (param_bytes + sum(tensor_bytes(b) for b in module.buffers())),
        "gather": sum(tensor_bytes(o) for o in out_chunks[1:]),
        "output_grads": sum(tensor_bytes(o, floating_only=True) for o in out_chunks[1:]),
        "reduce": others * grad_bytes,
    }
    traffic["total"] = sum(traffic.values())
    return traffic


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
