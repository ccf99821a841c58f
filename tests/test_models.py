import pytest
import torch
from torch import nn

import dltools
from dltools import parallel


def test_resnet18_has_d2l_parameter_count_and_output_shape():
    net = dltools.resnet18(10)
    assert dltools.num_params(net) == 11_175_818
    net.eval()
    assert net(torch.rand(2, 1, 28, 28)).shape == (2, 10)


def test_narrow_resnet18_is_much_smaller():
    full = dltools.num_params(dltools.resnet18(10))
    assert dltools.num_params(dltools.resnet18(10, width=16)) < full / 10


def test_resnet18_has_no_lazy_modules_so_it_can_be_replicated_before_a_forward():
    net = dltools.resnet18(10, width=8)
    assert not any(isinstance(m, nn.modules.lazy.LazyModuleMixin) for m in net.modules())
    replicas = parallel.replicate(net, ["cpu", "cpu"])
    assert len(replicas) == 2


def test_residual_shapes_and_shortcut():
    blk = dltools.Residual(3, 3)
    assert blk(torch.rand(4, 3, 6, 6)).shape == (4, 3, 6, 6)
    blk = dltools.Residual(3, 6, use_1x1conv=True, strides=2)
    assert blk(torch.rand(4, 3, 6, 6)).shape == (4, 6, 3, 3)


def test_residual_without_1x1_conv_cannot_change_channels():
    with pytest.raises(ValueError, match="use_1x1conv=True"):
        dltools.Residual(3, 6)


def test_init_weights_normal_only_touches_linear_and_conv():
    net = nn.Sequential(nn.Conv2d(1, 64, 3), nn.BatchNorm2d(64), nn.Flatten(), nn.Linear(10, 2000))
    net.apply(dltools.init_weights_normal)
    assert net[0].weight.std().item() == pytest.approx(0.01, rel=0.2)
    assert net[3].weight.std().item() == pytest.approx(0.01, rel=0.1)
    assert torch.equal(net[1].weight, torch.ones(64))


def test_resnet18_rejects_bad_width():
    with pytest.raises(ValueError, match="width"):
        dltools.resnet18(10, width=0)


@pytest.mark.parametrize("kwargs", [{"num_classes": 0}, {"num_classes": 2.5},
                                    {"num_classes": 10, "in_channels": 0},
                                    {"num_classes": True}])
def test_resnet18_rejects_bad_class_or_channel_counts(kwargs):
    with pytest.raises(ValueError, match="whole number of at least 1"):
        dltools.resnet18(**kwargs)
