"""Device discovery: which devices a notebook should use, and which distributed backend goes with
them.

Every notebook chooses its devices here, at run time, so the same cell uses the CPU on a laptop,
one GPU on Colab and all GPUs on a server. Nothing in the course hard-codes ``cuda:0``.
"""
import os
import platform

import torch

__all__ = ["cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "device_report",
           "distributed_backend"]


def cpu():
    """Return the CPU device.

    >>> cpu()
    device(type='cpu')
    """
    return torch.device("cpu")


def gpu(i=0):
    """Return the device object of GPU ``i`` (it need not exist; use :func:`try_gpu` to fall back).

    >>> gpu(1)
    device(type='cuda', index=1)
    """
    return torch.device(f"cuda:{i}")


def num_gpus():
    """Return the number of GPUs PyTorch can see (after ``CUDA_VISIBLE_DEVICES``).

    >>> num_gpus() >= 0
    True
    """
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _check_index(i):
    if isinstance(i, bool) or not isinstance(i, int):
        raise TypeError(f"the GPU index must be an int, got {i!r} ({type(i).__name__})")
    if i < 0:
        raise ValueError(f"the GPU index must be 0 or more, got {i}")


def try_gpu(i=0):
    """Return ``cuda:i`` if that GPU exists, else the CPU.

    >>> try_gpu(10_000)   # no machine has that many GPUs: falls back to the CPU
    device(type='cpu')
    """
    _check_index(i)
    return gpu(i) if num_gpus() >= i + 1 else cpu()


def try_all_gpus():
    """Return all GPUs, or ``[cpu]`` if there is none.

    Unlike d2l 1.0.3 (which returns ``[]`` and then fails in its own training code), the list is
    never empty, so ``devices[0]`` is always a device to put the model on.

    >>> devices = try_all_gpus()
    >>> len(devices) >= 1
    True
    >>> devices == [cpu()] or all(d.type == 'cuda' for d in devices)
    True
    """
    n = num_gpus()
    return [gpu(i) for i in range(n)] if n else [cpu()]


def distributed_backend(devices=None):
    """Pick the ``torch.distributed`` backend: ``'nccl'`` for CUDA devices, ``'gloo'`` otherwise.

    With no argument, decide from what the machine has.

    >>> distributed_backend([cpu()])
    'gloo'
    >>> distributed_backend([gpu(0), gpu(1)])
    'nccl'
    """
    if devices is None:
        devices = try_all_gpus()
    devices = [torch.device(d) for d in devices]
    if not devices:
        raise ValueError("distributed_backend needs at least one device (got an empty list)")
    kinds = {d.type for d in devices}
    if kinds == {"cuda"}:
        nccl = torch.distributed.is_available() and torch.distributed.is_nccl_available()
        return "nccl" if nccl else "gloo"
    return "gloo"


def device_report():
    """Describe what PyTorch sees, as a dict (printing it gives a readable report).

    ``CUDA_VISIBLE_DEVICES`` is honoured: the GPUs listed are the ones this process may use.

    >>> r = device_report()
    >>> r['devices'][0] in ('cpu', 'cuda:0')
    True
    >>> r['backend'] in ('gloo', 'nccl')
    True
    """
    devices = try_all_gpus()
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda_available": torch.cuda.is_available(),
        "num_gpus": num_gpus(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "cpu_cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "devices": [str(d) for d in devices],
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(num_gpus())],
        "backend": distributed_backend(devices),
    }
    return _Report(report)


class _Report(dict):
    def __str__(self):
        width = max(len(k) for k in self)
        return "\n".join(f"{k:<{width}} : {v}" for k, v in self.items())
