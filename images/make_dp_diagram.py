"""Draw the data-parallel diagram used by notebook 01 (``images/dp_parameter_server.png``).

    .venv/bin/python images/make_dp_diagram.py            # writes next to this script
    .venv/bin/python images/make_dp_diagram.py OUT_DIR    # writes into OUT_DIR

Left: data parallelism as ``nn.DataParallel`` does it (the "parameter-server" shape: one main
device scatters the batch, gathers the outputs, sums the gradients and updates the parameters).
Right: model parallelism, for contrast (the layers are split, the whole batch visits each device).
The PNG is written without a timestamp or software tag, so rerunning the script gives the same file.
"""
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display needed; the script must run on a headless server
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch  # noqa: E402

FILENAME = "dp_parameter_server.png"
MAIN, REPLICA, DATA, LAYER = "#f4b183", "#9dc3e6", "#c5e0b4", "#d9d2e9"


def _box(ax, x, y, w, h, text, color, fontsize=9, weight="normal"):
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=color, edgecolor="black", linewidth=1))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, weight=weight)


def _arrow(ax, start, end, color="black", style="-|>", ls="-", rad=0.0):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle=style, mutation_scale=12, color=color,
                                 linewidth=1.3, linestyle=ls, connectionstyle=f"arc3,rad={rad}"))


def _data_parallel(ax, num_devices=3, batch=12):
    ax.set_title("Data parallelism (nn.DataParallel)", fontsize=11, weight="bold")
    chunk = -(-batch // num_devices)
    _box(ax, 0.3, 8.6, 9.4, 0.9, f"mini-batch of {batch} rows  →  split along dim 0 into "
         f"{num_devices} chunks of {chunk}", DATA)
    _box(ax, 2.3, 6.2, 5.4, 1.6, "main device (device_ids[0])\nmodel parameters + optimizer\n"
         "① scatter inputs  ② replicate model", MAIN, fontsize=8.5)
    _arrow(ax, (5, 8.6), (5, 7.8))
    xs = [0.3 + i * (9.4 / num_devices) for i in range(num_devices)]
    w = 9.4 / num_devices - 0.4
    for i, x in enumerate(xs):
        copy_text = "replica 0 = main copy" if i == 0 else "full model copy"
        rows = f"rows {i * chunk}–{(i + 1) * chunk - 1}"
        _box(ax, x, 2.8, w, 2.0, f"device {i}\n{copy_text}\n{rows}\n③ forward",
             MAIN if i == 0 else REPLICA, fontsize=8.5)
        _arrow(ax, (4.2 + 0.4 * i, 6.2), (x + w / 2 - 0.3, 4.8), color="tab:blue")
        _arrow(ax, (x + w / 2 + 0.3, 4.8), (4.8 + 0.4 * i, 6.2), color="tab:red", ls="--")
    ax.text(0.2, 5.55, "blue: parameters\nand input chunks\ngo out", fontsize=7.5, color="tab:blue",
            va="center")
    ax.text(9.8, 5.55, "red: outputs come back;\nin backward, gradients\nare summed here",
            fontsize=7.5, color="tab:red", va="center", ha="right")
    _box(ax, 0.3, 0.3, 9.4, 1.7, "on the main device: ④ gather outputs → loss on the whole batch\n"
         "⑤ backward: every replica's gradients are summed into the main copy\n"
         "⑥ optimizer step updates the main copy (replicated again next batch)", MAIN, fontsize=8.5)


def _model_parallel(ax, num_devices=3, batch=12):
    ax.set_title("Model parallelism (for contrast)", fontsize=11, weight="bold")
    _box(ax, 0.3, 8.6, 9.4, 0.9, f"the whole mini-batch of {batch} rows", DATA)
    ys = [6.4 - i * 2.2 for i in range(num_devices)]
    for i, y in enumerate(ys):
        _box(ax, 2.0, y, 6.0, 1.5, f"device {i}\nlayers {2 * i + 1}–{2 * i + 2} only "
             f"(part of the model)\nall {batch} rows", LAYER, fontsize=8.5)
    _arrow(ax, (5, 8.6), (5, ys[0] + 1.5))
    for a, b in zip(ys, ys[1:]):
        _arrow(ax, (5, a), (5, b + 1.5))
    ax.text(5, 0.35, "activations flow device → device;\nno device holds the whole model",
            ha="center", fontsize=8.5)


def draw(out_dir=None):
    """Draw the figure and save it; returns the path of the PNG."""
    out_dir = Path(out_dir) if out_dir is not None else Path(__file__).resolve().parent
    out_dir.mkdir(parents=True, exist_ok=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 5.6),
                                      gridspec_kw={"width_ratios": [1.35, 1]})
    for ax in (left, right):
        ax.set_xlim(0, 10)
        ax.set_ylim(0, 10)
        ax.axis("off")
    _data_parallel(left)
    _model_parallel(right)
    fig.tight_layout()
    path = out_dir / FILENAME
    # No 'Software' tag (it carries the matplotlib version): the same script gives the same bytes.
    fig.savefig(path, dpi=100, metadata={"Software": None})
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(draw(sys.argv[1] if len(sys.argv) > 1 else None))
