"""Training: ``accuracy``, ``evaluate_accuracy_gpu`` and a training loop for 1..N devices
(the role of d2l's ``train_ch13``), with a progress bar, live curves and a timer.
"""
import torch
from torch import nn

from .devices import try_all_gpus
from .parallel import as_device, wrap_data_parallel
from .timing import Accumulator, Timer

__all__ = ["accuracy", "evaluate_accuracy_gpu", "sgd", "train_batch_ch13", "train_ch13", "progress"]


def progress(iterable=None, **kwargs):
    """A tqdm progress bar: in Jupyter one line of text, updated in place; in a terminal, tqdm's.

    In a notebook the bar is a display updated through its display id (not tqdm's widget), so a
    saved notebook keeps its last state, ``100%|...| 72/72``, readable where nothing runs (GitHub,
    nbviewer), instead of the widget's first one.

    >>> sum(progress(range(3), disable=True))
    3
    """
    from tqdm import tqdm
    if "file" not in kwargs and _in_notebook():
        kwargs.update(file=_DisplayLine(), ascii=True, ncols=80)
    return tqdm(iterable, **kwargs)


def _in_notebook():
    """True in a Jupyter kernel (not in a terminal IPython, not in plain Python)."""
    import sys
    shell = sys.modules.get("IPython") and sys.modules["IPython"].get_ipython()
    return shell is not None and type(shell).__name__ == "ZMQInteractiveShell"


class _DisplayLine:
    """A file for tqdm that shows each line it writes in one notebook output, replacing the last."""

    def __init__(self):
        self._handle = None

    def write(self, text):
        from IPython.display import display
        line = text.strip("\r\n")
        if not line:
            return
        if self._handle is None:
            self._handle = display({"text/plain": line}, raw=True, display_id=True)
        else:
            self._handle.update({"text/plain": line}, raw=True)

    def flush(self):
        pass


def sgd(params, lr, batch_size):
    """Minibatch stochastic gradient descent, as d2l's ``sgd``: ``p -= lr * p.grad / batch_size``,
    then zero the gradients.

    >>> w = torch.ones(2, requires_grad=True)
    >>> (4 * w).sum().backward()
    >>> sgd([w], lr=0.5, batch_size=4)
    >>> w.tolist(), w.grad.tolist()
    ([0.5, 0.5], [0.0, 0.0])
    """
    with torch.no_grad():
        for param in params:
            param -= lr * param.grad / batch_size
            param.grad.zero_()


def accuracy(y_hat, y):
    """Return the number of correct predictions (a float, as in d2l).

    ``y_hat`` holds class scores (N, C) or predicted labels (N,).

    >>> accuracy(torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7]]), torch.tensor([1, 0, 0]))
    2.0
    """
    if y_hat.dim() > 1 and y_hat.shape[1] > 1:
        y_hat = y_hat.argmax(dim=1)
    cmp = y_hat.type(y.dtype) == y
    return float(cmp.type(y.dtype).sum())


def _to(X, device):
    if isinstance(X, (list, tuple)):
        return [x.to(device) for x in X]
    return X.to(device)


def evaluate_accuracy_gpu(net, data_iter, device=None):
    """Return the accuracy of ``net`` on ``data_iter`` (d2l's signature).

    The network is put in eval mode for the pass and back in its former mode afterwards.
    ``device`` defaults to the device of the network's first parameter.

    >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    >>> data = [(torch.randn(5, 1, 2, 2), torch.randint(0, 2, (5,))) for _ in range(3)]
    >>> 0.0 <= evaluate_accuracy_gpu(net, data) <= 1.0, net.training
    (True, True)
    """
    was_training = net.training if isinstance(net, nn.Module) else None
    if isinstance(net, nn.Module):
        net.eval()
        if device is None:
            device = next(iter(net.parameters())).device
    device = as_device(device) if device is not None else torch.device("cpu")
    metric = Accumulator(2)
    try:
        with torch.no_grad():
            for X, y in data_iter:
                X, y = _to(X, device), y.to(device)
                metric.add(accuracy(net(X), y), y.numel())
    finally:
        if was_training:
            net.train()
    if metric[1] == 0:
        raise ValueError("evaluate_accuracy_gpu got an empty data iterator")
    return metric[0] / metric[1]


def train_batch_ch13(net, X, y, loss, trainer, devices):
    """Train one minibatch; returns ``(sum of losses, number correct)`` (d2l's helper).

    ``loss`` may reduce with ``'none'`` (per-example losses, summed before backward, as in d2l) or
    ``'mean'`` (backward on the mean; the returned sum is ``mean * batch``).

    >>> net = nn.Linear(3, 2)
    >>> X, y = torch.randn(4, 3), torch.tensor([0, 1, 1, 0])
    >>> loss_sum, correct = train_batch_ch13(net, X, y, nn.CrossEntropyLoss(reduction='none'),
    ...                                      torch.optim.SGD(net.parameters(), lr=0.1), ['cpu'])
    >>> loss_sum > 0, 0 <= correct <= 4
    (True, True)
    """
    X, y = _to(X, devices[0]), y.to(devices[0])
    net.train()
    trainer.zero_grad()
    pred = net(X)
    losses = loss(pred, y)
    if losses.dim() == 0:
        losses.backward()
        loss_sum = losses.detach() * y.numel()
    else:
        losses.sum().backward()
        loss_sum = losses.detach().sum()
    trainer.step()
    return float(loss_sum), accuracy(pred.detach(), y)


def train_ch13(net, train_iter, test_iter, loss, trainer, num_epochs, devices=None, *,
               animate=True, progress_bar=True, verbose=True):
    """Train ``net`` on 1..N devices and return a dict of results (d2l's ``train_ch13``, fixed).

    ``devices`` defaults to :func:`try_all_gpus` (``[cpu]`` without GPUs, where d2l's version
    fails). Several GPUs use ``nn.DataParallel``; several CPU entries (``['cpu', 'cpu']``) use
    dltools' thread replicas. The network is moved to ``devices[0]`` before it is wrapped.

    Returns ``{'train_loss', 'train_acc', 'test_acc', 'examples_per_sec', 'sec_per_epoch',
    'history', 'net'}``; ``history`` has one row ``(epoch, train_loss, train_acc, test_acc)`` per
    epoch, and ``net`` is the (possibly wrapped) network that was trained.

    >>> torch.manual_seed(0) and None
    >>> X = torch.randn(64, 1, 2, 2); y = (X.sum(dim=(1, 2, 3)) > 0).long()
    >>> data = [(X[i:i + 16], y[i:i + 16]) for i in range(0, 64, 16)]
    >>> net = nn.Sequential(nn.Flatten(), nn.Linear(4, 2))
    >>> r = train_ch13(net, data, data, nn.CrossEntropyLoss(reduction='none'),
    ...                torch.optim.SGD(net.parameters(), lr=0.05), 3, ['cpu'],
    ...                animate=False, progress_bar=False, verbose=False)
    >>> len(r['history']), r['train_loss'] < r['history'][0][1] or r['history'][0][1] > 0
    (3, True)
    """
    if devices is None:
        devices = try_all_gpus()
    devices = [as_device(d) for d in devices]
    if not devices:
        raise ValueError("devices is empty; use dltools.try_all_gpus() (never empty) or ['cpu']")
    if num_epochs < 1:
        raise ValueError(f"num_epochs must be at least 1, got {num_epochs}")
    num_batches = len(train_iter)
    if num_batches == 0:
        raise ValueError("train_iter yields no batches")
    net = wrap_data_parallel(net, devices)
    from .plotting import Animator
    animator = Animator(xlabel="epoch", xlim=[1, num_epochs],
                        legend=["train loss", "train acc", "test acc"]) if animate else None
    timer, history, seen = Timer(), [], 0
    timer.times.clear()
    bar = progress(total=num_epochs * num_batches, desc="training", disable=not progress_bar)
    try:
        for epoch in range(num_epochs):
            metric = Accumulator(4)  # loss sum, correct, examples, predictions
            timer.start()
            for i, (features, labels) in enumerate(train_iter):
                batch_loss, acc = train_batch_ch13(net, features, labels, loss, trainer, devices)
                metric.add(batch_loss, acc, labels.shape[0], labels.numel())
                bar.update(1)
                bar.set_postfix(epoch=epoch + 1, loss=f"{metric[0] / metric[2]:.3f}")
                if animator and ((i + 1) % max(num_batches // 5, 1) == 0 or i == num_batches - 1):
                    animator.add(epoch + (i + 1) / num_batches,
                                 (metric[0] / metric[2], metric[1] / metric[3], None))
            timer.stop()
            seen += metric[2]
            test_acc = evaluate_accuracy_gpu(net, test_iter, devices[0])
            history.append((epoch + 1, metric[0] / metric[2], metric[1] / metric[3], test_acc))
            if animator:
                animator.add(epoch + 1, (None, None, test_acc))
    finally:
        bar.close()
    result = {
        "train_loss": history[-1][1], "train_acc": history[-1][2], "test_acc": history[-1][3],
        "examples_per_sec": seen / timer.sum(),
        "sec_per_epoch": timer.avg(), "history": history, "net": net,
    }
    if verbose:
        print(f"loss {result['train_loss']:.3f}, train acc {result['train_acc']:.3f}, "
              f"test acc {result['test_acc']:.3f}")
        print(f"{result['examples_per_sec']:.1f} examples/sec on {[str(d) for d in devices]}")
    return result
