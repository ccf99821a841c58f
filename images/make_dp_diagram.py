"""Draw the data-parallel diagram used by notebook 01 (``images/dp_parameter_server.png``).

    .venv/bin/python images/make_dp_diagram.py            # writes next to this script
    .venv/bin/python images/make_dp_diagram.py OUT_DIR    # writes into OUT_DIR

Left: data parallelism as ``nn.DataParallel`` does it (the "parameter-server" shape: one main
device, device 0, scatters the batch, gathers the outputs, holds the summed gradients and updates
the parameters). The parameters travel as NCCL moves them on GPUs: a broadcast along a chain of
devices, and a reduce around the ring into device 0 (notebook 02 counts the bytes of each hop).
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
    _box(ax, 0.3, 8.7, 9.4, 0.8, f"mini-batch of {batch} rows on device 0  →  split along dim 0 "
         f"into {num_devices} chunks of {chunk}", DATA)
    xs = [0.3 + i * (9.4 / num_devices) for i in range(num_devices)]
    w = 9.4 / num_devices - 0.8
    y, h = 4.3, 2.9
    for i, x in enumerate(xs):
        rows = f"rows {i * chunk}–{(i + 1) * chunk - 1}"
        if i == 0:
            text = (f"device 0: main device\n(device_ids[0])\nmodel + optimizer\n"
                    f"replica 0: the model\n{rows}  ③ forward")
        else:
            text = f"device {i}\nreplica {i}:\na copy of the model\n{rows}  ③ forward"
        _box(ax, x, y, w, h, text, MAIN if i == 0 else REPLICA, fontsize=7.6)
    _arrow(ax, (xs[0] + w / 2, 8.7), (xs[0] + w / 2, y + h))
    for i in range(num_devices - 1):   # the broadcast: a chain 0 → 1 → 2
        _arrow(ax, (xs[i] + w, y + 2.1), (xs[i + 1], y + 2.1), color="tab:blue")
    for i in range(1, num_devices - 1):   # the reduce: around the ring into device 0
        _arrow(ax, (xs[i] + w, y + 0.8), (xs[i + 1], y + 0.8), color="tab:red", ls="--")
    _arrow(ax, (xs[-1] + w / 2, y), (xs[0] + w / 2, y - 0.05), color="tab:red", ls="--", rad=-0.3)
    ax.text(2.0, 8.1, "② replicate (blue): the parameters are broadcast along "
            "a chain", fontsize=7.8, color="tab:blue")
    ax.text(2.0, 7.6, "① scatter, ④ gather (not drawn): chunks go out from "
            "device 0, outputs come back", fontsize=7.8, color="dimgray")
    ax.text(5.0, 2.5, "⑤ in backward (red): the gradients are summed on their way round "
            "the ring into device 0", fontsize=7.8, color="tab:red", ha="center")
    _box(ax, 0.3, 0.0, 9.4, 2.0, "on device 0: ④ gather the outputs → loss on the whole batch\n"
         "⑤ backward: the outputs' gradients go back out to the replicas,\n"
         "and every replica's gradients are summed into the model's .grad\n"
         "⑥ optimizer step updates the model (replicated again next batch)", MAIN, fontsize=8.5)
    ax.text(5.0, -0.35, "the chain and the ring are NCCL's way on GPUs; "
            "without NCCL, device 0 sends and receives every copy itself", fontsize=7.5,
            ha="center", style="italic")


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
