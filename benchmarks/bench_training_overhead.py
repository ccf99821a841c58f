"""Training-loop overhead: images/second of ``dltools.train_ch13`` (no live plot, progress bar on)
versus a bare PyTorch loop, same model, same initial weights, same batches, same optimizer.

    .venv/bin/python benchmarks/bench_training_overhead.py            # full run (about 2 minutes)
    .venv/bin/python benchmarks/bench_training_overhead.py --smoke    # tiny sizes, a few seconds

The bare loop is ``zero_grad, loss(net(X), y).sum().backward(), step`` and nothing else. Both sides
are timed over the training batches only (``train_ch13`` excludes its test-set evaluation from its
own images/second, and so does this script). Rounds alternate bare / dltools and the best of each
is kept, so other work on the machine slows both alike.

Two models: the narrow ResNet-18 (``width=16``, compute bound: the course's claim) and a small MLP
(a step takes about a millisecond, so per-step bookkeeping such as the progress bar shows up).
"""
import copy
import time

import _common


def bare_loop(net, batches, loss, trainer):
    """One epoch of the plainest training loop; returns seconds."""
    net.train()
    t = time.perf_counter()
    for X, y in batches:
        trainer.zero_grad()
        losses = loss(net(X), y)
        losses.sum().backward()
        trainer.step()
    return time.perf_counter() - t


def models(smoke):
    from torch import nn

    import dltools

    def mlp():
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256),
                             nn.ReLU(), nn.Linear(256, 10))

    width = 4 if smoke else 16
    return [  # name, constructor, batch size, steps per epoch
        (f"ResNet-18 width={width}", lambda: dltools.resnet18(10, width=width),
         32 if smoke else 256, 2 if smoke else 8),
        ("MLP 784-256-256-10", mlp, 32 if smoke else 256, 5 if smoke else 150),
    ]


def measure(name, make_net, batch_size, steps, rounds):
    import torch
    from torch import nn

    import dltools

    dltools.seed_everything(0)
    train_iter, test_iter = dltools.load_data_fashion_mnist(
        batch_size, num_train=batch_size * steps, num_test=batch_size, shuffle_train=False,
        download=False)
    batches, test_batches = list(train_iter), list(test_iter)  # the same tensors for both sides
    init = make_net()
    nets = {"bare": copy.deepcopy(init), "dltools": copy.deepcopy(init)}
    loss = nn.CrossEntropyLoss(reduction="none")
    trainers = {k: torch.optim.SGD(n.parameters(), lr=0.05) for k, n in nets.items()}

    def run_dltools():
        r = dltools.train_ch13(nets["dltools"], batches, test_batches, loss, trainers["dltools"], 1,
                               ["cpu"], animate=False, progress_bar=True, verbose=False)
        return len(batches) * batch_size / r["examples_per_sec"]

    def run_bare():
        return bare_loop(nets["bare"], batches, loss, trainers["bare"])

    run_bare(), run_dltools()  # warm-up: first-call allocations, tqdm import
    times = {"bare": [], "dltools": []}
    for r in range(rounds):
        order = (("bare", run_bare), ("dltools", run_dltools))
        for key, fn in (order if r % 2 == 0 else order[::-1]):
            times[key].append(fn())
    images = len(batches) * batch_size
    bare, mine = images / min(times["bare"]), images / min(times["dltools"])
    return {"name": name, "batch": batch_size, "steps": steps, "bare": bare, "dltools": mine,
            "ratio": mine / bare}


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    args = _common.parse(p, argv)
    rounds = 1 if args.smoke else 4
    rows = [measure(name, make, batch, steps, rounds)
            for name, make, batch, steps in models(args.smoke)]
    headers = ["model", "batch x steps", "bare loop img/s", "train_ch13 img/s",
               "train_ch13 / bare", "overhead"]
    table = [[r["name"], f"{r['batch']} x {r['steps']}", _common.fmt(r["bare"], 1),
              _common.fmt(r["dltools"], 1), f"{r['ratio']:.3f}",
              f"{100 * (1 - r['ratio']):+.1f}%"] for r in rows]
    notes = [f"Best of {rounds} alternating one-epoch rounds per side after one warm-up epoch; "
             "train_ch13 with animate=False, progress_bar=True (tqdm on stderr), one CPU device.",
             "Target: overhead <= 5% for the ResNet-18 (a negative overhead is noise)."]
    _common.print_report("Training-loop overhead: dltools.train_ch13 vs a bare loop", headers,
                         table, notes)
    path = _common.plot_path(args, "bench_training_overhead.png")
    if path:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.barh([r["name"] for r in rows], [r["ratio"] for r in rows])
        ax.axvline(1.0, color="k", lw=0.8)
        ax.axvline(0.95, color="r", ls="--", lw=0.8, label="5% overhead")
        ax.set_xlabel("train_ch13 images/s / bare loop images/s")
        ratios = [r["ratio"] for r in rows]
        ax.set_xlim(min(0.8, min(ratios) - 0.05), max(1.05, max(ratios) + 0.05))
        ax.legend(loc="lower left")
        _common.save_figure(fig, path)
    return rows


if __name__ == "__main__":
    main()
