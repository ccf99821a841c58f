"""DataParallel's step, term by term: a cost model checked against a measured step (study note 5's
"why 1.5x and not 2x").

The model (notebook 04 explains it from ``torch/nn/parallel/data_parallel.py``) predicts the time
of one DataParallel training step on ``N`` devices as the sum of terms, each measured *on its own*
on this machine:

* **compute**: one replica's forward, loss, backward and optimizer step at ``batch / N`` images,
  run alone on device 0. Distinct GPUs run the replicas side by side, so the term counts once;
  CPU "devices" share the same cores, so it counts ``N`` times;
* **replicate**: copying the module onto the devices every step (``torch.nn.parallel.replicate``
  on GPUs, ``dltools.parallel.replicate`` on the CPU): the parameter broadcast plus Python;
* **transfers**: the bytes that go through device 0's link besides the parameters (scatter the
  inputs, gather the outputs, their gradients back, the gradient reduce), from
  ``dltools.traffic.dp_step_bytes``, divided by the copy bandwidth measured from device 0 to
  device 1 (a copy into new memory, as the scatter and the broadcast make).

It leaves out on purpose what it cannot time on its own: the replicas' threads launching kernels
under one GIL (on the CPU, also competing for the same cores, each with its own torch threads),
and the scatter, gather and thread start-up in Python. The measured step minus the predicted one
is that residual, and the table prints it.

    .venv/bin/python benchmarks/bench_dp_step.py            # about a minute on 2 cores
    .venv/bin/python benchmarks/bench_dp_step.py --smoke    # tiny sizes

On a machine with 2 or more GPUs the same command uses them (``nn.DataParallel``, study note 5's
full-width ResNet-18 at batch 512), and prints the time lost per step next to study note
5's 19.2 ms:

    .venv/bin/python benchmarks/bench_dp_step.py --world-size 2

Defaults without GPUs: ``['cpu'] * 2`` thread replicas, ResNet-18 at width 16, batch 128.
"""
import statistics
import time

import _common


def timed_median(fn, repeats):
    """Median seconds of ``fn()`` over ``repeats`` calls after one warm-up call, waiting for every
    GPU before and after each call."""
    from dltools.timing import synchronize
    fn()
    samples = []
    for _ in range(repeats):
        synchronize()
        t = time.perf_counter()
        fn()
        synchronize()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def train_step(net, optimizer, X, y):
    from torch import nn
    optimizer.zero_grad()
    nn.functional.cross_entropy(net(X), y).backward()
    optimizer.step()


def measure(width, batch, devices, repeats, seed=0):
    """Every term of the model and the measured DataParallel step, in seconds, plus the bytes."""
    import torch
    from torch import nn

    import dltools
    n, dev0 = len(devices), devices[0]
    gen = torch.Generator().manual_seed(seed)
    X = torch.rand(batch, 1, 28, 28, generator=gen).to(dev0)
    y = torch.randint(0, 10, (batch,), generator=gen).to(dev0)

    def fresh():
        dltools.seed_everything(seed)
        net = dltools.resnet18(10, in_channels=1, width=width).to(dev0)
        return net, torch.optim.SGD(net.parameters(), lr=0.01)

    out = {"params": dltools.num_params(fresh()[0])}
    net, opt = fresh()
    part = batch // n
    out["single"] = timed_median(lambda: train_step(net, opt, X, y), repeats)
    out["part"] = timed_median(lambda: train_step(net, opt, X[:part], y[:part]), repeats)

    model = fresh()[0]
    traffic = dltools.traffic.dp_step_bytes(model, X.cpu(), num_devices=n)
    out["bytes"] = {phase: traffic[phase]["master_sent"] + traffic[phase]["master_received"]
                    for phase in ("scatter", "broadcast", "gather", "output_grads", "reduce")}
    # Copy bandwidth from device 0 to device 1, into new memory as every copy of a step is.
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    copy = timed_median(lambda: flat.to(devices[1], copy=True), repeats)
    out["bandwidth"] = flat.numel() * flat.element_size() / copy

    if all(d.type == "cuda" for d in devices):
        def replicate():
            return nn.parallel.replicate(model, devices)
    else:
        def replicate():
            return dltools.parallel.replicate(model, devices)
    out["replicate"] = timed_median(replicate, repeats)

    net, opt = fresh()
    dp = dltools.wrap_data_parallel(net, devices)
    out["dp"] = timed_median(lambda: train_step(dp, opt, X, y), repeats)
    return out


def predict(m, n, parallel_devices):
    """The model's terms in seconds: ``{term: seconds}``, in the order of the table."""
    link = {k: v / m["bandwidth"] for k, v in m["bytes"].items() if k != "broadcast"}
    return {"compute": m["part"] * (1 if parallel_devices else n),
            "replicate": m["replicate"],
            "transfers": sum(link.values())}


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=2,
                   help="replicas (GPUs when there are that many, else CPU thread replicas)")
    p.add_argument("--width", type=int, default=None,
                   help="ResNet-18 width (64 = d2l's; default 64 on GPUs, 16 on the CPU)")
    p.add_argument("--batch", type=int, default=None,
                   help="global batch (default 512 on GPUs as in study note 5, 128 on the CPU)")
    p.add_argument("--repeats", type=int, default=None, help="timed calls per term (default 7)")
    args = _common.parse(p, argv)
    import torch

    import dltools
    n = args.world_size
    if n < 2:
        p.error(f"--world-size must be at least 2, got {n}")
    devices = dltools.replica_devices(n)
    on_gpus = devices[0].type == "cuda"
    width = args.width or (4 if args.smoke else 64 if on_gpus else 16)
    batch = args.batch or (8 if args.smoke else 512 if on_gpus else 128)
    if batch % n:
        p.error(f"--batch {batch} must be divisible by --world-size {n}")
    repeats = args.repeats or (1 if args.smoke else 7)

    m = measure(width, batch, devices, repeats)
    terms = predict(m, n, on_gpus)
    predicted = sum(terms.values())
    residual = m["dp"] - predicted
    ms = lambda s: _common.fmt(1e3 * s)  # noqa: E731
    link_bytes = sum(v for k, v in m["bytes"].items() if k != "broadcast")
    how = {"compute": (f"one replica's step at {batch // n} images, alone on device 0"
                       + ("" if on_gpus else f", x {n}: CPU replicas share the cores")),
           "replicate": f"{'nn.parallel' if on_gpus else 'dltools.parallel'}.replicate, timed",
           "transfers": f"{link_bytes / 1e6:.2f} MB through device 0 at "
                        f"{m['bandwidth'] / 1e9:.1f} GB/s (measured copy)"}
    rows = [[term, ms(s), how[term]] for term, s in terms.items()]
    rows += [["predicted step", ms(predicted), "the sum of the terms"],
             ["measured step", ms(m["dp"]), "a whole DataParallel training step, timed"],
             ["residual", ms(residual), "measured - predicted: " + (
                 "two threads launching kernels under one GIL, Python's scatter and gather"
                 if on_gpus else "two replica threads (each with its torch threads) sharing the "
                 "cores, the GIL, Python's scatter and gather")],
             ["1-device step", ms(m["single"]), f"all {batch} images on device 0"]]
    where = (f"{n} x {torch.cuda.get_device_name(0)}, nn.DataParallel" if on_gpus
             else f"['cpu'] x {n}, dltools' thread replicas")
    notes = [f"ResNet-18 width {width} ({m['params']:,} parameters), global batch {batch}, "
             f"{where}; each time the median of {repeats} calls after a warm-up.",
             f"Measured/predicted step: {m['dp'] / predicted:.2f}. Speed-up over one device: "
             f"predicted {m['single'] / predicted:.2f}x, measured {m['single'] / m['dp']:.2f}x."]
    if on_gpus:
        notes.append(f"Time lost per step (measured step - one replica's compute): "
                     f"{1e3 * (m['dp'] - m['part']):.1f} ms; study note 5's two GPUs lost at most "
                     "19.2 ms per step (notebook 04).")
    _common.print_report("DataParallel's step: cost model vs measurement", ["term", "ms", "how"],
                         rows, notes)
    path = _common.plot_path(args, "bench_dp_step.png")
    if path:
        plot(terms, m, path, where)
    return m, terms


def plot(terms, m, path, where):
    """One stacked bar of the predicted terms beside the measured step and the 1-device step."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(6, 2.6))
    left = 0.0
    for term, s in terms.items():
        ax.barh("predicted", 1e3 * s, left=left, label=term)
        left += 1e3 * s
    ax.barh("measured", 1e3 * m["dp"], color="0.4", label="measured step")
    ax.barh("1 device", 1e3 * m["single"], color="0.75", label="1-device step")
    ax.invert_yaxis()
    ax.set_xlabel("ms per training step")
    ax.set_title(f"DataParallel step on {where}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    _common.save_figure(fig, path)


if __name__ == "__main__":
    main()
