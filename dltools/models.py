"""Models: the residual block and the ResNet-18 variant of d2l's multi-GPU chapter.

All layers are ordinary (not lazy) modules, so a freshly built network has real parameters and
``DataParallel`` can replicate it before any forward pass.
"""
import numbers

import torch  # noqa: F401  (the doctests use it)
from torch import nn
from torch.nn import functional as F

__all__ = ["Residual", "resnet18", "init_weights_normal", "num_params"]


class Residual(nn.Module):
    """The residual block of ResNet (d2l's ``Residual`` with explicit input channels).

    >>> blk = Residual(3, 6, use_1x1conv=True, strides=2)
    >>> blk(torch.rand(4, 3, 6, 6)).shape
    torch.Size([4, 6, 3, 3])
    """

    def __init__(self, input_channels, num_channels, use_1x1conv=False, strides=1):
        super().__init__()
        if input_channels != num_channels and not use_1x1conv:
            raise ValueError(f"a block from {input_channels} to {num_channels} channels needs "
                             "use_1x1conv=True to match the shortcut's channels")
        self.conv1 = nn.Conv2d(input_channels, num_channels, kernel_size=3, padding=1,
                               stride=strides)
        self.conv2 = nn.Conv2d(num_channels, num_channels, kernel_size=3, padding=1)
        self.conv3 = (nn.Conv2d(input_channels, num_channels, kernel_size=1, stride=strides)
                      if use_1x1conv else None)
        self.bn1 = nn.BatchNorm2d(num_channels)
        self.bn2 = nn.BatchNorm2d(num_channels)

    def forward(self, X):
        Y = F.relu(self.bn1(self.conv1(X)))
        Y = self.bn2(self.conv2(Y))
        if self.conv3 is not None:
            X = self.conv3(X)
        return F.relu(Y + X)


def _resnet_block(input_channels, num_channels, num_residuals, first_block=False):
    blk = []
    for i in range(num_residuals):
        if i == 0 and not first_block:
            blk.append(Residual(input_channels, num_channels, use_1x1conv=True, strides=2))
        else:
            blk.append(Residual(num_channels, num_channels))
    return nn.Sequential(*blk)


def resnet18(num_classes, in_channels=1, width=64):
    """A slightly modified ResNet-18 (3x3 stride-1 first conv, no max-pool), as in d2l's multi-GPU
    chapter. ``width`` is the channel count of the first stage (64 in d2l; 16 makes a CPU-friendly
    network with 1/16 of the parameters).

    >>> net = resnet18(10)
    >>> num_params(net)
    11175818
    >>> resnet18(10, width=16)(torch.rand(2, 1, 28, 28)).shape
    torch.Size([2, 10])
    """
    for name, value in (("num_classes", num_classes), ("in_channels", in_channels),
                        ("width", width)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
            raise ValueError(f"{name} must be a whole number of at least 1, got {value!r} "
                             "(e.g. resnet18(10) for Fashion-MNIST's 10 classes)")
    c = width
    net = nn.Sequential(
        nn.Conv2d(in_channels, c, kernel_size=3, stride=1, padding=1),
        nn.BatchNorm2d(c),
        nn.ReLU())
    net.add_module("resnet_block1", _resnet_block(c, c, 2, first_block=True))
    net.add_module("resnet_block2", _resnet_block(c, 2 * c, 2))
    net.add_module("resnet_block3", _resnet_block(2 * c, 4 * c, 2))
    net.add_module("resnet_block4", _resnet_block(4 * c, 8 * c, 2))
    net.add_module("global_avg_pool", nn.AdaptiveAvgPool2d((1, 1)))
    net.add_module("fc", nn.Sequential(nn.Flatten(), nn.Linear(8 * c, num_classes)))
    return net


def init_weights_normal(module, std=0.01):
    """Initialise Linear and Conv2d weights from N(0, std^2), as d2l's multi-GPU chapter does.

    Use as ``net.apply(init_weights_normal)``.

    >>> layer = nn.Linear(1000, 1000); init_weights_normal(layer)
    >>> abs(layer.weight.std().item() - 0.01) < 1e-3
    True
    """
    if isinstance(module, (nn.Linear, nn.Conv2d)):
        nn.init.normal_(module.weight, std=std)


def num_params(net):
    """Count the parameters of a network.

    >>> num_params(nn.Linear(10, 1))
    11
    """
    return sum(p.numel() for p in net.parameters())
