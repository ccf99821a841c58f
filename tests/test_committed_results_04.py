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
    """'dp-512 and one-512, averaged per seed, are behind batch 256, and the interval excludes 0,
    but not by much.' Exercise 6's check: 'DataParallel at batch 512 ends about 3 percentage points
    behind batch 256' (its interval excludes 0); 'One device at batch 512 is behind on average too'
    (its interval does not exclude 0)."""
    pooled = paired_interval((per_seed("dp-512") + per_seed("one-512")) / 2, per_seed("one-256"))
    assert -0.02 < pooled.high < 0, pooled
    dp = interval("dp-512", "one-256")
    assert dp.high < 0 and round(-100 * dp.mean) == 3, dp
    one = interval("one-512", "one-256")
    assert one.mean < 0 and not one.excludes_zero


def test_h2_this_warm_up_does_not_close_the_gap():
    """'with it, batch 512 is still behind batch 256, and the interval excludes 0. Whether it helps
    against one-512 without warm-up, these runs do not decide.'"""
    assert interval("one-512-warmup", "one-256").high < 0
    assert not interval("one-512-warmup", "one-512").excludes_zero


def test_h1_the_equal_step_training_loss_of_batch_256_reads_high():
    """'batch 256's epoch covers 235 steps, batch 512's 118, so batch 256's window reaches further
    back, where the loss was higher.'"""
    steps = {r["config"]: r["steps_per_epoch"] for r in REPORT["runs"]}
    assert (steps["one-256"], steps["one-512"]) == (235, 118)
    for _, run in RUNS[RUNS["config"] == "one-256"].groupby("seed"):
        loss = run.sort_values("epoch")["train_loss"].tolist()
        assert all(a > b for a, b in zip(loss[1:5], loss[2:6])), loss   # epochs 2 to 6


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


def test_h0_h3_are_not_decided():
    h0 = interval("dp-512", "one-512")                  # 'ahead ... on average'
    assert h0.mean > 0 and not h0.excludes_zero
    # 'behind when scored once after the last epoch'
    last = interval("dp-512", "one-512", [E], [E], "test_acc")
    assert last.mean < 0 and not last.excludes_zero


@pytest.mark.parametrize("config", ["one-256", "dp-512", "one-512", "one-512-warmup"])
def test_h4_re_estimating_raises_every_mean(config):
    assert paired_interval(per_seed(config), per_seed(config, column="test_acc")).mean > 0


def test_h4_re_estimating_helps_every_run():
    """'The gain is positive in all 12 runs, and averaged over the four configurations seed by seed
    its interval excludes 0.'"""
    configs = ["one-256", "dp-512", "one-512", "one-512-warmup"]
    gains = pd.concat([per_seed(c) - per_seed(c, column="test_acc") for c in configs], axis=1)
    assert gains.size == 12 and (gains > 0).all().all()
    re_avg, scored_avg = (pd.concat([per_seed(c, column=col) for c in configs], axis=1).mean(axis=1)
                          for col in (R, "test_acc"))
    assert paired_interval(re_avg, scored_avg).low > 0


def test_h4_only_one_interval_excludes_zero():
    found = [c for c in RUNS["config"].unique()
             if paired_interval(per_seed(c), per_seed(c, column="test_acc")).excludes_zero]
    assert len(found) == 1, found


def test_width_4_exaggerates_the_first_steps_relative_update():
    """'In the first step at lr 0.2, every 3×3 convolution after the first layer changes about 3
    to 7 times more, relative to its size, at width 4 than at width 64 (measured on one batch of
    256, with two random seeds).'"""
    from torch import nn

    import dltools

    X, y = next(iter(dltools.load_data_fashion_mnist(256, num_train=256, num_test=1)[0]))
    for seed in (0, 1):
        updates = {}
        for width in (4, 64):
            dltools.seed_everything(seed)
            net = dltools.resnet18(10, in_channels=1, width=width)
            net.apply(dltools.init_weights_normal)
            nn.functional.cross_entropy(net(X), y).backward()
            updates[width] = {n: (0.2 * p.grad.norm() / p.norm()).item()
                              for n, p in net.named_parameters()
                              if p.dim() == 4 and p.shape[-1] == 3}
        ratios = [updates[4][n] / updates[64][n] for n in updates[4] if n != "0.weight"]
        assert len(ratios) == 16 and all(2.8 <= r <= 7.2 for r in ratios), (seed, ratios)
        assert 0.8 < updates[4]["0.weight"] / updates[64]["0.weight"] < 1.5   # the first: alike


def test_after_one_epoch_re_estimated_statistics_score_better():
    """'... the committed runs still score better after it with re-estimated statistics, in all 12
    runs (by 0.003 to 0.50; averaged over the configurations seed by seed, by 0.20, 95% interval
    [0.07, 0.32])'."""
    first = RUNS[RUNS["epoch"] == 1]
    gain = first[R] - first["test_acc"]
    assert len(gain) == 12 and round(gain.min(), 3) == 0.003 and round(gain.max(), 2) == 0.50
    configs = ["one-256", "dp-512", "one-512", "one-512-warmup"]
    re_avg, scored_avg = (pd.concat([per_seed(c, [1], col) for c in configs], axis=1).mean(axis=1)
                          for col in (R, "test_acc"))
    i = paired_interval(re_avg, scored_avg)
    assert (round(i.mean, 2), round(i.low, 2), round(i.high, 2)) == (0.20, 0.07, 0.32), i


AFTER = json.loads((ROOT / "results" / "batch_scaling_after_cpu.json").read_text())


def after_per_seed(column=R, epochs=LAST):
    """dp-512-after-256's score per seed (results/batch_scaling_after_cpu.json)."""
    rows = pd.DataFrame([{"seed": r["seed"], **h} for r in AFTER["runs"] for h in r["history"]])
    return rows[rows["epoch"].isin(epochs)].groupby("seed")[column].mean()


def test_h5_pairs_with_dp_512_of_the_same_scale_and_seeds():
    """'The redrawn weights and the batches are dp-512's of the same seed': the same scale, the
    same seeds, batch and steps (the script's tests check the weights and the batches)."""
    assert {k: v for k, v in AFTER["scale"].items() if k != "bn_images"} == REPORT["scale"]
    assert AFTER["scale"]["bn_images"] == 2000      # what the older report used
    dp = {r["seed"]: r for r in REPORT["runs"] if r["config"] == "dp-512"}
    assert sorted(r["seed"] for r in AFTER["runs"]) == sorted(dp) == [0, 1, 2]
    for r in AFTER["runs"]:
        assert r["config"] == "dp-512-after-256" and r["first_run"]["config"] == "one-256"
        assert (r["batch_size"], r["lr"], r["steps_per_epoch"]) == (
            dp[r["seed"]]["batch_size"], dp[r["seed"]]["lr"], dp[r["seed"]]["steps_per_epoch"])


def test_h5_the_cell_order_is_not_decided():
    """'Re-estimated, DataParallel after one-256 ends about 1 percentage point below DataParallel
    from scratch, and the interval, about -3 to +1 points, includes 0; so does the training
    loss's ...
    With running statistics, each run scored by its last 3 epochs, the interval is wide (±15
    percentage points) but excludes a 20-point drop; scored once after the last epoch, as study note
    5 did, it is wider still and excludes nothing.'"""
    re_est = paired_interval(after_per_seed(), per_seed("dp-512"))
    assert re_est.mean < 0 and round(-100 * re_est.mean) == 1 and not re_est.excludes_zero
    assert round(100 * re_est.low) == -3 and round(100 * re_est.high) in (0, 1), re_est
    loss = paired_interval(after_per_seed("train_loss"), per_seed("dp-512", column="train_loss"))
    assert not loss.excludes_zero
    scored = paired_interval(after_per_seed("test_acc"), per_seed("dp-512", column="test_acc"))
    assert not scored.excludes_zero and scored.high - scored.low > 0.2, scored
    assert round(100 * (scored.high - scored.low) / 2) == 15      # 'wide (±15 percentage points)'
    assert scored.low > -0.20      # 'but excludes a 20-point drop'
    once = paired_interval(after_per_seed("test_acc", [E]), per_seed("dp-512", [E], "test_acc"))
    assert once.low < -0.20 and not once.excludes_zero     # 'wider still and excludes nothing'


def test_h5_float_rounding_alone_moves_a_run_by_up_to_5_points():
    """'The one-256 runs in this file ended up to 5 points away from the committed one-256 runs of
    the same seed' (another CPU: another instruction set)."""
    assert AFTER["machine"]["cpu_capability"] != REPORT["machine"]["cpu_capability"]
    committed = {r["seed"]: r["test_acc"] for r in REPORT["runs"] if r["config"] == "one-256"}
    gaps = [abs(r["first_run"]["test_acc"] - committed[r["seed"]]) for r in AFTER["runs"]]
    assert 0.04 < max(gaps) <= 0.05, gaps


def test_the_live_sections_assertions_hold_for_other_seeds(tmp_path):
    """Notebook 04's live runs (an optional section) assert that batch 512 scores near chance after
    epoch 1 and that re-estimating BatchNorm's statistics scores higher. The committed notebook
    checks them for seeds 0-2 (COURSE_SEED unset); here the same cells run on seeds 3-5, the
    one-process configurations at the notebook's own LIVE scale. Not ddp-512: the notebook's
    batch-512 mean includes its runs (seeds 0-2), this one does not (a torchrun launch per seed
    would double the test's time), so it checks the same assertions on a mean of fewer runs."""
    import ast
    import subprocess
    import sys

    import nbformat

    cells = [c.source for c in nbformat.read(ROOT / "instructor" / "04_multi_gpu_resnet.ipynb",
                                             as_version=4).cells if c.cell_type == "code"]

    def cell(text):
        found = [source for source in cells if text in source]
        assert len(found) == 1, f"notebook 04 has {len(found)} code cells with {text!r}"
        return found[0]

    live = next(ast.literal_eval(node.value) for node in ast.parse(cell("LIVE = {")).body
                if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "LIVE")
    report = tmp_path / "live.json"
    subprocess.run([sys.executable, str(ROOT / "scripts" / "batch_scaling.py"), "--configs",
                    "one-256", "dp-512", "one-512", "--seeds", "3", "4", "5", "--jobs", "2",
                    *[f"--{key.replace('_', '-')}={value}" for key, value in live.items()],
                    "--report", str(report)], check=True, capture_output=True, cwd=ROOT)
    runs = json.loads(report.read_text())["runs"]
    namespace = {"pd": pd, "R": R, "display": lambda *_: None, "print": lambda *_, **__: None,
                 "LIVE_ORDER": ["one-256", "dp-512", "one-512"],
                 "live": pd.DataFrame([{"config": r["config"], "seed": r["seed"], **h}
                                       for r in runs for h in r["history"]])}
    exec(cell("def summarize("), namespace)
    exec(cell('assert big["test_acc"]'), namespace)   # raises if a claim fails for these seeds
