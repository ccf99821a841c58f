"""Draw images/ring_allreduce.png: the state of a 4-rank ring all-reduce after each step.

    .venv/bin/python images/make_ring_diagram.py

Rows are ranks, each with its 4 chunks; a cell lists the ranks whose values the chunk already holds
(darker = more). A thick outline marks the chunk that rank sends to its right neighbour next. The
schedule is the one dltools.distributed.ring_all_reduce follows.
"""
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

N = 4
OUT = Path(__file__).resolve().parent / "ring_allreduce.png"


def states(n):
    """[(title, have, sending)] after each step.

    have[rank][chunk] is the set of ranks summed into that chunk; sending[rank] the chunk sent next.
    """
    have = [[{r} for _ in range(n)] for r in range(n)]
    steps = ([("reduce-scatter", s) for s in range(n - 1)]
             + [("all-gather", s) for s in range(n - 1)])
    frames = []
    for i, (phase, s) in enumerate(steps):
        send = [(r - s) % n if phase == "reduce-scatter" else (r + 1 - s) % n for r in range(n)]
        frames.append((("start" if i == 0 else f"after {steps[i - 1][0]} {steps[i - 1][1] + 1}"),
                       [[set(c) for c in row] for row in have], send))
        incoming = [set(have[(r - 1) % n][send[(r - 1) % n]]) for r in range(n)]
        for r in range(n):
            c = send[(r - 1) % n]
            have[r][c] = have[r][c] | incoming[r] if phase == "reduce-scatter" else incoming[r]
    frames.append(("after all-gather 3: done", have, [None] * n))
    return frames


def label(ranks):
    return "all" if len(ranks) == N else "+".join(map(str, sorted(ranks)))


def main():
    frames = states(N)
    fig, axes = plt.subplots(2, 4, figsize=(10, 5.4))  # top: reduce-scatter, bottom: all-gather
    cmap = plt.get_cmap("Blues")
    for ax, (title, have, send) in zip(axes.flat, frames):
        for r in range(N):
            for c in range(N):
                k = len(have[r][c])
                ax.add_patch(Rectangle((c, N - 1 - r), 1, 1, facecolor=cmap(0.15 + 0.8 * k / N),
                                       edgecolor="black", linewidth=2.5 if send[r] == c else 0.5))
                ax.text(c + 0.5, N - 0.5 - r, label(have[r][c]), ha="center",
                        va="center", fontsize=8, color="white" if k > N / 2 else "black")
        ax.set_xlim(0, N)
        ax.set_ylim(0, N)
        ax.set_xticks([c + 0.5 for c in range(N)], [f"c{c}" for c in range(N)], fontsize=7)
        ax.set_yticks([N - 0.5 - r for r in range(N)], [f"rank {r}" for r in range(N)], fontsize=7)
        ax.set_title(title, fontsize=9)
        ax.set_aspect("equal")
    axes.flat[-1].axis("off")
    axes.flat[-1].text(0.0, 0.5, "reduce-scatter: add the chunk\nreceived from the left\n\n"
                       "all-gather: overwrite with the\nfinished chunk from the left\n\n"
                       "each step: every rank sends\n1/4 of the tensor", fontsize=9, va="center")
    fig.suptitle("ring all-reduce, 4 ranks: which ranks' values each chunk holds "
                 "(outlined: the chunk sent to the right next)", fontsize=10)
    fig.tight_layout()
    fig.savefig(OUT, dpi=120, metadata={"Software": None})
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
