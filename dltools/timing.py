"""Timing and counting: ``Timer`` and ``Accumulator`` (same names and methods as d2l)."""
import time

import numpy as np
import torch

__all__ = ["Timer", "Accumulator"]


def synchronize(device=None):
    """Wait for the GPU work already queued: on ``device``, or on every GPU (``None``); nothing to
    wait for on a CPU. CUDA kernels run asynchronously: without this a timer reads how long it took
    to *launch* work, and with one GPU's wait only, the others' work is missed (DataParallel)."""
    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return
    if device is None:
        for i in range(torch.cuda.device_count()):
            torch.cuda.synchronize(i)
    elif torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


class Timer:
    """Record running times (``time.perf_counter``), waiting for queued CUDA work before each
    reading.

    >>> timer = Timer()          # starts at once, as in d2l
    >>> t = timer.stop()
    >>> t >= 0 and len(timer.times) == 1
    True
    >>> timer.times = [1.0, 2.0, 3.0]
    >>> timer.avg(), timer.sum(), timer.cumsum()
    (2.0, 6.0, [1.0, 3.0, 6.0])
    """

    def __init__(self):
        self.times = []
        self.start()

    def start(self):
        """Start the timer."""
        synchronize()
        self.tik = time.perf_counter()

    def stop(self):
        """Stop the timer, record the time in ``self.times`` and return it."""
        synchronize()
        self.times.append(time.perf_counter() - self.tik)
        return self.times[-1]

    def avg(self):
        """Return the average recorded time; an error when nothing was recorded yet.

        >>> Timer().avg()
        Traceback (most recent call last):
        ...
        RuntimeError: no time recorded yet: call stop() (or time a with-block) before avg()
        """
        if not self.times:
            raise RuntimeError("no time recorded yet: call stop() (or time a with-block) "
                               "before avg()")
        return sum(self.times) / len(self.times)

    def sum(self):
        """Return the sum of recorded times."""
        return sum(self.times)

    def cumsum(self):
        """Return the accumulated times as a list."""
        return np.array(self.times).cumsum().tolist()

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False


class Accumulator:
    """Accumulate sums over ``n`` variables.

    >>> metric = Accumulator(3)
    >>> metric.add(1, 2.5, 3)
    >>> metric.add(1, 0.5, 3)
    >>> metric[0], metric[1], metric[2]
    (2.0, 3.0, 6.0)
    >>> metric.reset(); metric.data
    [0.0, 0.0, 0.0]
    """

    def __init__(self, n):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"Accumulator needs a positive number of variables, got {n!r}")
        self.data = [0.0] * n

    def add(self, *args):
        """Add one value to each variable (exactly ``n`` values)."""
        if len(args) != len(self.data):
            raise ValueError(f"Accumulator holds {len(self.data)} variables, "
                             f"add() got {len(args)} values")
        self.data = [a + float(b) for a, b in zip(self.data, args)]

    def reset(self):
        """Set every variable back to 0."""
        self.data = [0.0] * len(self.data)

    def __getitem__(self, idx):
        return self.data[idx]

    def __len__(self):
        return len(self.data)
