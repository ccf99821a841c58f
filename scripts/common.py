"""What every training script in scripts/ shares: the data, the model, the report.

Kept apart so that train_single.py and train_ddp.py differ only in what DDP changes.
"""
import hashlib
import json

import torch
from torch import nn
from torch.utils.data import TensorDataset

import dltools


def load_train_set(num_train):
    """The first ``num_train`` Fashion-MNIST training images as a dataset of (1, 28, 28) floats."""
    images, labels = dltools.data.load_fashion_mnist(train=True)
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


def fingerprint(model):
    """A short hash of the parameters' exact bytes: equal fingerprints = identical replicas."""
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def write_report(path, **results):
    if path:
        with open(path, "w") as f:
            json.dump(results, f, indent=1)
