"""Data pipeline: one epoch over the 60,000 Fashion-MNIST training images at batch 256,
``dltools.load_data_fashion_mnist`` versus d2l's ``load_data_fashion_mnist``, without and with
``resize=64``.

    .venv/bin/python benchmarks/bench_data.py            # full run (about a minute)
    .venv/bin/python benchmarks/bench_data.py --smoke    # 3 batches each, a few seconds

Both read the same local archives in ``data/FashionMNIST/raw/``. d2l's loader looks in ``../data``
relative to the working directory and downloads when the files are missing, so it is called from a
temporary directory next to a ``data`` link to the course's data, with torchvision's download
switched off (a missing file is an error, never a download). d2l runs with its own settings
(4 worker processes, one PIL image and ``ToTensor`` per sample); dltools slices an in-memory tensor.

Checks (in the same run, on one untimed pass of each loader): both yield the same number of images,
values in [0, 1], and (full epochs) the same mean pixel value. The timed epochs only iterate.
"""
import contextlib
import os
import tempfile
import time
import warnings
from pathlib import Path

import _common

RESIZES = (None, 64)


@contextlib.contextmanager
def d2l_data_dir(data_root):
    """Chdir into a temporary folder whose ``../data`` is ``data_root``, and forbid downloads."""
    from torchvision.datasets import FashionMNIST

    raw = Path(data_root) / "FashionMNIST" / "raw"
    files = ("train-images-idx3-ubyte", "train-labels-idx1-ubyte",
             "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte")
    missing = [n for n in files if not (raw / n).exists()]
    if missing:
        raise SystemExit(f"the extracted Fashion-MNIST files {missing} are not in {raw}; run "
                         "dltools.load_data_fashion_mnist(256) once to extract them")

    def no_download(self):
        # torchvision calls download() when download=True; it returns early if the files exist.
        if not self._check_exists():
            raise RuntimeError("bench_data.py never downloads: d2l did not find the files in "
                               f"{raw}")

    old_cwd, old_download = os.getcwd(), FashionMNIST.download
    with tempfile.TemporaryDirectory(prefix="bench_data_") as tmp:
        os.symlink(Path(data_root).resolve(), Path(tmp) / "data")
        (Path(tmp) / "cwd").mkdir()
        os.chdir(Path(tmp) / "cwd")
        FashionMNIST.download = no_download
        try:
            yield
        finally:
            FashionMNIST.download = old_download
            os.chdir(old_cwd)


def timed_epoch(data_iter, max_batches=None):
    """Seconds to iterate ``data_iter`` once, touching nothing but the batches' existence."""
    t = time.perf_counter()
    for i, (X, y) in enumerate(data_iter):
        if max_batches is not None and i + 1 >= max_batches:
            break
    return time.perf_counter() - t


def epoch_stats(data_iter, max_batches=None):
    """One untimed pass: image count, value range, mean pixel value and image shape."""
    n, lo, hi, total, pixels, shape = 0, float("inf"), float("-inf"), 0.0, 0, None
    for i, (X, y) in enumerate(data_iter):
        n += X.shape[0]
        lo, hi = min(lo, float(X.min())), max(hi, float(X.max()))
        total += float(X.double().sum())
        pixels += X.numel()
        shape = tuple(X.shape[1:])
        if max_batches is not None and i + 1 >= max_batches:
            break
    return {"images": n, "min": lo, "max": hi, "mean": total / max(pixels, 1), "shape": shape}


def measure(resize, batch_size, rounds, dltools_repeats, max_batches):
    from d2l import torch as d2l

    import dltools

    t = time.perf_counter()
    mine, _ = dltools.load_data_fashion_mnist(batch_size, resize=resize, download=False)
    setup_mine = time.perf_counter() - t
    with d2l_data_dir(dltools.data_root()), warnings.catch_warnings():
        # d2l asks for 4 workers on any machine; PyTorch warns on 2 cores. Kept as d2l ships it.
        warnings.filterwarnings("ignore", message="This DataLoader will create")
        t = time.perf_counter()
        theirs, _ = d2l.load_data_fashion_mnist(batch_size, resize=resize)
        setup_theirs = time.perf_counter() - t
        stats = {"dltools": epoch_stats(mine, max_batches), "d2l": epoch_stats(theirs, max_batches)}
        times = {"dltools": [], "d2l": []}
        # Interleaved rounds, best of each: other work on the machine slows both alike.
        for _ in range(rounds):
            times["d2l"].append(timed_epoch(theirs, max_batches))
            for _ in range(dltools_repeats):
                times["dltools"].append(timed_epoch(mine, max_batches))
    for key in stats:
        stats[key]["seconds"] = min(times[key])
    return stats["dltools"], stats["d2l"], setup_mine, setup_theirs


def check(mine, theirs, full_epoch):
    problems = []
    if mine["images"] != theirs["images"]:
        problems.append(f"image counts differ: dltools {mine['images']}, d2l {theirs['images']}")
    if mine["shape"] != theirs["shape"]:
        problems.append(f"image shapes differ: dltools {mine['shape']}, d2l {theirs['shape']}")
    for name, r in (("dltools", mine), ("d2l", theirs)):
        if not (0.0 <= r["min"] <= r["max"] <= 1.0):
            problems.append(f"{name} values outside [0, 1]: [{r['min']}, {r['max']}]")
    # Over a whole (shuffled) epoch the mean pixel does not depend on the order; resizing with PIL
    # (d2l) or torch (dltools) differs by rounding only.
    if full_epoch and abs(mine["mean"] - theirs["mean"]) > 1e-3:
        problems.append(f"mean pixel differs: dltools {mine['mean']:.5f}, d2l {theirs['mean']:.5f}")
    if problems:
        raise SystemExit("bench_data.py: the two loaders disagree:\n  " + "\n  ".join(problems))


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    labels = [r["label"] for r in rows]
    x = range(len(rows))
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([i - 0.2 for i in x], [r["d2l"]["seconds"] for r in rows], 0.4, label="d2l")
    ax.bar([i + 0.2 for i in x], [r["dltools"]["seconds"] for r in rows], 0.4, label="dltools")
    for i, r in zip(x, rows):
        ax.annotate(f"{r['speedup']:.0f}x", (i + 0.2, r["dltools"]["seconds"]), ha="center",
                    va="bottom")
    ax.set_xticks(list(x), labels)
    ax.set_yscale("log")  # a 50x gap would leave the dltools bars invisible on a linear axis
    ax.set_ylabel("seconds per epoch (log scale)")
    ax.set_title("Fashion-MNIST, one epoch at batch 256")
    ax.legend()
    _common.save_figure(fig, path)


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--batch-size", type=int, default=256)
    args = _common.parse(p, argv)
    rounds, repeats, max_batches = (1, 1, 3) if args.smoke else (2, 3, None)
    rows = []
    for resize in RESIZES:
        mine, theirs, setup_mine, setup_theirs = measure(resize, args.batch_size, rounds, repeats,
                                                         max_batches)
        check(mine, theirs, full_epoch=max_batches is None)
        side = resize or 28
        rows.append({"label": f"{side}x{side}" + (" (resize=64)" if resize else ""),
                     "dltools": mine, "d2l": theirs, "speedup": theirs["seconds"] / mine["seconds"],
                     "setup": (setup_mine, setup_theirs)})
    headers = ["images", "count (d2l = dltools)", "value range", "mean pixel d2l / dltools",
               "d2l s/epoch", "dltools s/epoch", "speed-up (d2l / dltools)"]
    table = [[r["label"], r["dltools"]["images"],
              f"[{r['dltools']['min']:.0f}, {r['dltools']['max']:.0f}]",
              f"{r['d2l']['mean']:.4f} / {r['dltools']['mean']:.4f}",
              _common.fmt(r["d2l"]["seconds"]), _common.fmt(r["dltools"]["seconds"], 3),
              f"{r['speedup']:.1f}x"] for r in rows]
    epoch = "3 batches (smoke run)" if args.smoke else "one full epoch of the training set"
    notes = [f"Batch {args.batch_size}, {epoch}; best of {rounds} (d2l) and {rounds * repeats} "
             "(dltools) interleaved timed epochs. Building the loaders (not in the epoch time): "
             + ", ".join(f"{r['label']} d2l {r['setup'][1]:.2f} s, dltools {r['setup'][0]:.2f} s"
                         for r in rows) + ".",
             "Target: dltools >= 50x faster than d2l."]
    _common.print_report("Data pipeline: dltools vs d2l load_data_fashion_mnist", headers, table,
                         notes)
    path = _common.plot_path(args, "bench_data.png")
    if path:
        plot(rows, path)
    return rows


if __name__ == "__main__":
    main()
