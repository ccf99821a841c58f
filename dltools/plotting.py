"""Plotting: ``Animator`` (live curves during training), ``plot``, ``set_figsize``, ``show_images``.

Everything draws with matplotlib. Inside Jupyter, figures are shown as PNG (SVG embeds ids and dates
that change on every run); outside Jupyter (scripts, CI) nothing is displayed and nothing fails.
"""
import matplotlib.pyplot as plt
import numpy as np
import torch

__all__ = ["Animator", "plot", "set_figsize", "set_axes", "show_images", "use_svg_display",
           "in_notebook", "plot_timeline"]


def in_notebook():
    """Return True when running inside a Jupyter kernel (where figures can be displayed).

    >>> in_notebook()
    False
    """
    try:
        from IPython import get_ipython
    except ImportError:
        return False
    shell = get_ipython()
    return shell is not None and shell.__class__.__name__ == "ZMQInteractiveShell"


def use_svg_display():
    """Show figures as SVG in Jupyter (d2l's default), with stable ids so outputs are reproducible.

    >>> use_svg_display()   # harmless outside Jupyter
    """
    plt.rcParams["svg.hashsalt"] = "dltools"
    if in_notebook():
        from matplotlib_inline import backend_inline
        backend_inline.set_matplotlib_formats("svg", metadata={"Date": None})


def set_figsize(figsize=(3.5, 2.5)):
    """Set the default figure size for matplotlib.

    >>> set_figsize((4, 3)); tuple(plt.rcParams['figure.figsize'])
    (4.0, 3.0)
    >>> set_figsize()
    """
    plt.rcParams["figure.figsize"] = figsize


def _check_legend(legend):
    """A legend is None or a list of labels, one per curve: refuse anything else at the call."""
    if legend is None:
        return
    if isinstance(legend, str) or not isinstance(legend, (list, tuple)) \
            or not all(isinstance(label, str) for label in legend):
        raise TypeError(f"legend must be a list of strings, one label per curve, got {legend!r} "
                        "(e.g. legend=['train loss', 'test acc'])")


def set_axes(axes, xlabel, ylabel, xlim, ylim, xscale, yscale, legend):
    """Set the labels, limits, scales and legend of matplotlib axes (as d2l does).

    >>> fig, ax = plt.subplots()
    >>> set_axes(ax, 'epoch', 'loss', [1, 10], None, 'linear', 'log', None)
    >>> ax.get_xlabel(), ax.get_yscale()
    ('epoch', 'log')
    >>> plt.close(fig)
    """
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    axes.set_xscale(xscale)
    axes.set_yscale(yscale)
    axes.set_xlim(xlim)
    axes.set_ylim(ylim)
    if legend:
        axes.legend(legend)
    axes.grid()


def _has_one_axis(X):
    return (hasattr(X, "ndim") and X.ndim == 1) or (
        isinstance(X, list) and not hasattr(X[0], "__len__"))


def plot(X, Y=None, xlabel=None, ylabel=None, legend=None, xlim=None, ylim=None, xscale="linear",
         yscale="linear", fmts=("-", "m--", "g-.", "r:"), figsize=(3.5, 2.5), axes=None):
    """Plot one or several curves (d2l's ``plot``); returns the axes.

    >>> ax = plot([1, 2, 3], [[1, 4, 9], [1, 2, 3]], 'x', 'y', legend=['square', 'same'])
    >>> len(ax.lines)
    2
    >>> plt.close('all')
    """
    _check_legend(legend)
    if legend is None:
        legend = []
    if axes is None:
        plt.figure(figsize=figsize)
        axes = plt.gca()
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    if isinstance(Y, torch.Tensor):
        Y = Y.detach().cpu().numpy()
    if _has_one_axis(X):
        X = [X]
    if Y is None:
        X, Y = [[]] * len(X), X
    elif _has_one_axis(Y):
        Y = [Y]
    if len(X) != len(Y):
        X = X * len(Y)
    axes.cla()
    for x, y, fmt in zip(X, Y, fmts):
        if len(x):
            axes.plot(x, y, fmt)
        else:
            axes.plot(y, fmt)
    set_axes(axes, xlabel, ylabel, xlim, ylim, xscale, yscale, legend)
    return axes


def show_images(imgs, num_rows, num_cols, titles=None, scale=1.5):
    """Plot a grid of images (tensors of shape (H, W) or (1, H, W), or PIL images); returns the
    axes.

    >>> axes = show_images(torch.zeros(6, 28, 28), 2, 3, titles=list('abcdef'))
    >>> len(axes), axes[5].get_title()
    (6, 'f')
    >>> plt.close('all')
    """
    if len(imgs) > num_rows * num_cols:
        raise ValueError(f"{len(imgs)} images do not fit a {num_rows}x{num_cols} grid")
    figsize = (num_cols * scale, num_rows * scale)
    _, axes = plt.subplots(num_rows, num_cols, figsize=figsize, squeeze=False)
    axes = axes.flatten()
    for i, (ax, img) in enumerate(zip(axes, imgs)):
        if torch.is_tensor(img):
            img = img.detach().cpu()
            if img.ndim == 3 and img.shape[0] == 1:
                img = img[0]
            img = img.numpy()
        ax.imshow(img, cmap="gray" if np.ndim(img) == 2 else None)
        ax.axes.get_xaxis().set_visible(False)
        ax.axes.get_yaxis().set_visible(False)
        if titles:
            ax.set_title(titles[i])
    for ax in axes[len(imgs):]:
        ax.axis("off")
    return axes


class Animator:
    """Plot data in animation: ``add(x, y)`` appends points and redraws (d2l's constructor).

    In Jupyter the figure is shown once and updated in place; elsewhere points are only recorded
    (``.X``/``.Y``) and ``.fig`` can be saved. The figure is closed to pyplot so the inline backend
    does not show a second copy at the end of the cell.

    >>> animator = Animator(xlabel='epoch', legend=['train loss', 'test acc'], xlim=[1, 3])
    >>> for epoch in range(1, 4):
    ...     animator.add(epoch, (1 / epoch, 0.5 + 0.1 * epoch))
    >>> animator.X[0], [round(v, 2) for v in animator.Y[1]]
    ([1, 2, 3], [0.6, 0.7, 0.8])
    >>> animator.add(4, (0.2, None))      # None leaves a curve without a point
    >>> len(animator.Y[0]), len(animator.Y[1])
    (4, 3)
    """

    def __init__(self, xlabel=None, ylabel=None, legend=None, xlim=None, ylim=None, xscale="linear",
                 yscale="linear", fmts=("-", "m--", "g-.", "r:"), nrows=1, ncols=1,
                 figsize=(3.5, 2.5)):
        _check_legend(legend)
        if legend is None:
            legend = []
        self.fig, axes = plt.subplots(nrows, ncols, figsize=figsize, squeeze=False)
        plt.close(self.fig)
        self.axes = axes.flatten()
        self.config_axes = lambda: set_axes(self.axes[0], xlabel, ylabel, xlim, ylim, xscale,
                                            yscale, legend)
        self.X, self.Y, self.fmts = None, None, fmts
        self._handle = None

    def add(self, x, y):
        """Add one point per curve: ``y`` is a number or a sequence (``None`` skips a curve)."""
        if not hasattr(y, "__len__"):
            y = [y]
        n = len(y)
        if not hasattr(x, "__len__"):
            x = [x] * n
        if not self.X:
            self.X = [[] for _ in range(n)]
        if not self.Y:
            self.Y = [[] for _ in range(n)]
        if len(x) != len(self.X) or n != len(self.Y):
            raise ValueError(f"this Animator draws {len(self.Y)} curves, add() got {n} values")
        for i, (a, b) in enumerate(zip(x, y)):
            if a is not None and b is not None:
                self.X[i].append(a)
                self.Y[i].append(float(b))
        self.axes[0].cla()
        for x_, y_, fmt in zip(self.X, self.Y, self.fmts):
            self.axes[0].plot(x_, y_, fmt)
        self.config_axes()
        self.show()

    def show(self):
        """Draw the current figure in the notebook (updating the earlier drawing); no-op
        elsewhere."""
        if not in_notebook():
            return
        from IPython import display
        if self._handle is None:
            self._handle = display.display(self.fig, display_id=True)
        else:
            self._handle.update(self.fig)


# ------------------------------------------------------------------ step timelines (notebook 02)


def plot_timeline(events, axes=None, figsize=(6, 2.5), title=None, unit="ms"):
    """Draw events as horizontal bars, one row (lane) per device or thread; returns the axes.

    ``events`` are dicts ``{'lane': str, 'what': str, 'start': seconds, 'end': seconds}`` such as
    ``dltools.parallel.data_parallel(..., timeline=events)`` records. Times are shown from the
    earliest start, in ``unit`` ('ms' or 's'); lanes keep their order of first appearance (top
    to bottom) and each ``what`` gets one colour and one legend entry.

    >>> ev = [{'lane': 'master', 'what': 'scatter', 'start': 10.0, 'end': 10.001},
    ...       {'lane': 'replica 0', 'what': 'forward', 'start': 10.001, 'end': 10.004},
    ...       {'lane': 'replica 1', 'what': 'forward', 'start': 10.001, 'end': 10.003}]
    >>> ax = plot_timeline(ev)
    >>> [t.get_text() for t in ax.get_yticklabels()], len(ax.patches), float(ax.get_xlim()[0])
    (['master', 'replica 0', 'replica 1'], 3, 0.0)
    >>> plt.close('all')
    """
    events = list(events)
    if not events:
        raise ValueError("plot_timeline needs at least one event")
    scale = {"ms": 1e3, "s": 1.0}.get(unit)
    if scale is None:
        raise ValueError(f"unit must be 'ms' or 's', got {unit!r}")
    t0 = min(e["start"] for e in events)
    lanes, kinds = [], []
    for e in events:
        if e["lane"] not in lanes:
            lanes.append(e["lane"])
        if e["what"] not in kinds:
            kinds.append(e["what"])
    if axes is None:
        _, axes = plt.subplots(figsize=figsize)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    labelled = set()
    for e in events:
        k = kinds.index(e["what"])
        row = lanes.index(e["lane"])
        label = None if e["what"] in labelled else e["what"]
        labelled.add(e["what"])
        axes.barh(row, (e["end"] - e["start"]) * scale, left=(e["start"] - t0) * scale, height=0.6,
                  color=colors[k % len(colors)], label=label)
    axes.set_yticks(range(len(lanes)))
    axes.set_yticklabels(lanes)
    if not axes.yaxis_inverted():
        axes.invert_yaxis()  # first lane on top
    axes.set_xlim(0, max(e["end"] for e in events) * scale - t0 * scale)
    axes.set_xlabel(f"time ({unit})")
    axes.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    if title:
        axes.set_title(title)
    return axes
