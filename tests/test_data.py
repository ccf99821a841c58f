import hashlib
import os
import shutil
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dltools
from dltools import data
from dltools import distributed as dd

SHARED_RAW = data.data_root() / "FashionMNIST" / "raw"


def _need_archives():
    missing = [n for n in data.FASHION_MNIST_ARCHIVES if not (SHARED_RAW / n).exists()]
    if missing:
        pytest.fail(f"the Fashion-MNIST archives are not in {SHARED_RAW} ({missing}); "
                    "copy them there (see README: 'Data set offline')")


def _copy_archives(root):
    """Make ``root`` a fresh data root holding copies of the four archives only."""
    _need_archives()
    raw = root / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    for name in data.FASHION_MNIST_ARCHIVES:
        shutil.copy(SHARED_RAW / name, raw / name)
    return root


@pytest.fixture
def archive_root(tmp_path):
    """A fresh data root holding copies of the four archives only (nothing extracted yet)."""
    return _copy_archives(tmp_path)


@pytest.fixture
def offline(monkeypatch):
    """Point torchvision's mirrors at a closed local port, so a download attempt fails at once."""
    from torchvision.datasets import FashionMNIST
    monkeypatch.setattr(FashionMNIST, "mirrors", ["http://127.0.0.1:9/"])


def test_loads_from_archives_via_env_var(archive_root, monkeypatch, offline):
    monkeypatch.setenv("DLTOOLS_DATA", str(archive_root))
    train_iter, test_iter = dltools.load_data_fashion_mnist(1000)
    assert len(train_iter.dataset) == 60000 and len(test_iter.dataset) == 10000
    assert len(train_iter) == 60 and len(test_iter) == 10
    X, y = next(iter(train_iter))
    assert X.shape == (1000, 1, 28, 28) and X.dtype == torch.float32 and y.dtype == torch.int64
    assert 0.0 <= X.min() and X.max() <= 1.0
    assert set(y.tolist()) == set(range(10))


def test_root_argument_wins_over_env_var(archive_root, monkeypatch, tmp_path_factory):
    monkeypatch.setenv("DLTOOLS_DATA", str(tmp_path_factory.mktemp("elsewhere")))
    assert data.data_root(archive_root) == archive_root
    assert data.data_root() != archive_root


def test_every_image_appears_once_per_epoch_and_shuffle_is_seedable(archive_root):
    train_a, _ = dltools.load_data_fashion_mnist(4096, root=archive_root, seed=1)
    train_b, _ = dltools.load_data_fashion_mnist(4096, root=archive_root, seed=1)
    labels_a = torch.cat([y for _, y in train_a])
    labels_b = torch.cat([y for _, y in train_b])
    assert torch.equal(labels_a, labels_b)
    assert torch.equal(labels_a.sort().values, train_a.labels.sort().values)
    assert not torch.equal(labels_a, torch.cat([y for _, y in train_a])), "each epoch reshuffles"


def test_resize_and_subsets(archive_root):
    train_iter, test_iter = dltools.load_data_fashion_mnist(32, resize=(40, 48), root=archive_root,
                                                            num_train=100, num_test=50)
    X, _ = next(iter(train_iter))
    assert X.shape == (32, 1, 40, 48)
    assert len(train_iter.dataset) == 100 and len(test_iter.dataset) == 50
    assert [len(y) for _, y in test_iter] == [32, 18]


@pytest.mark.parametrize("batch_size, err", [(0, ValueError), (-3, ValueError), (2.5, TypeError),
                                             ("256", TypeError)])
def test_bad_batch_size_is_refused_before_any_loading(batch_size, err, tmp_path):
    with pytest.raises(err, match="batch_size"):
        dltools.load_data_fashion_mnist(batch_size, root=tmp_path)
    assert not any(tmp_path.iterdir()), "nothing may be created for a call that is refused"


@pytest.mark.parametrize("resize", [0, (28,), (28, -1), "64"])
def test_bad_resize_is_refused(resize, tmp_path):
    with pytest.raises(ValueError, match="resize"):
        dltools.load_data_fashion_mnist(8, resize=resize, root=tmp_path)


def test_bad_subset_size_is_refused(archive_root):
    with pytest.raises(ValueError, match="num_train must be between 1 and 60000"):
        dltools.load_data_fashion_mnist(8, root=archive_root, num_train=0)


def test_missing_data_offline_names_files_md5s_and_folder(tmp_path, offline):
    with pytest.raises(dltools.DatasetUnavailableError) as info:
        dltools.load_data_fashion_mnist(256, root=tmp_path)
    msg = str(info.value)
    raw = tmp_path / "FashionMNIST" / "raw"
    assert str(raw) in msg
    for name, md5 in data.FASHION_MNIST_ARCHIVES.items():
        assert name in msg and md5 in msg
    assert "DLTOOLS_DATA" in msg
    assert not raw.exists() or not any(raw.iterdir()), "no partial download may be left behind"


def test_corrupt_archive_is_named_and_nothing_is_extracted(archive_root, offline):
    raw = archive_root / "FashionMNIST" / "raw"
    bad = raw / "train-labels-idx1-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:1000])
    before = sorted(p.name for p in raw.iterdir())
    with pytest.raises(dltools.DatasetUnavailableError,
                       match="train-labels-idx1-ubyte.gz is corrupt"):
        dltools.load_data_fashion_mnist(256, root=archive_root)
    assert sorted(p.name for p in raw.iterdir()) == before, "nothing half-written may be left"
    assert bad.exists(), "the user's file is reported, not deleted"


def zero_the_second_half(data):
    return data[:len(data) // 2] + bytes(len(data) - len(data) // 2)


@pytest.mark.parametrize("damage", [lambda b: b[:-100], lambda b: b"", zero_the_second_half],
                         ids=["truncated", "empty", "zeroed at full size"])
def test_a_damaged_extracted_file_is_extracted_again(archive_root, offline, damage):
    """The archives are whole, so a damaged extracted file is rebuilt from them (it used to fail
    with "put the four archives in ...", though they were there, on every run)."""
    images, labels = data.load_fashion_mnist(train=False, root=archive_root)   # extracts
    extracted = archive_root / "FashionMNIST" / "raw" / "t10k-labels-idx1-ubyte"
    good = extracted.read_bytes()
    extracted.write_bytes(damage(good))
    again_images, again_labels = data.load_fashion_mnist(train=False, root=archive_root,
                                                         download=False)
    assert torch.equal(again_images, images) and torch.equal(again_labels, labels)
    assert extracted.read_bytes() == good


def test_repairing_the_extracted_files_keeps_everything_else(archive_root, offline):
    raw = archive_root / "FashionMNIST" / "raw"
    data.load_fashion_mnist(train=False, root=archive_root)   # extracts
    (raw / "notes.txt").write_text("mine")
    (raw / "old").mkdir()
    extracted = raw / "t10k-images-idx3-ubyte"
    extracted.write_bytes(extracted.read_bytes()[:-100])
    images, _ = data.load_fashion_mnist(train=False, root=archive_root)
    assert images.shape == (10000, 28, 28)
    assert (raw / "notes.txt").read_text() == "mine" and (raw / "old").is_dir()
    assert (raw / "train-images-idx3-ubyte").exists() == (raw / "train-labels-idx1-ubyte").exists()


def test_a_folder_where_an_extracted_file_belongs_is_named(archive_root, offline):
    """Sweep 3 (D4): a folder named t10k-images-idx3-ubyte gave "Is a directory" and "Put the
    four archives in ...", though they were there, and the retry deleted the other split's
    extracted files."""
    raw = archive_root / "FashionMNIST" / "raw"
    data.load_fashion_mnist(train=True, root=archive_root)    # extracts the training files
    trained = {n: (raw / n).read_bytes() for n in ("train-images-idx3-ubyte",
                                                   "train-labels-idx1-ubyte")}
    (raw / "t10k-images-idx3-ubyte").unlink(missing_ok=True)
    (raw / "t10k-images-idx3-ubyte").mkdir()
    with pytest.raises(dltools.DatasetUnavailableError,
                       match="t10k-images-idx3-ubyte is a folder, where the file of that name"):
        data.load_fashion_mnist(train=False, root=archive_root)
    assert {n: (raw / n).read_bytes() for n in trained} == trained
    (raw / "t10k-images-idx3-ubyte").rmdir()
    images, _ = data.load_fashion_mnist(train=False, root=archive_root)
    assert images.shape == (10000, 28, 28)


def test_a_root_that_is_the_archive_folder_itself_is_named(archive_root, offline):
    raw = archive_root / "FashionMNIST" / "raw"
    with pytest.raises(dltools.DatasetUnavailableError, match=f"pass {archive_root}"):
        data.load_fashion_mnist(train=False, root=raw)
    assert not (raw / "FashionMNIST").exists(), "nothing may be created inside the archive folder"


def test_labels():
    assert dltools.get_fashion_mnist_labels([0, 1, 9]) == ["t-shirt", "trouser", "ankle boot"]
    assert len(data.FASHION_MNIST_LABELS) == 10


def test_dataset_view_indexes_like_a_dataset():
    images = torch.arange(3 * 4, dtype=torch.uint8).reshape(3, 2, 2)
    it = data.TensorBatchIterator(images, torch.tensor([5, 6, 7]), batch_size=2)
    X, y = it.dataset[2]
    assert X.shape == (1, 2, 2) and y == 7
    assert torch.equal(it.dataset[-1][0], X)


def test_batch_iterator_rejects_mismatched_lengths():
    with pytest.raises(ValueError, match="3 images but 2 labels"):
        data.TensorBatchIterator(torch.zeros(3, 2, 2, dtype=torch.uint8), torch.zeros(2), 1)


def test_synthetic_data_is_seeded_and_learnable():
    X, y, w, b = dltools.regression_data(200, 10, seed=3)
    X2, *_ = dltools.regression_data(200, 10, seed=3)
    assert torch.equal(X, X2)
    residual = y - (X @ w + b)
    assert residual.abs().max() < 0.1
    X, y = dltools.classification_data(500, 10, 5, seed=1)
    assert sorted(set(y.tolist())) == [0, 1, 2, 3, 4], "unlike randint(0, 1), all classes appear"
    ds = dltools.RandomDataset(5, 100, seed=2)
    assert len(ds) == 100 and torch.equal(ds[7], dltools.RandomDataset(5, 100, seed=2)[7])


def test_fresh_archives_load_without_download(archive_root, offline):
    # Only the .gz files are there: download=False must still extract them (no network needed).
    train_iter, _ = dltools.load_data_fashion_mnist(500, root=archive_root, download=False)
    assert len(train_iter.dataset) == 60000


def test_download_false_without_archives_says_what_to_do(tmp_path, offline):
    with pytest.raises(dltools.DatasetUnavailableError, match="train-images-idx3-ubyte.gz"):
        dltools.load_data_fashion_mnist(8, root=tmp_path, download=False)


def test_a_prepared_data_folder_is_only_read(archive_root, offline):
    """A class server keeps one data folder that students cannot write to: once the archives were
    loaded (extracted) there, loading them again writes nothing."""
    for train in (True, False):
        data.load_fashion_mnist(train=train, root=archive_root)

    def files():
        return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in archive_root.rglob("*")}

    before = files()
    assert len(before) > len(data.FASHION_MNIST_ARCHIVES)   # extracted beside the archives
    for train in (True, False):
        data.load_fashion_mnist(train=train, root=archive_root, download=False)
        data.load_fashion_mnist(train=train, root=archive_root)
    assert files() == before


# ------------------------------------------------------------------ several ranks, one folder


def load_on_every_rank(roots, ranks_per_node, log):
    """Worker: load the test set with ``load_fashion_mnist_distributed`` as a rank of pretend node
    ``rank // ranks_per_node``, whose data folder is ``roots[node % len(roots)]`` (one folder for
    all: a shared file system). Each archive torchvision extracts is logged in the folder ``log``,
    by rank. Returns a hash of the data, or the error raised."""
    from torchvision.datasets import mnist

    rank = dist.get_rank()
    os.environ["LOCAL_RANK"] = str(rank % ranks_per_node)
    root = roots[rank // ranks_per_node % len(roots)]
    extract = mnist.download_and_extract_archive

    def logged(*args, filename, **kwargs):
        with open(Path(log) / str(rank), "a") as f:
            f.write(f"{root} {filename}\n")
        return extract(*args, filename=filename, **kwargs)

    mnist.download_and_extract_archive = logged
    try:
        images, labels = data.load_fashion_mnist_distributed(train=False, root=root)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    finally:
        mnist.download_and_extract_archive = extract
    return _digest(images, labels)


def _digest(images, labels):
    return hashlib.sha256(images.numpy().tobytes() + labels.numpy().tobytes()).hexdigest()


# name: (ranks per node, folders, the node whose folder has a corrupt archive). 4 ranks each.
SCENARIOS = {
    "one node": (4, 1, None),
    "2 nodes, one shared folder": (2, 1, None),
    "2 nodes, a folder each": (2, 2, None),
    "rank 0 fails": (4, 1, 0),
    "the second node's local rank 0 fails": (2, 2, 1),
}
CORRUPT = "t10k-labels-idx1-ubyte.gz"


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory):
    """{scenario: (its folders, what each of 4 ranks returned, what each rank extracted)}:
    each scenario on fresh folders holding the four archives only, all in one launch (starting 4
    processes costs seconds)."""
    calls, setups = [], {}
    for name, (ranks_per_node, folders, bad) in SCENARIOS.items():
        tmp = tmp_path_factory.mktemp("ranks")
        roots = [_copy_archives(tmp / f"node{n}") for n in range(folders)]
        if bad is not None:
            path = roots[bad] / "FashionMNIST" / "raw" / CORRUPT
            path.write_bytes(path.read_bytes()[:1000])
        (tmp / "log").mkdir()
        calls.append((load_on_every_rank, ([str(r) for r in roots], ranks_per_node,
                                           str(tmp / "log"))))
        setups[name] = roots, tmp / "log"
    # timeout: a rank left waiting for a preparing rank fails after 60 s instead of hanging
    results = dd.launch(dd.run_in_sequence, 4, calls, backend="gloo", timeout=60, deadline=300)
    return {name: (roots, [r[i] for r in results], _extracted(log))
            for i, (name, (roots, log)) in enumerate(setups.items())}


def _extracted(log):
    """{rank: ["folder archive" for each archive it extracted]}, from load_on_every_rank's log."""
    return {int(path.name): sorted(path.read_text().splitlines()) for path in Path(log).iterdir()}


@pytest.mark.parametrize("name, preparers", [
    ("one node", [0]), ("2 nodes, one shared folder", [0]), ("2 nodes, a folder each", [0, 2])])
def test_one_rank_prepares_each_folder_and_every_rank_gets_the_data(four_ranks, name, preparers):
    """A fresh folder is extracted by one rank while the others wait, then read by all: rank 0, and
    the local rank 0 of each other node whose folder rank 0 did not fill (ranks 0 and 2 here).
    (When every rank loaded by itself, each extracted the same four files into the same folder.)"""
    roots, results, extracted = four_ranks[name]
    archives = sorted(data.FASHION_MNIST_ARCHIVES)
    assert extracted == {rank: [f"{root} {archive}" for archive in archives]   # each one once
                         for rank, root in zip(preparers, roots)}
    images, labels = data.load_fashion_mnist(train=False, root=roots[0], download=False)
    assert results == [_digest(images, labels)] * 4


@pytest.mark.parametrize("name, bad_rank", [("rank 0 fails", 0),
                                            ("the second node's local rank 0 fails", 2)])
def test_when_the_preparing_rank_fails_every_rank_names_it_and_its_cause(four_ranks, name,
                                                                          bad_rank):
    """A corrupt archive: the preparing rank raises its own error, every other rank (on every
    node) an error naming that rank and the cause, at once (none waits for the group's timeout)."""
    roots, results, extracted = four_ranks[name]
    cause = f"{roots[-1] / 'FashionMNIST' / 'raw' / CORRUPT} is corrupt"
    for rank, said in enumerate(results):
        assert said.startswith("DatasetUnavailableError: ") and cause in said, (rank, said)
        if rank != bad_rank:
            assert f"rank {bad_rank} failed with DatasetUnavailableError: {cause}" in said, said
    assert set(extracted) <= {0}, "only rank 0 extracted its own, whole folder"
