import pytest
import torch
from torch import nn

import dltools


def _toy_data(n=256, seed=0):
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, 1, 4, 4, generator=g)
    y = (X.flatten(1)[:, :8].sum(1) > X.flatten(1)[:, 8:].sum(1)).long()
    return [(X[i:i + 32], y[i:i + 32]) for i in range(0, n, 32)]


def _net():
    torch.manual_seed(0)
    return nn.Sequential(nn.Flatten(), nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 2))


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_train_ch13_learns_and_reports(reduction, capsys):
    data = _toy_data()
    net = _net()
    r = dltools.train_ch13(net, data, data, nn.CrossEntropyLoss(reduction=reduction),
                           torch.optim.SGD(net.parameters(), lr=0.1), 8, ["cpu"],
                           animate=False, progress_bar=False)
    assert len(r["history"]) == 8
    assert r["history"][-1][1] < r["history"][0][1], "training loss must go down"
    assert r["test_acc"] > 0.8
    assert r["examples_per_sec"] > 0 and r["sec_per_epoch"] > 0
    out = capsys.readouterr().out
    assert f"test acc {r['test_acc']:.3f}" in out and "examples/sec on ['cpu']" in out


def test_train_ch13_on_two_cpu_replicas_matches_one_device():
    data = _toy_data()
    results = []
    for devices in (["cpu"], ["cpu", "cpu"]):
        net = _net()
        r = dltools.train_ch13(net, data, data, nn.CrossEntropyLoss(reduction="sum"),
                               torch.optim.SGD(net.parameters(), lr=0.01), 3, devices,
                               animate=False, progress_bar=False, verbose=False)
        results.append((r, [p.detach().clone() for p in net.parameters()]))
    (r1, p1), (r2, p2) = results
    assert isinstance(r2["net"], dltools.parallel.DataParallel)
    for a, b in zip(p1, p2):
        assert torch.allclose(a, b, atol=1e-5), "2 replicas must train like 1 device (no BatchNorm)"


def test_train_ch13_defaults_to_available_devices_and_animates():
    data = _toy_data(64)
    net = _net()
    r = dltools.train_ch13(net, data, data, nn.CrossEntropyLoss(),
                           torch.optim.SGD(net.parameters(), lr=0.1), 2, progress_bar=False,
                           verbose=False)
    assert next(r["net"].parameters()).device == dltools.try_all_gpus()[0]


@pytest.mark.parametrize("kwargs, match", [({"devices": []}, "devices is empty"),
                                           ({"num_epochs": 0}, "num_epochs")])
def test_train_ch13_bad_input(kwargs, match):
    data = _toy_data(64)
    net = _net()
    args = dict(num_epochs=1, devices=["cpu"])
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        dltools.train_ch13(net, data, data, nn.CrossEntropyLoss(),
                           torch.optim.SGD(net.parameters(), lr=0.1), animate=False,
                           progress_bar=False, **args)


def test_train_ch13_empty_data():
    net = _net()
    with pytest.raises(ValueError, match="no batches"):
        dltools.train_ch13(net, [], [], nn.CrossEntropyLoss(),
                           torch.optim.SGD(net.parameters(), lr=0.1), 1, ["cpu"], animate=False,
                           progress_bar=False)


def test_evaluate_accuracy_restores_mode_and_rejects_empty_data():
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 2), nn.Dropout(0.5))
    data = _toy_data(64)
    net.train()
    acc = dltools.evaluate_accuracy_gpu(net, data)
    assert net.training and 0 <= acc <= 1
    net.eval()
    dltools.evaluate_accuracy_gpu(net, data)
    assert not net.training
    with pytest.raises(ValueError, match="empty"):
        dltools.evaluate_accuracy_gpu(net, [])


def test_evaluate_accuracy_is_deterministic_in_eval_mode():
    net = nn.Sequential(nn.Flatten(), nn.Linear(16, 2), nn.Dropout(0.9))
    data = _toy_data(64)
    assert dltools.evaluate_accuracy_gpu(net, data) == dltools.evaluate_accuracy_gpu(net, data)


def test_accuracy_counts():
    assert dltools.accuracy(torch.tensor([[0.0, 1.0], [1.0, 0.0]]), torch.tensor([1, 1])) == 1.0
    assert dltools.accuracy(torch.tensor([2, 0, 1]), torch.tensor([2, 0, 0])) == 2.0
