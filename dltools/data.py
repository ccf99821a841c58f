"""Data: Fashion-MNIST (real torchvision download + md5 check, then fast in-memory batches) and the
small synthetic data sets the notebooks train on.

Fashion-MNIST is decoded once into a uint8 tensor and batched by slicing, which is far faster than
one PIL image + ``ToTensor`` per sample (d2l's loader), and gives the same values.
"""
import hashlib
import math
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, TensorDataset

__all__ = ["FASHION_MNIST_ARCHIVES", "FASHION_MNIST_LABELS", "data_root", "load_fashion_mnist",
           "load_fashion_mnist_distributed", "load_data_fashion_mnist", "get_fashion_mnist_labels",
           "TensorBatchIterator", "DatasetUnavailableError", "synthetic_data", "load_array",
           "regression_data", "classification_data", "RandomDataset"]

#: The four official archives and the MD5 sums torchvision checks.
FASHION_MNIST_ARCHIVES = {
    "train-images-idx3-ubyte.gz": "8d4fb7e6c68d591d4c3dfef9ec88bf0d",
    "train-labels-idx1-ubyte.gz": "25c81989df183df01b3e8a0aad5dffbe",
    "t10k-images-idx3-ubyte.gz": "bef4ecab320f06d8554ea6380940ec79",
    "t10k-labels-idx1-ubyte.gz": "bb300cfdad3c16e7a12a480ee83cd310",
}

FASHION_MNIST_LABELS = ("t-shirt", "trouser", "pullover", "dress", "coat",
                        "sandal", "shirt", "sneaker", "bag", "ankle boot")

_SIZES = {True: 60000, False: 10000}


class DatasetUnavailableError(RuntimeError):
    """The data set could not be downloaded or verified; the message says what to do."""


def data_root(root=None):
    """Return the folder that holds ``FashionMNIST/raw/``.

    Order: the ``root`` argument, else the environment variable ``DLTOOLS_DATA``, else the ``data``
    folder at the top of the course repository (``../data`` seen from ``notebooks/``, where d2l
    looks too).

    >>> str(data_root('/tmp/somewhere'))
    '/tmp/somewhere'
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"DLTOOLS_DATA": "/srv/datasets"}):
    ...     str(data_root())
    '/srv/datasets'
    >>> with mock.patch.dict(os.environ):
    ...     _ = os.environ.pop("DLTOOLS_DATA", None)
    ...     data_root().name
    'data'
    """
    if root is not None:
        return Path(root).expanduser()
    env = os.environ.get("DLTOOLS_DATA")
    if env:
        return Path(env).expanduser()
    repo = Path(__file__).resolve().parent.parent
    if (repo / "pyproject.toml").exists():
        return repo / "data"
    return Path.cwd().parent / "data"


#: The md5 of each file extracted from the archives above (what torchvision reads).
FASHION_MNIST_EXTRACTED = {
    "train-images-idx3-ubyte": "f4a8712d7a061bf5bd6d2ca38dc4d50a",
    "train-labels-idx1-ubyte": "9018921c3c673c538a1fc5bad174d6f9",
    "t10k-images-idx3-ubyte": "8181f5470baa50b63fa0f6fddb340f0a",
    "t10k-labels-idx1-ubyte": "15d484375f8d13e6eb1aabb0c3f46965",
}


def _md5(path):
    h = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _help_text(raw):
    table = "\n".join(f"  {name}  md5 {md5}" for name, md5 in FASHION_MNIST_ARCHIVES.items())
    return (f"Put the four official Fashion-MNIST archives in\n  {raw}\n{table}\n"
            "(or set DLTOOLS_DATA, or pass root=, to a folder whose FashionMNIST/raw/ holds them). "
            "They are verified by md5 and never downloaded again.")


def _check_archives(raw):
    """Raise if an archive that is present does not have its official md5 (a corrupt copy)."""
    for name, md5 in FASHION_MNIST_ARCHIVES.items():
        path = raw / name
        if path.exists():
            got = _md5(path)
            if got != md5:
                raise DatasetUnavailableError(
                    f"{path} is corrupt: its md5 is {got}, the official archive's is {md5}. "
                    f"Delete it and copy or download it again.\n" + _help_text(raw))


def load_fashion_mnist(train=True, root=None, download=True):
    """Return Fashion-MNIST as ``(images, labels)``: uint8 (N, 28, 28) and int64 (N,) tensors.

    Files are fetched and checked by ``torchvision.datasets.FashionMNIST`` (md5 of each archive);
    archives already in ``<root>/FashionMNIST/raw/`` are verified, not downloaded. A damaged
    extracted file (truncated, emptied) is extracted again from the verified archives.

    >>> images, labels = load_fashion_mnist(train=False)
    >>> images.shape, images.dtype, labels[:5].tolist()
    (torch.Size([10000, 28, 28]), torch.uint8, [9, 2, 1, 1, 6])
    """
    root = data_root(root)
    raw = root / "FashionMNIST" / "raw"
    if (not any((raw / name).exists() for name in FASHION_MNIST_ARCHIVES)
            and any((root / name).exists() for name in FASHION_MNIST_ARCHIVES)):
        raise DatasetUnavailableError(
            f"{root} holds the archives itself; the data root is the folder whose "
            f"FashionMNIST/raw/ holds them: pass {root.parent.parent} instead")
    _check_archives(raw)
    before = set(raw.iterdir()) if raw.exists() else set()
    # With all four verified archives present, torchvision's "download" step only extracts them (no
    # network), so do it even when download=False: a fresh copy of the archives must just work.
    local = all((raw / name).exists() for name in FASHION_MNIST_ARCHIVES)
    _check_extracted(raw, train, local)
    try:
        try:
            images, labels = _read(root, train, download or local, raw)
        except Exception:
            if not local:
                raise
            # The archives are whole (verified above), so an extracted file is damaged (truncated,
            # emptied): extract again from the archives, once.
            split = "train" if train else "t10k"
            for name in FASHION_MNIST_EXTRACTED:   # only these, of this split: the rest is fine
                if name.startswith(split):
                    (raw / name).unlink(missing_ok=True)
            images, labels = _read(root, train, True, raw)
    except Exception as err:
        # Leave nothing half-written behind: a partial download or extraction would be taken for
        # a good file next time.
        if raw.exists():
            for path in set(raw.iterdir()) - before:
                known = path.name in FASHION_MNIST_EXTRACTED or path.name in FASHION_MNIST_ARCHIVES
                if known and path.is_file() and (path.name in FASHION_MNIST_EXTRACTED or _md5(path)
                                                 != FASHION_MNIST_ARCHIVES[path.name]):
                    path.unlink()
        raise DatasetUnavailableError(
            f"Fashion-MNIST ({'train' if train else 'test'}) is not available: {err}\n"
            + _help_text(raw)) from err
    return images, labels.long()


def load_fashion_mnist_distributed(train=True, root=None):
    """:func:`load_fashion_mnist` for every rank of a process group, one writer per data folder.

    Inside a process group the ranks take two turns. First global rank 0 downloads, verifies and
    extracts the files; then the rank with ``LOCAL_RANK`` 0 on each other node does, for the
    node's own disk (on a file system the nodes share, it finds the files ready and only reads
    them). Every other rank waits, then reads the prepared files with ``download=False``. So no
    two processes write into one folder at once, and no rank reads, or cleans up as half-written,
    a file that another is still writing. Without ``LOCAL_RANK`` in the environment a rank is
    taken to be its own local rank (one machine). Without a process group this is just
    ``load_fashion_mnist(train, root)``.

    Each turn ends in ``dist.all_gather_object``, which every rank calls (waiting at most the
    group's ``timeout``). A preparing rank joins it even when it failed: the others then raise an
    error that names it and its cause, and it raises its own. (A bare ``dist.barrier`` after a
    failure would leave them waiting for a rank that never comes.)

    >>> images, labels = load_fashion_mnist_distributed(train=False)   # no process group here
    >>> images.shape
    torch.Size([10000, 28, 28])
    """
    if not (dist.is_available() and dist.is_initialized()):
        return load_fashion_mnist(train=train, root=root)
    rank = dist.get_rank()
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    loaded = None
    for preparing in (rank == 0, local_rank == 0 and rank != 0):
        error = None
        if preparing:
            try:
                loaded = load_fashion_mnist(train=train, root=root, download=True)
            except Exception as err:
                error = err
        said = None   # what this rank tells the others: None, or the first line of its error
        if error is not None:
            said = f"{type(error).__name__}: " + str(error).split("\n")[0]
        outcomes = [None] * dist.get_world_size()
        dist.all_gather_object(outcomes, said)
        if error is not None:
            raise error
        failed = [f"rank {r} failed with {line}" for r, line in enumerate(outcomes) if line]
        if failed:
            raise DatasetUnavailableError("Fashion-MNIST was not prepared for this rank (one "
                                          "rank prepares it while the others wait): "
                                          + "; ".join(failed))
    if loaded is None:
        loaded = load_fashion_mnist(train=train, root=root, download=False)
    return loaded


def _check_extracted(raw, train, local):
    """An extracted file of this split whose md5 is not the official one (damaged, even at its
    full size) is removed when the verified archives are there to extract it again; otherwise
    the error names it."""
    prefix = "train" if train else "t10k"
    for name, md5 in FASHION_MNIST_EXTRACTED.items():
        path = raw / name
        if name.startswith(prefix) and path.exists() and not path.is_file():
            raise DatasetUnavailableError(
                f"{path} is a folder, where the file of that name extracted from the archives "
                "belongs: move it away or delete it, and run this again.")
        if name.startswith(prefix) and path.is_file() and _md5(path) != md5:
            if not local:
                raise DatasetUnavailableError(
                    f"{path} is damaged (its md5 is not the official one) and the archives are "
                    "not there to extract it again: delete it.\n" + _help_text(raw))
            path.unlink()


def _read(root, train, download, raw):
    """torchvision's FashionMNIST ``(images, labels)``, their sizes checked."""
    from torchvision.datasets import FashionMNIST

    ds = FashionMNIST(str(root), train=train, download=download)
    images, labels = ds.data, ds.targets
    if images.shape != (_SIZES[train], 28, 28) or labels.shape != (_SIZES[train],):
        raise ValueError(f"the extracted Fashion-MNIST files in {raw} have the wrong size "
                         f"({tuple(images.shape)} images, {tuple(labels.shape)} labels)")
    return images, labels


def _check_batch_size(batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, int):
        raise TypeError(f"batch_size must be an int, got {batch_size!r}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")


def _check_resize(resize):
    if resize is None:
        return None
    size = (resize, resize) if isinstance(resize, int) else tuple(resize)
    if len(size) != 2 or not all(isinstance(s, int) and s >= 1 for s in size):
        raise ValueError(f"resize must be a positive int or a (height, width) pair, got {resize!r}")
    return size


class TensorBatchIterator:
    """Batches ``(X, y)`` from in-memory uint8 images, the way a DataLoader with ``ToTensor`` would.

    ``X`` is float32 in [0, 1] of shape (B, 1, H, W); ``y`` is int64. With ``shuffle=True`` each
    pass draws a new order from ``generator`` (or from torch's global RNG, so ``torch.manual_seed``
    makes it repeatable).

    >>> images = torch.arange(5 * 4, dtype=torch.uint8).reshape(5, 2, 2)
    >>> it = TensorBatchIterator(images, torch.arange(5), batch_size=2)
    >>> len(it), [tuple(X.shape) for X, _ in it]
    (3, [(2, 1, 2, 2), (2, 1, 2, 2), (1, 1, 2, 2)])
    >>> X, y = next(iter(it)); X.dtype, float(X.max()) <= 1.0, y.tolist()
    (torch.float32, True, [0, 1])
    """

    def __init__(self, images, labels, batch_size, shuffle=False, resize=None, generator=None,
                 drop_last=False):
        _check_batch_size(batch_size)
        if len(images) != len(labels):
            raise ValueError(f"{len(images)} images but {len(labels)} labels")
        self.images, self.labels = images, labels
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.resize = _check_resize(resize)
        self.generator = generator
        self.dataset = _ImageDataset(self)

    def __len__(self):
        n = len(self.labels)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)

    def _batch(self, idx):
        X = self.images[idx].unsqueeze(1)
        if self.resize is not None:
            from torchvision.transforms.v2 import functional as TF
            X = TF.resize(X, list(self.resize), antialias=True)
        return X.float().div_(255), self.labels[idx]

    def __iter__(self):
        n = len(self.labels)
        if self.shuffle:
            order = torch.randperm(n, generator=self.generator)
        else:
            order = None
        for b in range(len(self)):
            lo, hi = b * self.batch_size, min((b + 1) * self.batch_size, n)
            yield self._batch(order[lo:hi] if order is not None else slice(lo, hi))


class _ImageDataset(Dataset):
    """Indexable view of a TensorBatchIterator's samples, so ``len(train_iter.dataset)`` works."""

    def __init__(self, it):
        self.it = it

    def __len__(self):
        return len(self.it.labels)

    def __getitem__(self, i):
        X, y = self.it._batch(slice(i, i + 1) if i >= 0 else slice(i, i + 1 or None))
        return X[0], int(y[0])


def load_data_fashion_mnist(batch_size, resize=None, root=None, *, num_train=None, num_test=None,
                            shuffle_train=True, seed=None, download=True):
    """Load Fashion-MNIST and return ``(train_iter, test_iter)`` (d2l's signature, plus options).

    ``root``: see :func:`data_root`. ``num_train``/``num_test``: keep only the first examples (for
    quick CPU runs). ``seed``: make the training shuffle independent of the global RNG.

    >>> train_iter, test_iter = load_data_fashion_mnist(256)
    >>> X, y = next(iter(train_iter)); X.shape, X.dtype, y.dtype
    (torch.Size([256, 1, 28, 28]), torch.float32, torch.int64)
    >>> len(train_iter), len(test_iter)
    (235, 40)
    >>> load_data_fashion_mnist(0)
    Traceback (most recent call last):
        ...
    ValueError: batch_size must be at least 1, got 0
    """
    _check_batch_size(batch_size)
    _check_resize(resize)
    iters = []
    for train, n, shuffle in ((True, num_train, shuffle_train), (False, num_test, False)):
        images, labels = load_fashion_mnist(train=train, root=root, download=download)
        if n is not None:
            if not 1 <= n <= len(labels):
                raise ValueError(f"num_{'train' if train else 'test'} must be between 1 and "
                                 f"{len(labels)}, got {n}")
            images, labels = images[:n], labels[:n]
        generator = None
        if shuffle and seed is not None:
            generator = torch.Generator().manual_seed(seed)
        iters.append(TensorBatchIterator(images, labels, batch_size, shuffle=shuffle, resize=resize,
                                         generator=generator))
    return tuple(iters)


def get_fashion_mnist_labels(labels):
    """Return the text labels of Fashion-MNIST class indices.

    >>> get_fashion_mnist_labels(torch.tensor([0, 9, 3]))
    ['t-shirt', 'ankle boot', 'dress']
    """
    return [FASHION_MNIST_LABELS[int(i)] for i in labels]


# ---------------------------------------------------------------- synthetic data


def synthetic_data(w, b, num_examples, generator=None):
    """Generate ``y = Xw + b + noise`` (d2l's linear-regression data); returns ``(X, y)``.

    >>> X, y = synthetic_data(torch.tensor([2.0, -3.4]), 4.2, 5, torch.Generator().manual_seed(0))
    >>> X.shape, y.shape
    (torch.Size([5, 2]), torch.Size([5, 1]))
    """
    X = torch.normal(0, 1, (num_examples, len(w)), generator=generator)
    y = torch.matmul(X, w) + b
    y += torch.normal(0, 0.01, y.shape, generator=generator)
    return X, y.reshape((-1, 1))


def load_array(data_arrays, batch_size, is_train=True):
    """Construct a PyTorch DataLoader over tensors (d2l's ``load_array``).

    >>> it = load_array((torch.ones(10, 2), torch.zeros(10)), 4, is_train=False)
    >>> [len(X) for X, _ in it]
    [4, 4, 2]
    """
    _check_batch_size(batch_size)
    return DataLoader(TensorDataset(*data_arrays), batch_size, shuffle=is_train)


def regression_data(num_examples=100, num_inputs=10, num_outputs=1, noise=0.01, seed=0):
    """Seeded data for a linear model: ``y = X @ w + b + noise``; returns ``(X, y, w, b)``.

    >>> X, y, w, b = regression_data(100, 10)
    >>> X.shape, y.shape, w.shape
    (torch.Size([100, 10]), torch.Size([100, 1]), torch.Size([10, 1]))
    >>> torch.equal(X, regression_data(100, 10)[0])   # same seed, same data
    True
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(num_examples, num_inputs, generator=g)
    w = torch.randn(num_inputs, num_outputs, generator=g)
    b = torch.randn(num_outputs, generator=g)
    y = X @ w + b + noise * torch.randn(num_examples, num_outputs, generator=g)
    return X, y, w, b


def classification_data(num_examples=100, num_inputs=10, num_classes=5, seed=0):
    """Seeded, learnable classification data: labels are the argmax of a random linear map.

    Unlike ``torch.randint(0, 1, ...)`` (always 0), every class appears.

    >>> X, y = classification_data(200, 10, 5)
    >>> X.shape, y.dtype, sorted(set(y.tolist()))
    (torch.Size([200, 10]), torch.int64, [0, 1, 2, 3, 4])
    """
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(num_examples, num_inputs, generator=g)
    W = torch.randn(num_inputs, num_classes, generator=g)
    return X, (X @ W).argmax(dim=1)


class RandomDataset(Dataset):
    """Random vectors, as in PyTorch's DataParallel tutorial, but seeded.

    >>> ds = RandomDataset(size=5, length=100, seed=0)
    >>> len(ds), ds[0].shape
    (100, torch.Size([5]))
    >>> torch.equal(ds[3], RandomDataset(5, 100, seed=0)[3])
    True
    """

    def __init__(self, size, length, seed=0):
        self.len = length
        self.data = torch.randn(length, size, generator=torch.Generator().manual_seed(seed))

    def __getitem__(self, index):
        return self.data[index]

    def __len__(self):
        return self.len
