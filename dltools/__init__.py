"""dltools: the helper package of the dp-course notebooks.

Names follow ``d2l.torch`` where d2l has the same function, so d2l-style code runs on it::

    import dltools
    devices = dltools.try_all_gpus()          # [cpu] on a machine without GPUs, never []
    train_iter, test_iter = dltools.load_data_fashion_mnist(256)
    timer = dltools.Timer()

One idea per module: devices, timing, plotting, data, models, training, parallel, distributed,
paths (where the course's own files are), requirements (its version floors, checked),
exercises.
"""
import torch  # dltools.torch, as d2l.torch has it; seed_everything's doctest uses it

from . import distributed, exercises, parallel, paths, requirements
from .data import (
    FASHION_MNIST_ARCHIVES,
    DatasetUnavailableError,
    RandomDataset,
    classification_data,
    data_root,
    get_fashion_mnist_labels,
    load_array,
    load_data_fashion_mnist,
    regression_data,
    synthetic_data,
)
from .devices import (
    DEVICE_TYPES,
    cpu,
    ddp_world,
    device_report,
    gpu,
    num_gpus,
    pick_device,
    replica_devices,
    try_all_gpus,
    try_gpu,
)
from .models import Residual, init_weights_normal, num_params, resnet18
from .parallel import chunk_sizes, data_parallel, split_batch, wrap_data_parallel
from .timing import Accumulator, Timer
from .training import accuracy, evaluate_accuracy_gpu, progress, sgd, train_batch_ch13, train_ch13

__version__ = "0.1.0"

# Plotting names load matplotlib.pyplot on first use only: worker processes (DDP, benchmarks) import
# dltools but never plot, and pyplot costs them about a second each at start-up.
_PLOTTING = ("Animator", "plot", "plot_timeline", "set_axes", "set_figsize", "show_images",
             "use_svg_display")


def __getattr__(name):
    if name == "plotting" or name in _PLOTTING:
        import importlib
        # not `from . import plotting`: that looks the name up here again, and recurses
        plotting = importlib.import_module(".plotting", __name__)
        return plotting if name == "plotting" else getattr(plotting, name)
    raise AttributeError(f"module 'dltools' has no attribute {name!r}")


def __dir__():
    return sorted(list(globals()) + ["plotting", *_PLOTTING])


def seed_everything(seed=0):
    """Seed Python's, NumPy's and PyTorch's random generators (all devices).

    >>> seed_everything(0); a = torch.rand(1); seed_everything(0); torch.equal(a, torch.rand(1))
    True
    """
    import random

    import numpy as np
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)

