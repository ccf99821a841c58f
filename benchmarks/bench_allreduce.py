"""All-reduce: bandwidth of the course's from-scratch ring all-reduce, the naive gather + broadcast
through rank 0, and gloo's own ``dist.all_reduce``, for 2 and 4 processes and float32 tensors from 4
KB to 64 MB, with the alpha-beta model fitted to each.

    .venv/bin/python benchmarks/bench_allreduce.py            # full run (a few minutes)
    .venv/bin/python benchmarks/bench_allreduce.py --smoke    # 2 processes, 2 small sizes

Times come from ``dltools.distributed.time_all_reduce`` run in processes started by
``dltools.distributed.launch``: the three algorithms take turns within each repeat (gloo, ring,
naive, gloo, ...) in the same processes, so a busy moment of the machine hits them alike; each
sample is the slowest rank's time (a barrier before each call); the table has the median of
``--repeats`` samples (3 times as many up to 1 MB) after a warm-up call. The ratio checked against
the target is the median of the repeats' paired ratios (each repeat times gloo and the ring side by
side), which a shared machine's load disturbs far less than a ratio of medians. Each rank runs cores
/ processes torch threads (at least 1, ``torch.set_num_threads`` in the worker), so the ranks do not
oversubscribe the cores; ``--threads-per-rank`` overrides it. The threads, cores, load average,
torch version and sizes are printed with the table. Bandwidth here is *algorithm bandwidth*: tensor
bytes / seconds. The alpha-beta fits use the models in ``dltools.distributed.alpha_beta_time``:
the course's ring ``ring_messages alpha + 2(N-1)/N bytes beta`` (its large reduce-scatter chunks
travel in up to 8 pieces), gloo's own (also ring-like) ``2(N-1) alpha + 2(N-1)/N bytes beta``; naive
``2(N-1) (alpha + bytes beta)``, fitted by least squares on relative error.
"""
import _common

FULL_SIZES = [4 << 10 << (2 * i) for i in range(8)]  # 4 KB, 16 KB, ..., 64 MB
SMOKE_SIZES = [4 << 10, 64 << 10]
ALGORITHMS = ("builtin", "ring", "naive")
LABELS = {"builtin": "gloo", "ring": "ring", "naive": "naive"}


def human(num_bytes):
    for unit, scale in (("MB", 1 << 20), ("KB", 1 << 10)):
        if num_bytes >= scale:
            return f"{num_bytes / scale:g} {unit}"
    return f"{num_bytes} B"


def time_sizes(sizes, repeats, algorithms, threads):
    """Inside a process group: ``time_all_reduce`` with ``threads`` torch threads in this rank,
    more repeats for the quick small sizes; return ``(times, threads actually used)``.

    Module-level so that the spawned worker processes can import it by name.
    """
    import torch

    from dltools.distributed import time_all_reduce
    torch.set_num_threads(threads)
    small, big = [s for s in sizes if s <= 1 << 20], [s for s in sizes if s > 1 << 20]
    times = {a: [] for a in algorithms}
    for part, reps in ((small, 3 * repeats), (big, repeats)):
        if part:
            for a, ts in time_all_reduce(part, reps, algorithms, keep_samples=True).items():
                times[a] += ts
    return times, torch.get_num_threads()


def median(values):
    return sorted(values)[len(values) // 2]


def paired_ratios(samples_a, samples_b):
    """``a / b`` for each repeat (the two were timed side by side): median and quartiles.

    A slow moment of a shared machine slows both calls of one repeat, so the ratio of each pair
    varies far less than the ratio of two medians taken from different moments.

    >>> paired_ratios([2, 6, 4, 1], [1, 2, 1, 1])    # ratios 2, 3, 4, 1
    (3.0, 2.0, 4.0)
    """
    r = sorted(a / b for a, b in zip(samples_a, samples_b))
    return median(r), r[len(r) // 4], r[(3 * len(r)) // 4]


def fit_alpha_beta(sizes, seconds, world_size, algorithm):
    """Non-negative ``alpha`` (s per message) and ``beta`` (s per byte), least squares on relative
    error (``dltools.stats.fit_costs``, as notebooks 03 and 05 fit them)."""
    from dltools.distributed import ring_messages
    from dltools.stats import fit_costs
    n = world_size
    if algorithm == "naive":
        msgs, bytes_factor = [2 * (n - 1)] * len(sizes), 2 * (n - 1)
    elif algorithm == "ring":   # the course's ring: a large reduce-scatter chunk goes in pieces
        msgs, bytes_factor = [ring_messages(s, n) for s in sizes], 2 * (n - 1) / n
    else:                       # gloo's own: the textbook ring's 2 (N - 1) messages
        msgs, bytes_factor = [2 * (n - 1)] * len(sizes), 2 * (n - 1) / n
    alpha, beta = fit_costs([msgs, [bytes_factor * s for s in sizes]], seconds)
    return alpha, beta


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--world-sizes", type=int, nargs="+", default=None,
                   help="default 2 4 (2 with --smoke)")
    p.add_argument("--repeats", type=int, default=None, help="default 31 (1 with --smoke)")
    p.add_argument("--threads-per-rank", type=int, default=None,
                   help="torch threads in each rank (default: cores / processes, at least 1)")
    args = _common.parse(p, argv)
    if args.threads_per_rank is not None and args.threads_per_rank < 1:
        p.error(f"--threads-per-rank must be at least 1, got {args.threads_per_rank}")
    import os

    import torch

    from dltools.distributed import launch, threads_per_process
    from dltools.launch import usable_cores

    sizes = SMOKE_SIZES if args.smoke else FULL_SIZES
    worlds = args.world_sizes or ([2] if args.smoke else [2, 4])
    repeats = args.repeats or (1 if args.smoke else 31)
    load_before = os.getloadavg()
    times, threads, samples = {}, {}, {}
    for n in worlds:
        wanted = args.threads_per_rank or threads_per_process(n)
        results = launch(time_sizes, n, sizes, repeats, ALGORITHMS, wanted, timeout=600,
                         deadline=None)
        samples[n] = results[0][0]
        times[n] = {a: [median(s) for s in per_size] for a, per_size in samples[n].items()}
        threads[n] = sorted({used for _, used in results})
    load_after = os.getloadavg()

    headers = ["processes", "size", "gloo GB/s", "ring GB/s", "naive GB/s", "ring / gloo",
               "naive / gloo"]
    rows = []
    for n in worlds:
        for i, size in enumerate(sizes):
            bw = {a: size / times[n][a][i] / 1e9 for a in ALGORITHMS}
            rows.append([n, human(size), f"{bw['builtin']:.3g}", f"{bw['ring']:.3g}",
                         f"{bw['naive']:.3g}", f"{bw['ring'] / bw['builtin']:.2f}",
                         f"{bw['naive'] / bw['builtin']:.2f}"])
    fits = []
    for n in worlds:
        for a in ALGORITHMS:
            alpha, beta = fit_alpha_beta(sizes, times[n][a], n, a)
            # A negative fitted term means the data do not pin it down (noise): say so.
            fits.append(f"| {n} | {LABELS[a]} | {f'{alpha * 1e6:.1f}' if alpha > 0 else 'n/a'} | "
                        f"{f'{1 / beta / 1e9:.2f}' if beta > 0 else 'n/a'} |")
    notes = ["Alpha-beta fits (alpha: seconds per message, 1/beta: link bandwidth):\n\n"
             "| processes | algorithm | alpha (us) | 1/beta (GB/s) |\n| --- | --- | --- | --- |\n"
             + "\n".join(fits),
             f"float32 tensors of {', '.join(human(x) for x in sizes)}; the three algorithms "
             f"interleaved in the same processes; median of {3 * repeats} (up to 1 MB) or "
             f"{repeats} (larger) timed calls after a warm-up, each the slowest rank's time. "
             "All processes share this machine's cores (no network: gloo over loopback TCP).",
             "Conditions: torch threads per rank "
             + ", ".join(f"{'/'.join(map(str, threads[n]))} with {n} processes" for n in worlds)
             + f"; {usable_cores()} usable cores; torch {torch.__version__}; load average "
             f"(1, 5, 15 min) {' '.join(f'{x:.2f}' for x in load_before)} before, "
             f"{' '.join(f'{x:.2f}' for x in load_after)} after."]
    if 16 << 20 in sizes:
        i = sizes.index(16 << 20)
        # bandwidth ratio ring / gloo = time gloo / time ring, per repeat
        paired = {n: paired_ratios(samples[n]["builtin"][i], samples[n]["ring"][i])
                  for n in worlds}
        ratios = ", ".join(f"{n} processes {m:.2f}x (quartiles {lo:.2f}-{hi:.2f})"
                           for n, (m, lo, hi) in paired.items())
        notes.append("Target: ring >= 0.9x gloo's bandwidth at 16 MB with 2 processes, >= 0.75x "
                     f"with 4. Measured, the median of the repeats' paired ratios: {ratios}.")
    _common.print_report("All-reduce: from-scratch ring and naive vs gloo", headers, rows, notes)

    path = _common.plot_path(args, "bench_allreduce.png")
    if path:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, axes = plt.subplots(1, len(worlds), figsize=(4.5 * len(worlds), 3.2), sharey=True,
                                 squeeze=False)
        for ax, n in zip(axes[0], worlds):
            for a in ALGORITHMS:
                ax.loglog(sizes, [s / t / 1e9 for s, t in zip(sizes, times[n][a])], "o-",
                          label=LABELS[a])
            ax.set_title(f"{n} processes")
            ax.set_xlabel("bytes")
            ax.grid(True, which="both", lw=0.3)
        axes[0][0].set_ylabel("algorithm bandwidth (GB/s)")
        axes[0][0].legend()
        _common.save_figure(fig, path)
    return times


if __name__ == "__main__":
    main()
