"""Shared by the benchmark scripts: command-line flags, the machine line, Markdown tables, timing.

Each ``bench_*.py`` is run on its own (``.venv/bin/python benchmarks/bench_data.py``); Python puts
this folder on ``sys.path``, so ``import _common`` works without making ``benchmarks`` a package.
``dltools`` comes from the course environment (``python3 course.py`` installs it in editable mode).
"""
import argparse
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def parser(description):
    """An ``ArgumentParser`` with the flags every benchmark has."""
    p = argparse.ArgumentParser(description=description,
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--smoke", action="store_true",
                   help="tiny sizes, a few seconds: checks that the script still runs "
                        "(numbers mean nothing)")
    p.add_argument("--plot-dir", default=None,
                   help="where to save the plot (default: images/ in full runs, "
                        "no plot with --smoke)")
    p.add_argument("--no-plot", action="store_true", help="do not save a plot")
    p.add_argument("--threads", type=int, default=None,
                   help="torch threads in this process (default: torch's choice; 1 with --smoke, "
                        "which keeps smoke runs fast when other work shares the cores)")
    return p


def parse(p, argv=None):
    """Parse the flags and apply ``--threads``."""
    args = p.parse_args(argv)
    threads = args.threads or (1 if args.smoke else None)
    if threads is not None:
        if threads < 1:
            p.error(f"--threads must be at least 1, got {threads}")
        import torch
        torch.set_num_threads(threads)
    args.threads = threads
    return args


def plot_path(args, name):
    """Where to save plot ``name`` (a file name), or ``None`` when no plot is wanted."""
    if args.no_plot:
        return None
    if args.plot_dir is not None:
        folder = Path(args.plot_dir)
    elif args.smoke:
        return None
    else:
        folder = ROOT / "images"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / name


def save_figure(fig, path):
    """Save a matplotlib figure as a reproducible PNG (no timestamp in the metadata)."""
    fig.tight_layout()
    fig.savefig(path, dpi=100, metadata={"Software": None})
    print(f"\nplot saved to {os.path.relpath(path, Path.cwd())}")


def machine_line():
    """One line saying where and when the numbers were measured (from ``dltools.device_report``)."""
    import dltools
    r = dltools.device_report()
    gpu = f"{r['num_gpus']} x {r['gpu_names'][0]}" if r["num_gpus"] else "no GPU"
    return (f"Machine: {r['cpu']}, {r['cpu_cores']} CPU cores, {gpu}; Python {r['python']}, "
            f"torch {r['torch']}, {r['torch_threads']} torch threads; "
            f"{datetime.now(timezone.utc).strftime('%Y-%m-%d %H:%M UTC')}")


def markdown_table(headers, rows):
    """Format ``rows`` (lists of cells) under ``headers`` as a GitHub Markdown table.

    >>> print(markdown_table(['a', 'b'], [[1, 'x']]))
    | a | b |
    | --- | --- |
    | 1 | x |
    """
    lines = ["| " + " | ".join(str(h) for h in headers) + " |",
             "| " + " | ".join("---" for _ in headers) + " |"]
    for row in rows:
        if len(row) != len(headers):
            raise ValueError(f"row {row!r} has {len(row)} cells, expected {len(headers)}")
        lines.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(lines)


def print_report(title, headers, rows, notes=()):
    """Print the title, the machine line, the table and notes (the whole output of a benchmark)."""
    print(f"## {title}\n")
    print(machine_line() + "\n")
    print(markdown_table(headers, rows))
    for note in notes:
        print(f"\n{note}")
    sys.stdout.flush()


def median(xs):
    return statistics.median(xs)


def timed(fn):
    """Run ``fn()`` once; return ``(seconds, result)``."""
    t = time.perf_counter()
    result = fn()
    return time.perf_counter() - t, result


def fmt(x, digits=2):
    """A number with ``digits`` significant decimals, without a wall of zeros."""
    if x is None:
        return "n/a"
    if abs(x) >= 100:
        return f"{x:.0f}"
    return f"{x:.{digits}f}"
