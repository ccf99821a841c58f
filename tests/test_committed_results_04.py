"""Notebook 04 states what the committed 10-epoch results (results/batch_scaling_cpu.json, width
4) show and do not show. The notebook prints the numbers; these tests check that each statement
its prose makes about them holds, so that a re-measured file that changes them fails here, not in
class."""
import json
from pathlib import Path

import pandas as pd
import pytest

from dltools.stats import paired_interval

ROOT = Path(__file__).resolve().parent.parent
REPORT = json.loads((ROOT / "results" / "batch_scaling_cpu.json").read_text())
RUNS = pd.DataFrame([{"config": r["config"], "seed": r["seed"], **h}
                     for r in REPORT["runs"] for h in r["history"]])
E = REPORT["scale"]["epochs"]
LAST = [E - 2, E - 1, E]
R = "test_acc_recalibrated_bn"


def per_seed(config, epochs=LAST, column=R):
    rows = RUNS[(RUNS["config"] == config) & RUNS["epoch"].isin(epochs)]
    return rows.groupby("seed")[column].mean()


def interval(a, b, epochs_a=LAST, epochs_b=LAST, column=R):
    return paired_interval(per_seed(a, epochs_a, column), per_seed(b, epochs_b, column))


def test_the_report_has_three_seeds_of_four_configurations():
    assert RUNS.groupby("config")["seed"].nunique().to_dict() == {
        "one-256": 3, "dp-512": 3, "one-512": 3, "one-512-warmup": 3}


def test_h4_one_evaluation_says_little():
    """'Scored once, the runs at batch 512 end anywhere in a wide range, and at this width 0.72 lies
    inside it. With re-estimated statistics the same weights end within about 7 points of each
    other, and in every run they change less from one epoch to the next.'"""
    doubled = RUNS[(RUNS["epoch"] == E) & (RUNS["config"] != "one-256")]
    scored, recal = doubled["test_acc"], doubled[R]
    assert scored.min() < 0.72 < scored.max()
    assert 0.06 < recal.max() - recal.min() < 0.08
    assert scored.max() - scored.min() > 3 * (recal.max() - recal.min())
    late = RUNS[RUNS["epoch"] > E // 2].sort_values("epoch").groupby(["config", "seed"])
    jumps = late[["test_acc", R]].agg(lambda a: a.diff().abs().mean())
    assert len(jumps) == 12 and (jumps[R] < jumps["test_acc"]).all()


def test_one_256_against_one_512_is_not_decided():
    """'Both intervals include 0.'"""
    for column in ("test_acc", R):
        i = interval("one-256", "one-512", column=column)
        assert i.mean > 0 and not i.excludes_zero, (column, i)


def test_batch_512_is_behind_batch_256_but_not_by_much():
    """'Averaged per seed, the two batch-512 configurations are behind batch 256, and the interval
    excludes 0, but not by much.' Exercise 6's check: dp-512's interval excludes 0, one-512's
    not."""
    pooled = paired_interval((per_seed("dp-512") + per_seed("one-512")) / 2, per_seed("one-256"))
    assert -0.02 < pooled.high < 0, pooled
    assert interval("dp-512", "one-256").high < 0
    assert not interval("one-512", "one-256").excludes_zero


def test_h1_the_training_loss_follows_the_steps():
    """'At equal epochs batch 512 ends with a higher training loss, and the interval excludes 0 ...
    At equal steps the interval includes 0, and also a gap as large.'"""
    steps = RUNS.groupby(["config", "epoch"])["steps"].first()
    at_512 = [E - 4, E - 2, E]
    at_256 = [int((steps["one-256"] - steps["one-512"][e]).abs().idxmin()) for e in at_512]
    assert at_256 == [3, 4, 5]
    epochs = interval("one-256", "one-512", column="train_loss")
    assert epochs.high < 0, epochs
    equal_steps = interval("one-256", "one-512", at_256, at_512, "train_loss")
    assert not equal_steps.excludes_zero
    assert equal_steps.low < epochs.mean        # a gap as large as at equal epochs is not ruled out
    assert not interval("one-256", "one-512", at_256, at_512).excludes_zero


def test_h0_h2_h3_are_not_decided():
    h0 = interval("dp-512", "one-512")                  # 'ahead ... on average'
    assert h0.mean > 0 and not h0.excludes_zero
    first = interval("dp-512", "one-512", [1], [1], "test_acc")   # 'as scored after epoch 1 behind'
    assert first.mean < 0 and not first.excludes_zero
    assert not interval("one-512-warmup", "one-512").excludes_zero             # H2


@pytest.mark.parametrize("config", ["one-256", "dp-512", "one-512", "one-512-warmup"])
def test_h4_re_estimating_raises_every_mean(config):
    assert paired_interval(per_seed(config), per_seed(config, column="test_acc")).mean > 0


def test_h4_only_one_interval_excludes_zero():
    found = [c for c in RUNS["config"].unique()
             if paired_interval(per_seed(c), per_seed(c, column="test_acc")).excludes_zero]
    assert len(found) == 1, found


def test_width_4_exaggerates_the_first_steps_relative_update():
    """'In the first step at lr 0.2, every 3×3 convolution after the first layer changes 3 to 6
    times more, relative to its size, at width 4 than at width 64.'"""
    from torch import nn

    import dltools

    X, y = next(iter(dltools.load_data_fashion_mnist(256, num_train=256, num_test=1)[0]))
    updates = {}
    for width in (4, 64):
        dltools.seed_everything(0)
        net = dltools.resnet18(10, in_channels=1, width=width)
        net.apply(dltools.init_weights_normal)
        nn.functional.cross_entropy(net(X), y).backward()
        updates[width] = {n: (0.2 * p.grad.norm() / p.norm()).item()
                          for n, p in net.named_parameters() if p.dim() == 4 and p.shape[-1] == 3}
    ratios = [updates[4][n] / updates[64][n] for n in updates[4] if n != "0.weight"]
    assert len(ratios) == 16 and all(3 <= r <= 6 for r in ratios), ratios
    assert 0.8 < updates[4]["0.weight"] / updates[64]["0.weight"] < 1.5   # the first layer: alike


def test_after_one_epoch_re_estimated_statistics_score_far_better():
    """'... the committed runs still score far better after it with re-estimated statistics.'"""
    after_1 = RUNS[RUNS["epoch"] == 1].groupby("config")[["test_acc", R]].mean()
    assert (after_1[R] > after_1["test_acc"] + 0.1).all(), after_1
