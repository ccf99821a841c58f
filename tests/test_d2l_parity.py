"""dltools must agree with d2l (1.0.3, installed without its pinned dependencies) where d2l
works."""
import inspect

import pytest
import torch
from torch import nn

import dltools

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

d2l = pytest.importorskip("d2l.torch", reason="d2l is installed by `python3 course.py test`")


@pytest.fixture
def d2l_sees_our_data(tmp_path, monkeypatch):
    """d2l reads Fashion-MNIST from "../data" relative to the working directory; dltools from
    ``data_root()`` (``DLTOOLS_DATA``, else the repository's data/). Point d2l's "../data" at the
    same folder, whatever the tester's working directory and environment."""
    root = dltools.data_root()
    if not (root / "FashionMNIST" / "raw").is_dir():
        pytest.fail(f"no Fashion-MNIST archives in {root / 'FashionMNIST' / 'raw'}: copy them "
                    "there or set DLTOOLS_DATA (README, 'The data set offline')")
    (tmp_path / "data").symlink_to(root.resolve(), target_is_directory=True)
    (tmp_path / "cwd").mkdir()
    monkeypatch.chdir(tmp_path / "cwd")


@pytest.mark.parametrize("resize", [None, 64])
def test_fashion_mnist_batches_equal_d2l(d2l_sees_our_data, resize):
    _, d2l_test = d2l.load_data_fashion_mnist(256, resize=resize)
    d2l_train, _ = d2l.load_data_fashion_mnist(256, resize=resize)
    _, our_test = dltools.load_data_fashion_mnist(256, resize=resize)
    assert len(our_test) == len(d2l_test)
    for i, ((X1, y1), (X2, y2)) in enumerate(zip(d2l_test, our_test)):
        assert X1.shape == X2.shape and X1.dtype == X2.dtype and y1.dtype == y2.dtype
        assert torch.equal(X1, X2), f"batch {i} differs"
        assert torch.equal(y1, y2)
        if i == 2:
            break
    assert len(d2l_train.dataset) == 60000


def test_resnet18_matches_d2l_shapes_and_parameter_count():
    ours = dltools.resnet18(10)
    theirs = d2l.resnet18(10)
    X = torch.rand(2, 1, 28, 28)
    theirs(X)  # materialise d2l's lazy layers
    ours.eval(), theirs.eval()
    assert ours(X).shape == theirs(X).shape == (2, 10)
    assert dltools.num_params(ours) == sum(p.numel() for p in theirs.parameters())
    assert [p.shape for p in ours.parameters()] == [p.shape for p in theirs.parameters()]


def test_timer_and_accumulator_semantics_match_d2l():
    a, b = dltools.Timer(), d2l.Timer()
    a.times = b.times = [0.25, 0.5, 1.0]
    assert (a.avg(), a.sum(), a.cumsum()) == (b.avg(), b.sum(), b.cumsum())
    x, y = dltools.Accumulator(3), d2l.Accumulator(3)
    for args in [(1, 2.5, 3), (4, 5, 6.5)]:
        x.add(*args), y.add(*args)
    assert [x[i] for i in range(3)] == [y[i] for i in range(3)]
    x.reset(), y.reset()
    assert x.data == y.data


def test_accuracy_matches_d2l():
    torch.manual_seed(0)
    y_hat, y = torch.randn(50, 10), torch.randint(0, 10, (50,))
    assert dltools.accuracy(y_hat, y) == d2l.accuracy(y_hat, y)
    labels = y_hat.argmax(dim=1)
    assert dltools.accuracy(labels, y) == d2l.accuracy(labels, y)


def test_evaluate_accuracy_matches_d2l():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(4, 3))
    data = [(torch.randn(8, 1, 2, 2), torch.randint(0, 3, (8,))) for _ in range(4)]
    expected = d2l.evaluate_accuracy_gpu(net, data)
    assert dltools.evaluate_accuracy_gpu(net, data) == pytest.approx(expected)


def test_fashion_mnist_labels_match_d2l():
    assert dltools.get_fashion_mnist_labels(range(10)) == d2l.get_fashion_mnist_labels(range(10))


def test_where_d2l_breaks_on_cpu_dltools_does_not():
    if dltools.num_gpus() == 0:
        assert d2l.try_all_gpus() == []          # d2l's documented [cpu] is not what it returns
        assert dltools.try_all_gpus() == [torch.device("cpu")]
    assert d2l.try_gpu(10_000) == dltools.try_gpu(10_000)


def test_sgd_matches_d2l():
    torch.manual_seed(0)
    ours = [torch.randn(3, 4, requires_grad=True), torch.randn(4, requires_grad=True)]
    theirs = [p.detach().clone().requires_grad_() for p in ours]
    for params in (ours, theirs):
        (params[0].sum(dim=0) * params[1]).pow(2).sum().backward()
    dltools.sgd(ours, lr=0.3, batch_size=7)
    d2l.sgd(theirs, lr=0.3, batch_size=7)
    for a, b in zip(ours, theirs):
        assert torch.equal(a, b) and torch.equal(a.grad, b.grad)
    assert inspect.signature(dltools.sgd) == inspect.signature(d2l.sgd)


def test_split_batch_matches_d2l():
    assert inspect.signature(dltools.split_batch) == inspect.signature(d2l.split_batch)
    X, y = torch.arange(40.0).reshape(10, 4), torch.arange(10)
    if dltools.num_gpus() >= 2:
        devices = dltools.try_all_gpus()
        theirs = d2l.split_batch(X, y, devices)
    else:
        devices = ["cpu"] * 3
        with pytest.raises(Exception, match="non cpu device"):  # d2l's needs GPUs
            d2l.split_batch(X, y, [torch.device(d) for d in devices])
        # what nn.parallel.scatter gives on GPUs: torch.chunk's pieces, one per device
        theirs = (X.chunk(3), y.chunk(3))
    ours = dltools.split_batch(X, y, devices)
    for got, want in zip(ours, theirs):
        assert [t.tolist() for t in got] == [t.cpu().tolist() for t in want]
        assert [t.device for t in got] == [torch.device(d) for d in devices[:len(got)]]
