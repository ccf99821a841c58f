"""What the training scripts in scripts/ share: the process group, the data, the models, the report.

Kept apart so that each DDP script differs from its single-device twin only in what DDP changes:
train_single.py -> train_ddp.py (a small CNN) and train_resnet_single.py -> train_resnet_ddp.py
(notebook 04's ResNet-18).
"""
import argparse
import gc
import hashlib
import json
import os
import sys
import tempfile
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import TensorDataset

import dltools
from dltools.distributed import setup_process_group
from dltools.launch import exit_with_parent


def setup_ddp(device_type="auto"):
    """Join the process group torchrun describes in the environment; return this process's device.

    The rule, the same for every script and worker (``dltools.distributed.setup_process_group``):
    ``cuda:LOCAL_RANK`` when there is a GPU for each local process (made the current CUDA device,
    so that a bare ``"cuda"`` means this rank's GPU; the group is bound to it with ``device_id=``,
    which ``barrier`` uses, and object collectives go through its gloo half), else the CPU; the
    group has gloo for CPU tensors and NCCL for CUDA tensors. Every tensor a script puts into a
    collective is on this device. ``device_type`` ``"cpu"`` or ``"cuda"`` asks for one kind.
    """
    if "RANK" not in os.environ or "LOCAL_RANK" not in os.environ:
        script = os.path.basename(sys.argv[0]) or "this script"
        raise SystemExit(f"{script} runs one process per device: launch it with torchrun, e.g.\n"
                         f"  python -m torch.distributed.run --standalone --nproc_per_node=2 "
                         f"scripts/{script}")
    exit_with_parent()   # torchrun killed outright: stop too, do not train on and overwrite files
    return setup_process_group(device_type)


def full_float32():
    """Run float32 convolutions on a GPU in full float32, as on a CPU.

    cuDNN's default for float32 convolutions is TF32 (``torch.backends.cudnn.conv.fp32_precision``
    is ``"tf32"``): their inputs are rounded to 10 mantissa bits. Two runs that split the batch
    differently would then drift apart far more than float32 rounding allows, and the twin
    scripts' agreement to 1e-5 (notebook 03) would not hold on GPUs: on an H200, one batch of 96
    against two halves ended 6.5e-4 apart with TF32 and 1.5e-8 apart in full float32
    (benchmarks/bench_float32_agreement.py, results/float32_agreement_h200.md). Matrix products are
    full float32 by default already. Nothing changes on a CPU.
    """
    torch.backends.cudnn.conv.fp32_precision = "ieee"


def teardown_ddp():
    """Leave together, once every DDP model is gone: call it after ``del``-ing them.

    A ``DistributedDataParallel`` keeps the process group alive (its reducer holds it). If that
    only ends at interpreter exit, gloo's threads are torn down too late and the process aborts
    ("terminate called without an active exception"), a few runs in ten on 2 cores. Collecting
    first frees a DDP model that no name refers to any more (DDP sits in reference cycles). The
    barrier: tearing gloo down while a peer still talks to it can abort that peer too.
    """
    gc.collect()
    dist.barrier()
    dist.destroy_process_group()


def per_rank_batch_size(global_batch, world_size):
    """Split the global batch evenly; refuse a split that would change the optimisation."""
    if global_batch % world_size:
        raise SystemExit(f"--batch-size {global_batch} must be divisible by the {world_size} "
                         f"processes: use a multiple of {world_size}")
    return global_batch // world_size


# ------------------------------------------------------------ small CNN (train_single, train_ddp)


def load_train_set(num_train):
    """The first ``num_train`` Fashion-MNIST training images as a dataset of (1, 28, 28) floats.

    Under DDP one rank per node prepares the files while the others wait, then all read them
    (``dltools.data.load_fashion_mnist_distributed``); every rank must call it."""
    images, labels = dltools.data.load_fashion_mnist_distributed(train=True)
    if not 1 <= num_train <= len(labels):
        raise ValueError(f"--num-train must be between 1 and {len(labels)}, got {num_train}")
    X = images[:num_train].unsqueeze(1).float() / 255
    return TensorDataset(X, labels[:num_train])


def build_model(width=8):
    """A small LeNet-style CNN without BatchNorm, so that data parallelism changes no arithmetic."""
    return nn.Sequential(
        nn.Conv2d(1, width, kernel_size=5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(width, 2 * width, kernel_size=5), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(2 * width * 5 * 5, 64), nn.ReLU(), nn.Linear(64, 10))


# ------------------------------------------------------------------ ResNet-18 (notebook 04)


def load_split(train, num, root=None):
    """Fashion-MNIST's training or test set (its first ``num`` images; all if None) as a dataset of
    uint8 images and labels (``.tensors``): kept as bytes until :func:`to_input`, which converts
    on the device. Under DDP, as :func:`load_train_set`: every rank must call it."""
    images, labels = dltools.data.load_fashion_mnist_distributed(train=train, root=root)
    if num is not None:
        if not 1 <= num <= len(labels):
            raise ValueError(f"--num-{'train' if train else 'test'} must be in "
                             f"1..{len(labels)}, got {num}")
        images, labels = images[:num], labels[:num]
    return TensorDataset(images, labels)


def to_input(images, device):
    """uint8 (B, 28, 28) -> float (B, 1, 28, 28) in [0, 1], as dltools.load_data_fashion_mnist."""
    return images.to(device).unsqueeze(1).float().div_(255)


def build_resnet(width, seed):
    """The course's ResNet-18 for Fashion-MNIST, initialised as notebook 04 does."""
    dltools.seed_everything(seed)
    net = dltools.resnet18(10, width=width)
    net.apply(dltools.init_weights_normal)
    return net


def count_correct(net, images, labels, batch_size, device):
    """``tensor([correct, seen])`` of ``net`` (in eval mode) on the given images, on ``device``."""
    net.eval()
    counts = torch.zeros(2, dtype=torch.float64, device=device)
    with torch.no_grad():
        for i in range(0, len(labels), batch_size):
            y = labels[i:i + batch_size].to(device)
            y_hat = net(to_input(images[i:i + batch_size], device))
            counts[0] += (y_hat.argmax(dim=1) == y).sum()
            counts[1] += len(y)
    return counts


# ------------------------------------------------------------------ arguments
# Checked by argparse before any work: a bad value stops the script at once, with usage and the
# reason, and nothing on disk is touched.


def positive_int(text):
    """A whole number of 1 or more (epochs, images, channels, batch sizes).

    >>> positive_int("3"), positive_int("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be 1 or more, got -1
    """
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def positive_float(text):
    """A number above 0 (a learning rate).

    >>> positive_float("0.1"), positive_float("nan")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: must be a number above 0, got 'nan'
    """
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a number above 0, got {text!r}")
    return value


def image_count(split):
    """An argparse type for ``--num-train`` (``split="train"``) or ``--num-test``: a whole number of
    images, at most as many as Fashion-MNIST's split has, refused before any work.

    >>> image_count("test")("10001")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: Fashion-MNIST has 10,000 test images, got 10001
    """
    total = {"train": 60000, "test": 10000}[split]

    def count(text):
        value = positive_int(text)
        if value > total:
            raise argparse.ArgumentTypeError(f"Fashion-MNIST has {total:,} {split} images, "
                                             f"got {value}")
        return value
    return count


def output_file(text):
    """A file the script writes when it has finished (``--report``, ``--checkpoint``), checked
    now: its folder must exist and be writable, and it must not be a folder itself.

    >>> output_file("/no/such/folder/r.json")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: the folder /no/such/folder does not exist: create it first
    """
    path = Path(text).expanduser()
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text} is a folder: give a file name in it")
    folder = path.parent
    if not folder.is_dir():
        # The nearest part of the path that exists: a file there means no folder can be made.
        there = next((p for p in folder.parents if p.exists()), None) if not folder.exists() \
            else folder
        if there is not None and not there.is_dir():
            raise argparse.ArgumentTypeError(f"{there} is a file, not a folder: put {path.name} "
                                             "in a folder")
        raise argparse.ArgumentTypeError(f"the folder {folder} does not exist: create it first")
    try:   # a real try: os.access says yes to root, and to folders such as /proc
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError:
        raise argparse.ArgumentTypeError(
            f"cannot write in {folder}: choose another folder") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise argparse.ArgumentTypeError(f"{text} is read-only: make it writable or choose "
                                         "another file")
    return path


def distinct_outputs(parser, args, *names):
    """Stop (``parser.error``) when two of the output arguments ``names`` are the same file: the
    second write would destroy the first."""
    seen = {}
    for name in names:
        path = getattr(args, name)
        if path is None:
            continue
        key = Path(path).resolve()
        option = "--" + name.replace("_", "-")
        if key in seen:
            parser.error(f"{seen[key]} and {option} are the same file ({path}): the one written "
                         "last would replace the other; give each its own file")
        seen[key] = option


def _replace_atomically(path, write):
    """``write(temporary path)``, then rename it over ``path``: the file is whole or untouched."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def save_checkpoint(state_dict, path):
    """Save a model's weights to ``path``, whole or not at all (an interruption leaves the earlier
    checkpoint)."""
    _replace_atomically(path, lambda tmp: torch.save(state_dict, tmp))


# ------------------------------------------------------------------ reports


def fingerprint(model):
    """A short hash of the parameters' exact bytes: equal fingerprints = identical replicas."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def summary(args, trainer, history, seconds, device):
    """The report keys both ResNet scripts share: the setting, the history, the speed."""
    return dict(device_type=device.type, global_batch_size=args.batch_size,
                per_rank_batch_size=trainer.batch_size, lr=args.lr, epochs=args.epochs,
                width=args.width, num_train=len(trainer.train_set),
                num_test=len(trainer.test_set), steps_per_epoch=len(trainer.loader),
                history=history, test_acc=history[-1][3],
                train_examples_per_epoch=trainer.examples_per_epoch,
                sec_per_epoch=sum(seconds) / len(seconds),
                examples_per_sec=args.epochs * len(trainer.train_set) / sum(seconds))


def shard_report(shards, orders, num_train):
    """What DistributedSampler did: each rank's share of epoch 0, whether the shards cover the
    training set exactly once, and whether ``set_epoch`` changed the order (None after 1 epoch)."""
    seen = sorted(i for shard in shards for i in shard)
    return dict(shard_sizes=[len(shard) for shard in shards],
                shards_cover_train_set_once=seen == list(range(num_train)),
                set_epoch_reshuffles=orders[0] != orders[1] if len(orders) > 1 else None)


def write_report(path, **results):
    """Write ``results`` as JSON to ``path`` (``--report``); nothing when no path was given.

    The file is written whole or not at all: to a temporary file beside it, then renamed over it,
    so an interruption never leaves half a report where the earlier one was."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        text = json.dumps(results, indent=1) + "\n"
        _replace_atomically(path, lambda tmp: tmp.write_text(text))
