"""Every device decision of the course, made here and nowhere else.

- which GPUs there are: :func:`num_gpus`, :func:`try_gpu`, :func:`try_all_gpus`;
- the devices of ``k`` data-parallel replicas: :func:`replica_devices` (``k`` GPUs when the machine
  has them, else the CPU ``k`` times: ``dltools.parallel`` runs CPU replicas in threads);
- a distributed rank's device and its process group's backend: :func:`rank_device`,
  :func:`backend_for` (``dltools.launch.setup_process_group`` and the training scripts use them);
- what the machine is: :func:`device_report`, which notebooks print, and benchmarks and scripts
  put in their results.

So the same cell uses the CPU on a laptop, one GPU on Colab and all GPUs on a server. Nothing in the
course hard-codes ``cuda:0``.
"""
import os
import platform
import warnings
from pathlib import Path

import torch
import torch.distributed as dist

__all__ = ["cpu", "gpu", "num_gpus", "try_gpu", "try_all_gpus", "replica_devices", "pick_device",
           "ddp_world", "rank_device", "backend_for", "usable_cores", "device_report",
           "CPU_REPLICAS", "DEVICE_TYPES"]

#: Replicas the notebooks' DataParallel demos use on a machine with fewer than 2 GPUs: three, so
#: that a batch splits unevenly and each replica's share shows.
CPU_REPLICAS = 3

#: What a script's ``--device`` accepts: ``auto`` (the rule of :func:`try_gpu` for one process,
#: :func:`rank_device` for a rank), or one kind of device for every process.
DEVICE_TYPES = ("auto", "cpu", "cuda")


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


def _check_count(name, value, least):
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {value!r} ({type(value).__name__})")
    if value < least:
        raise ValueError(f"{name} must be {least} or more, got {value}")


def try_gpu(i=0):
    """Return ``cuda:i`` if that GPU exists, else the CPU.

    >>> try_gpu(10_000)   # no machine has that many GPUs: falls back to the CPU
    device(type='cpu')
    """
    _check_count("the GPU index", i, 0)
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


def replica_devices(k=None):
    """The devices of ``k`` data-parallel replicas: GPUs 0..k-1 when the machine has ``k`` GPUs,
    else the CPU ``k`` times (``dltools.parallel`` then runs the replicas in threads).

    ``k=None``: every GPU when there are two or more, else the CPU :data:`CPU_REPLICAS` times
    (one GPU alone would show no splitting).

    >>> replica_devices(10_000)[:2]   # no machine has that many GPUs: CPU replicas
    [device(type='cpu'), device(type='cpu')]
    >>> len(replica_devices()) == (num_gpus() if num_gpus() >= 2 else CPU_REPLICAS)
    True
    """
    if k is None:
        n = num_gpus()
        return [gpu(i) for i in range(n)] if n >= 2 else [cpu()] * CPU_REPLICAS
    _check_count("the number of replicas", k, 1)
    return [gpu(i) for i in range(k)] if num_gpus() >= k else [cpu()] * k


def _check_device_type(device_type):
    if device_type not in DEVICE_TYPES:
        raise ValueError(f"device_type must be one of {', '.join(DEVICE_TYPES)}, got "
                         f"{device_type!r}")


def pick_device(device_type="auto"):
    """One process's device: ``auto`` is :func:`try_gpu` (GPU 0, else the CPU), ``cpu`` the CPU,
    ``cuda`` GPU 0 (an error without one, rather than a silent CPU run).

    >>> pick_device("cpu")
    device(type='cpu')
    """
    _check_device_type(device_type)
    if device_type == "cpu":
        return cpu()
    if device_type == "cuda" and not num_gpus():
        raise RuntimeError("device 'cuda' asked for, but PyTorch sees no GPU here: use 'auto' or "
                           "'cpu'")
    return try_gpu()


def ddp_world():
    """How the course's DDP runs are laid out: ``(processes, device type)``. One process per GPU
    on a machine with 2 or more, else 2 processes on the CPU (one GPU is not shared by two ranks:
    see :func:`rank_device`). Run a one-process reference with the same device type, so that the
    two runs compare like with like.

    >>> nproc, device_type = ddp_world()
    >>> nproc >= 2 and device_type in ("cpu", "cuda")
    True
    """
    n = num_gpus()
    return (n, "cuda") if n >= 2 else (2, "cpu")


def rank_device(device_type="auto"):
    """This rank's device: ``cuda:LOCAL_RANK`` when there is a GPU per local process, else the CPU.

    ``LOCAL_RANK`` and ``LOCAL_WORLD_SIZE`` come from the environment (torchrun and
    ``dltools.launch`` set them; 0 and 1 outside a launcher). On a GPU the device is also made the
    current CUDA device, as ``torch.cuda.set_device`` does. With fewer GPUs than local processes
    (say 1 GPU and 2 processes) every rank uses the CPU, with a warning: two ranks of an NCCL group
    cannot share a GPU, and mixing GPU and CPU ranks would give each rank a different backend.
    ``device_type="cpu"`` puts every rank on the CPU without a warning; ``"cuda"`` raises rather
    than fall back.

    >>> cuda = torch.cuda.is_available()   # outside a launcher: LOCAL_RANK 0 of 1
    >>> rank_device() == (torch.device('cuda', 0) if cuda else torch.device('cpu'))
    True
    """
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    local_world_size = int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    if not 0 <= local_rank < local_world_size:
        raise ValueError(f"LOCAL_RANK={local_rank} must be in [0, LOCAL_WORLD_SIZE="
                         f"{local_world_size})")
    _check_device_type(device_type)
    if device_type == "cpu":
        return cpu()
    if device_type == "cuda" and num_gpus() < local_world_size:
        raise RuntimeError(f"device 'cuda' asked for: {num_gpus()} GPU(s) for {local_world_size} "
                           "processes on this node, and two ranks cannot share a GPU. Start one "
                           "process per GPU, or use 'auto' or 'cpu'.")
    if num_gpus() >= local_world_size:
        device = gpu(local_rank)
        torch.cuda.set_device(device)
        return device
    if num_gpus():
        warnings.warn(f"{num_gpus()} GPU(s) for {local_world_size} processes on this node: every "
                      "rank runs on the CPU (gloo). Start one process per GPU "
                      f"(--nproc_per_node={num_gpus()}) to use them.", stacklevel=2)
    return cpu()


def usable_cores():
    """CPU cores this process may run on (its affinity mask; ``os.cpu_count()`` where unknown).

    >>> usable_cores() >= 1
    True
    """
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def backend_for(device):
    """The process-group backend for ranks on ``device``.

    ``"cpu:gloo,cuda:nccl"`` for CUDA ranks (NCCL for their CUDA tensors, gloo for any CPU tensor,
    e.g. a loss total or ``all_gather_object``), ``"gloo"`` for CPU ranks. A bare ``"nccl"`` group
    would refuse CPU tensors.

    >>> backend_for(torch.device('cpu')), backend_for(torch.device('cuda', 1))
    ('gloo', 'cpu:gloo,cuda:nccl')
    """
    device = torch.device(device)
    if device.type == "cuda":
        if not dist.is_nccl_available():
            raise RuntimeError("this PyTorch build has no NCCL: distributed training on GPUs "
                               "needs it (install a CUDA build of PyTorch on Linux)")
        return "cpu:gloo,cuda:nccl"
    return "gloo"


def _cpu_model():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_report():
    """Describe the machine and what PyTorch sees, as a dict (printing it gives a readable report).

    ``CUDA_VISIBLE_DEVICES`` is honoured: the GPUs listed are the ones this process may use.
    ``backend`` is what :func:`backend_for` gives a rank here with one process per GPU.

    >>> r = device_report()
    >>> r['devices'][0] in ('cpu', 'cuda:0')
    True
    >>> r['backend'] in ('gloo', 'cpu:gloo,cuda:nccl')
    True
    """
    try:
        backend = backend_for(try_gpu())
    except RuntimeError:
        backend = "none for GPU ranks: this PyTorch build has no NCCL (gloo on the CPU)"
    report = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpu_cores": usable_cores(),   # the ones this process may use (affinity, containers)
        "torch_threads": torch.get_num_threads(),
        "cuda_available": torch.cuda.is_available(),
        "num_gpus": num_gpus(),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "devices": [str(d) for d in try_all_gpus()],
        "gpu_names": [torch.cuda.get_device_name(i) for i in range(num_gpus())],
        "backend": backend,
    }
    return _Report(report)


class _Report(dict):
    def __str__(self):
        width = max(len(k) for k in self)
        return "\n".join(f"{k:<{width}} : {v}" for k, v in self.items())
