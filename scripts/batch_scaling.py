"""Batch scaling: did study note 5's two-GPU run lose accuracy to the second device, or to the
batch?

Study note 5 trained ResNet-18 on Fashion-MNIST for 10 epochs: one GPU at batch 256 and lr 0.1
(test accuracy 0.92), two GPUs at batch 512 and lr 0.2 (0.72), one run each. This script repeats
those runs over several seeds, next to the controls that separate the candidate causes, and records
every epoch:

    one-256         1 device,  batch 256, lr 0.1   study note 5's one-GPU run
    dp-512          2 devices, batch 512, lr 0.2   study note 5's two-GPU run (DataParallel)
    one-512         1 device,  batch 512, lr 0.2   the same optimisation on one device
    one-512-warmup  as one-512, lr ramped up linearly from near 0 over --warmup-epochs (Goyal et
                    al., 2017, ramp up from the small batch's lr instead: here from 0.1)
    ddp-512         2 processes (DDP), batch 512, lr 0.2; only under torchrun with 2 processes
    dp-512-after-256
                    as dp-512, but as study note 5 ran it: in the network one-256 trained first.
                    d2l's ``train`` re-draws only the Conv2d and Linear weights, so the second
                    run starts from the first run's BatchNorm layers (scale, shift, running
                    statistics) and biases. The re-drawn weights and the batch order are
                    dp-512's of the same seed: paired with dp-512, the difference is what the
                    inherited state does. Twice the training time of the others.

Two devices are two GPUs when there are, else two CPU replicas in threads (dltools.parallel). Study
note 5's configuration (all 60,000 images, width 64) on GPUs:

    python scripts/batch_scaling.py --report bs.json
    torchrun --standalone --nproc_per_node=2 scripts/batch_scaling.py --configs ddp-512 \\
        --report bs.json
    python scripts/batch_scaling.py --report bs.json --figure bs.png --plot-only

(the DDP runs are added to the same report, which keeps runs of the same scale).

On a 2-core CPU, the committed results (results/batch_scaling_cpu.json) came from:

    python scripts/batch_scaling.py --width 4 --jobs 2 --report results/batch_scaling_cpu.json \\
        --figure images/batch_scaling_cpu.png
    python scripts/batch_scaling.py --width 4 --jobs 2 --configs dp-512-after-256 --seeds 0 1 \\
        --report results/batch_scaling_after_cpu.json    # then --jobs 1 --seeds 0 1 2 (seed 2)

``--report`` is rewritten after every run, and an interrupted run resumes where it stopped.
"""
import argparse
import copy
import datetime
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DistributedSampler

import dltools
from common import (  # scripts/common.py, beside this file
    distinct_outputs,
    image_count,
    load_split,
    output_file,
    setup_ddp,
    teardown_ddp,
    to_input,
    write_report,
)
from dltools.launch import exit_with_parent, max_processes

# name: (devices, batch, lr, warm-up); batches are study note 5's, before --batch-divisor
CONFIGS = {
    "one-256": ("one", 256, 0.1, False),
    "dp-512": ("dp", 512, 0.2, False),
    "one-512": ("one", 512, 0.2, False),
    "one-512-warmup": ("one", 512, 0.2, True),
    "ddp-512": ("ddp", 512, 0.2, False),
    "dp-512-after-256": ("dp", 512, 0.2, False),
}
#: configurations trained in the network another configuration trained first (as d2l's cells do)
AFTER = {"dp-512-after-256": "one-256"}


def redrawn_keys(net):
    """The state-dict keys that ``dltools.init_weights_normal`` draws again: the weights of every
    Conv2d and Linear layer (their biases and the BatchNorm layers are left as they are)."""
    return {f"{name}.weight" for name, m in net.named_modules()
            if isinstance(m, (nn.Conv2d, nn.Linear))}


class Trainer:
    """One run: a fresh network for ``seed``, trained with SGD, scored on the test set per epoch."""

    def __init__(self, kind, batch_size, lr, warmup_epochs, seed, args, device, inherit=None):
        self.kind, self.device, self.seed = kind, device, seed
        self.bn_images = args.bn_images
        self.train_images, self.train_labels = load_split(True, args.num_train,
                                                          args.data_root).tensors
        self.test_images, self.test_labels = load_split(False, args.num_test,
                                                        args.data_root).tensors
        dltools.seed_everything(seed)
        net = dltools.resnet18(10, width=args.width)
        net.apply(dltools.init_weights_normal)  # d2l: N(0, 0.01^2) for Conv2d and Linear weights
        if inherit is not None:  # a trained network's state, but these freshly drawn weights
            fresh, keep = net.state_dict(), redrawn_keys(net)
            net.load_state_dict({k: fresh[k] if k in keep else v for k, v in inherit.items()})
        self.net = net
        if kind == "ddp":
            world = dist.get_world_size()
            self.model = DDP(net.to(device), device_ids=[device] if device.type == "cuda" else None)
            self.sampler = DistributedSampler(range(len(self.train_labels)), shuffle=True,
                                              seed=seed)
            if batch_size % world:  # an uneven split would change the global batch it reports
                raise SystemExit(f"the global batch of {batch_size} must be divisible by the "
                                 f"{world} processes: use --nproc_per_node=2 (study note 5's two "
                                 "GPUs)")
            self.batch_size = batch_size // world  # per process; the global batch stays the same
        else:
            devices = [device] if kind == "one" else dltools.replica_devices(2)
            self.device = devices[0]  # DataParallel takes its inputs on its first device
            self.model = dltools.wrap_data_parallel(net, devices)
            self.generator = torch.Generator().manual_seed(seed)
            self.batch_size = batch_size
        self.steps_per_epoch = -(-len(self._order(0)) // self.batch_size)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        warmup = warmup_epochs * self.steps_per_epoch  # in steps: lr grows linearly to its value
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup else 1.0)
        self.loss = nn.CrossEntropyLoss()

    def _order(self, epoch):
        if self.kind == "ddp":
            self.sampler.set_epoch(epoch)
            return torch.tensor(list(self.sampler))
        return torch.randperm(len(self.train_labels), generator=self.generator)

    def _run_batch(self, X, y):
        self.optimizer.zero_grad()
        y_hat = self.model(X)
        loss = self.loss(y_hat, y)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        # kept on the device: no wait for the GPU of its own (float64: exact sums, as before)
        return torch.stack([loss.detach().double() * len(y),
                            (y_hat.detach().argmax(dim=1) == y).sum().double(),
                            torch.full((), len(y), dtype=torch.float64, device=y.device)])

    def _run_epoch(self, epoch):
        self.model.train()
        order = self._order(epoch)
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, seen
        for i in range(0, len(order), self.batch_size):
            idx = order[i:i + self.batch_size]
            X, y = to_input(self.train_images[idx], self.device), self.train_labels[idx]
            totals += self._run_batch(X, y.to(self.device))
        if self.kind == "ddp":  # each process saw its shard: sum over all of them
            dist.all_reduce(totals)
        loss_sum, correct, seen = totals.tolist()
        self.examples_per_epoch = int(seen)  # the images the means cover (all of them under DDP)
        return loss_sum / seen, correct / seen

    def _test_accuracy(self, net=None):
        """Under DDP every process holds the same parameters, and its BatchNorm buffers are rank
        0's from the start of the last step (DDP broadcasts them before each forward) plus its own
        last update: rank 0 scores the whole test set with its own."""
        net = self.net if net is None else net
        net.eval()
        correct = 0.0
        with torch.no_grad():
            for i in range(0, len(self.test_labels), 1000):
                X = to_input(self.test_images[i:i + 1000], self.device)
                correct += dltools.accuracy(net(X), self.test_labels[i:i + 1000].to(self.device))
        return correct / len(self.test_labels)

    def _recalibrated_accuracy(self):
        """Test accuracy after re-estimating BatchNorm's running statistics on training images.

        The running statistics are an exponential average (momentum 0.1) that lags behind the
        weights. A copy of the network with them recomputed as a plain average over the first
        ``--bn-images`` training images (in training mode, in batches of the training batch size,
        without gradients) tells weights that are worse from running statistics that have not
        caught up yet."""
        net = copy.deepcopy(self.net)
        for m in net.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.reset_running_stats()
                m.momentum = None  # a cumulative average over the batches below
        net.train()
        n = min(self.bn_images, len(self.train_labels))
        with torch.no_grad():
            for i in range(0, n, self.batch_size):
                net(to_input(self.train_images[i:min(i + self.batch_size, n)], self.device))
        return self._test_accuracy(net)

    def train(self, num_epochs, score=True):
        # Under DDP only rank 0 scores (it writes the report); the others go on to the next
        # epoch's first all-reduce and wait there, leaving the cores to rank 0.
        scores = score and (self.kind != "ddp" or dist.get_rank() == 0)
        history = []
        for epoch in range(num_epochs):
            tik = time.perf_counter()
            train_loss, train_acc = self._run_epoch(epoch)
            seconds = time.perf_counter() - tik
            history.append({"epoch": epoch + 1, "steps": (epoch + 1) * self.steps_per_epoch,
                            "train_loss": train_loss, "train_acc": train_acc,
                            "train_examples": self.examples_per_epoch,
                            "test_acc": self._test_accuracy() if scores else None,
                            "test_acc_recalibrated_bn":
                                self._recalibrated_accuracy() if scores else None,
                            "seconds": seconds})
        return history


def run_one(name, seed, args, device=None):
    """Train configuration ``name`` with ``seed``; return its record for the report."""
    kind, batch, lr, warm = CONFIGS[name]
    batch //= args.batch_divisor
    if device is None:
        device = dltools.replica_devices(1)[0]
    first, inherit = None, None
    if name in AFTER:  # the first run, scored once at its end (its history is its config's own)
        f_kind, f_batch, f_lr, f_warm = CONFIGS[AFTER[name]]
        trainer = Trainer(f_kind, f_batch // args.batch_divisor, f_lr,
                          args.warmup_epochs if f_warm else 0, seed, args, device)
        f_history = trainer.train(args.epochs, score=False)
        first = {"config": AFTER[name], "test_acc": trainer._test_accuracy(),
                 "seconds": sum(h["seconds"] for h in f_history)}
        inherit = trainer.net.state_dict()
    trainer = Trainer(kind, batch, lr, args.warmup_epochs if warm else 0, seed, args, device,
                      inherit)
    history = trainer.train(args.epochs)
    record = {"config": name, "seed": seed, "devices": kind, "batch_size": batch, "lr": lr,
              "world_size": dist.get_world_size() if kind == "ddp" else 1,
              "torch_threads": torch.get_num_threads(),   # this run's, per process
              "warmup_epochs": args.warmup_epochs if warm else 0,
              "steps_per_epoch": trainer.steps_per_epoch, "history": history,
              "test_acc": history[-1]["test_acc"]}
    if first is not None:
        record["first_run"] = first
    return record


def _run_in_worker(name, seed, args, threads):
    torch.set_num_threads(threads)
    return run_one(name, seed, args)


def seed_int(text):
    """A random seed: a whole number from 0 to 2**32 - 1 (what NumPy's generator accepts).

    >>> seed_int("-1")
    Traceback (most recent call last):
    ...
    argparse.ArgumentTypeError: a random seed is a whole number from 0 to 4294967295, not -1
    """
    try:
        seed = int(text)
    except ValueError:
        seed = None
    if seed is None or not 0 <= seed < 2**32:
        raise argparse.ArgumentTypeError(
            f"a random seed is a whole number from 0 to {2**32 - 1}, not {text}")
    return seed


def scale(args):
    return {k: getattr(args, k) for k in ("width", "num_train", "num_test", "epochs",
                                          "batch_divisor", "warmup_epochs", "bn_images")}


def report_scale(report):
    """The scale a report was run at (reports from before --bn-images existed used 2000)."""
    return {"bn_images": 2000, **report["scale"]}


def load_done(path, args):
    """Runs already in an earlier report of the same scale (to resume; none without a report).

    A report of another scale, or a file that is not a report, is never overwritten: the script
    stops before any work and says so."""
    if not (path and Path(path).is_file()):
        return []
    try:
        old = json.loads(Path(path).read_text())
        runs, old_scale = old["runs"], report_scale(old)
    except (ValueError, KeyError, TypeError) as err:
        sys.exit(f"{path} is not a report of this script ({err!r}), and it would be overwritten: "
                 "give another --report, or move that file away")
    if old_scale != scale(args):
        differ = ", ".join(f"{k} {old_scale.get(k)} there, {v} now"
                           for k, v in scale(args).items() if old_scale.get(k) != v)
        sys.exit(f"{path} holds {len(runs)} runs at another scale ({differ}); they would be "
                 "lost: give another --report, or move that file away to start over")
    return runs


def save_report(path, args, runs, started):
    """The report of ``runs`` so far, written to ``path`` (if given) and returned."""
    report = {"script": "scripts/batch_scaling.py", "command": " ".join(sys.argv),
              "started": started, "finished": datetime.datetime.now().isoformat(timespec="seconds"),
              "machine": dict(dltools.device_report()), "scale": scale(args), "jobs": args.jobs,
              "runs": runs}   # each run records its own torch threads and world size
    write_report(path, **report)
    return report


def plot(report, path):
    """Test accuracy per epoch and per step: the mean over seeds, and the band from min to max."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, axes = plt.subplots(1, 3, figsize=(13, 3.8), sharey=True)
    for i, name in enumerate(dict.fromkeys(r["config"] for r in report["runs"])):
        runs = [r for r in report["runs"] if r["config"] == name]
        for ax, x_key, y_key in zip(axes, ("epoch", "steps", "epoch"),
                                    ("test_acc", "test_acc", "test_acc_recalibrated_bn")):
            acc = torch.tensor([[h[y_key] for h in r["history"]] for r in runs])
            x = [h[x_key] for h in runs[0]["history"]]
            ax.plot(x, acc.mean(0), marker="o", ms=3, color=f"C{i}",
                    label=f"{name} ({len(runs)} seeds)")
            ax.fill_between(x, acc.min(0).values, acc.max(0).values, color=f"C{i}", alpha=0.2)
    axes[0].set(xlabel="epoch", ylabel="test accuracy", title="per epoch")
    axes[1].set(xlabel="optimizer steps", title="per step")
    axes[2].set(xlabel="epoch", title="BatchNorm statistics re-estimated")
    axes[0].legend(fontsize=8)
    m, s = report["machine"], report["scale"]
    gpus = m.get("gpu_names", m.get("gpus"))   # "gpus" in reports written before device_report
    fig.suptitle(f"width {s['width']}, {s['num_train'] or 60000} images, batches / "
                 f"{s['batch_divisor']}; {gpus[0] if gpus else m['cpu']}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)


#: The formats --figure can be saved in (matplotlib's, by suffix).
FIGURE_SUFFIXES = (".png", ".pdf", ".svg", ".jpg")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--report", type=output_file,
                   help="where to write the results (JSON); also the resume file")
    p.add_argument("--figure", type=output_file, help="where to save the accuracy curves (PNG)")
    p.add_argument("--configs", nargs="+", choices=list(CONFIGS),
                   default=["one-256", "dp-512", "one-512", "one-512-warmup"])
    p.add_argument("--seeds", nargs="+", type=seed_int, default=[0, 1, 2])
    p.add_argument("--width", type=int, default=64, help="channels of ResNet-18's first stage")
    p.add_argument("--num-train", type=image_count("train"), default=None,
                   help="first N training images (all)")
    p.add_argument("--num-test", type=image_count("test"), default=None,
                   help="first N test images (all)")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-divisor", type=int, default=1, help="divide every batch by this")
    p.add_argument("--warmup-epochs", type=int, default=2)
    p.add_argument("--bn-images", type=int, default=2000,
                   help="training images to re-estimate BatchNorm's statistics on (the first N)")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, in separate processes")
    p.add_argument("--data-root", default=None, help="folder holding FashionMNIST/raw/")
    p.add_argument("--plot-only", action="store_true",
                   help="only redraw --figure from the runs in --report")
    args = p.parse_args(argv)
    for name in ("width", "epochs", "batch_divisor", "jobs", "bn_images"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    if args.warmup_epochs < 0:
        p.error(f"--warmup-epochs must be 0 or more, got {args.warmup_epochs}")
    if 512 % (2 * args.batch_divisor):
        p.error("--batch-divisor must leave both batches whole and even (a divisor of 256)")
    for name in ("seeds", "configs"):
        twice = sorted({v for v in getattr(args, name) if getattr(args, name).count(v) > 1})
        if twice:
            p.error(f"--{name} names {twice} more than once: each run would be trained and "
                    "recorded twice")
    if args.figure is not None and args.figure.suffix.lower() not in FIGURE_SUFFIXES:
        p.error(f"--figure {args.figure}: give a file name ending in one of "
                f"{', '.join(FIGURE_SUFFIXES)}")
    if args.plot_only and (args.report is None or args.figure is None):
        p.error("--plot-only redraws --figure from the runs in --report: give both")
    distinct_outputs(p, args, "report", "figure")
    return args


def main_ddp(args):
    """Under torchrun: every configuration must be DDP; rank 0 writes the report."""
    if set(args.configs) != {"ddp-512"}:
        sys.exit("under torchrun only --configs ddp-512 runs (the others are one process)")
    device = setup_ddp()
    started = datetime.datetime.now().isoformat(timespec="seconds")
    # rank 0 reads --report (runs of the same scale are kept, so the one-process runs and the
    # DDP runs can share one file, and done DDP runs are skipped) and tells the others
    plan = [load_done(args.report, args) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(plan, src=0)   # a Python object: pickled, sent through the group
    runs = plan[0]
    done = {(r["config"], r["seed"]) for r in runs}
    for seed in args.seeds:
        if ("ddp-512", seed) in done:
            continue
        runs.append(run_one("ddp-512", seed, args, device))
        if dist.get_rank() == 0:
            save_report(args.report, args, runs, started)
    if dist.get_rank() == 0:
        save_report(args.report, args, runs, started)
    teardown_ddp()   # only after success: a rank that raised leaves at once, and torchrun
    # stops the others (a barrier here would wait for peers blocked in training's collectives)


def report_to_plot(path):
    """The report ``--plot-only`` redraws; a missing file or one that is not a finished report of
    this script stops with what to do."""
    path = Path(path)
    if not path.is_file():
        sys.exit(f"--plot-only redraws a report, and {path} does not exist: run the script "
                 "without --plot-only first, with this --report")
    try:
        report = json.loads(path.read_text())
        missing = [k for k in ("runs", "scale", "machine") if k not in report]
        why = f"no {', '.join(missing)}" if missing else None if report["runs"] else "no runs yet"
    except (ValueError, TypeError) as err:
        why = repr(err)
    if why:
        sys.exit(f"{path} is not a report of this script with runs to plot ({why}): give the "
                 "--report a run of this script wrote")
    return report


def main(argv=None):
    args = parse_args(argv)
    if args.plot_only:
        return plot(report_to_plot(args.report), args.figure)
    if int(os.environ.get("WORLD_SIZE", 1)) > 1:
        return main_ddp(args)
    if "ddp-512" in args.configs:
        sys.exit("ddp-512 runs one process per device: launch it with\n  torchrun --standalone "
                 "--nproc_per_node=2 scripts/batch_scaling.py --configs ddp-512 ...")
    started = datetime.datetime.now().isoformat(timespec="seconds")
    runs = load_done(args.report, args)
    done = {(r["config"], r["seed"]) for r in runs}
    todo = [(c, s) for s in args.seeds for c in args.configs if (c, s) not in done]
    for train in (True, False):  # decode the archives once, before the workers all read them
        load_split(train, None, args.data_root)
    jobs = min(args.jobs, max_processes())
    if jobs < min(args.jobs, len(todo)):
        print(f"--jobs {args.jobs}: this machine runs at most {jobs} processes at once "
              "(dltools.launch.max_processes: 4 per core, and the free memory); using "
              f"{jobs}", flush=True)
    args.jobs = jobs   # as the report records it
    threads = max(1, torch.get_num_threads() // jobs)
    # each pool worker ends with this process, even when it is killed outright
    with ProcessPoolExecutor(jobs, mp_context=get_context("spawn"),
                             initializer=exit_with_parent) as pool:
        futures = [pool.submit(_run_in_worker, c, s, args, threads) for c, s in todo]
        for (c, s), f in zip(todo, futures):
            runs.append(f.result())
            print(f"{c:15s} seed {s}: test acc {runs[-1]['test_acc']:.4f}", flush=True)
            report = save_report(args.report, args, runs, started)
    report = save_report(args.report, args, runs, started)
    if args.figure:
        plot(report, args.figure)
    return report


if __name__ == "__main__":
    main()
