import matplotlib
import pytest
import torch

import dltools
from dltools import plotting


def test_animator_records_points_headless():
    a = dltools.Animator(xlabel="epoch", legend=["loss", "acc"], xlim=[1, 3])
    for epoch in (1, 2, 3):
        a.add(epoch, [1.0 / epoch, None if epoch == 2 else 0.5])
    assert a.X == [[1, 2, 3], [1, 3]]
    assert a.Y[0] == pytest.approx([1.0, 0.5, 1 / 3])
    assert len(a.axes[0].lines) == 2
    assert a.axes[0].get_xlabel() == "epoch"


def test_animator_refuses_a_changing_number_of_curves():
    a = dltools.Animator()
    a.add(1, (1, 2))
    with pytest.raises(ValueError, match="draws 2 curves, add\\(\\) got 3"):
        a.add(2, (1, 2, 3))


def test_animator_figure_is_not_left_open_for_pyplot():
    import matplotlib.pyplot as plt
    n = len(plt.get_fignums())
    dltools.Animator()
    assert len(plt.get_fignums()) == n, "inline backends would show a second copy"


def test_plot_accepts_tensors_and_several_curves():
    x = torch.arange(3.0)
    ax = dltools.plot(x, [x, x ** 2], legend=["x", "x^2"])
    assert len(ax.lines) == 2
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["x", "x^2"]
    matplotlib.pyplot.close("all")


def test_show_images_titles_and_grid_checks():
    axes = dltools.show_images(torch.rand(5, 1, 8, 8), 2, 3, titles=list("abcde"))
    assert [ax.get_title() for ax in axes[:5]] == list("abcde")
    with pytest.raises(ValueError, match="do not fit"):
        dltools.show_images(torch.rand(7, 8, 8), 2, 3)
    matplotlib.pyplot.close("all")


def test_not_in_notebook_under_pytest():
    assert plotting.in_notebook() is False


def test_plotting_names_load_lazily_but_always_resolve():
    import subprocess
    import sys
    code = ("import sys, dltools; assert 'matplotlib.pyplot' not in sys.modules; "
            "print(dltools.plotting.plot_timeline.__name__, dltools.Animator.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["plot_timeline", "Animator"]
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        dltools.nope


@pytest.mark.parametrize("legend", [3, "loss", ["loss", 2]])
def test_a_bad_legend_is_refused_at_the_call(legend):
    with pytest.raises(TypeError, match="list of strings"):
        dltools.Animator(legend=legend)
    with pytest.raises(TypeError, match="list of strings"):
        dltools.plot([1, 2], [[1, 2]], legend=legend)
