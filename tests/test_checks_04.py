"""Notebook 04's exercise checks: right answers pass, typical wrong answers fail, and no answer
shows in Jupyter's help (the signature and the docstring)."""

import pytest

import checks_04 as checks
from dltools.stats import paired_interval
from support.checks import assert_grades, assert_help_hides
from test_committed_results_04 import REPORT as RESULTS
from test_committed_results_04 import per_seed


@pytest.mark.parametrize("check, right, wrongs", [
    (checks.check_steps_in_ten_epochs, 1570, [2350, 1180, 1560, 157, 4690, 1570.4, "1570", True]),
    (checks.check_scaled_lr, 0.4, [0.2, 0.1, 0.8, 0.41, "0.4", True]),
    (checks.check_bn_rows_per_replica, 100, [103, 102, 512, 256, 128, 102.4, (100,), True]),
    (checks.check_running_mean, 0.6513, [0.3487, 1.0, 0.61, 0.69, 0.1, "0.651", True]),
])
def test_right_answer_passes_and_wrong_ones_fail(check, right, wrongs, capsys):
    assert_grades(capsys, check, right, wrongs)


def test_scaled_lr_names_the_square_root_rule(capsys):
    assert not checks.check_scaled_lr(0.2)
    out = capsys.readouterr().out
    assert "square-root" in out and "batch 512" in out


def test_running_mean_accepts_three_decimals_and_names_the_mistake(capsys):
    assert checks.check_running_mean(0.651) and checks.check_running_mean(1 - 0.9 ** 10)
    for wrong, hint in [(0.349, "left of the start"), (1, "never there"),
                        (1 - 0.9 ** 9, "count the steps"), (0.5, "after one step")]:
        capsys.readouterr()
        assert not checks.check_running_mean(wrong)
        assert hint in capsys.readouterr().out, wrong


def test_warmup_schedule_runs_the_learners_function(capsys):
    steps = 2 * 118

    def right(step):
        return 0.2 * min(1.0, (step + 1) / steps)

    assert checks.check_warmup_schedule(right)
    wrongs = {   # each mistake, and the hint it must get
        "no warm-up": (lambda step: 0.2, "no warm-up"),
        "off by one": (lambda step: 0.2 * min(1.0, step / steps), "off by one"),
        "one epoch": (lambda step: 0.2 * min(1.0, (step + 1) / 118), "grow linearly over 2"),
        "to lr 0.1": (lambda step: 0.1 * min(1.0, (step + 1) / steps), "stays at study note 5's"),
        "wrong start": (lambda step: 0.1 if step == 0 else 0.2 * min(1.0, (step + 1) / steps),
                        "grow linearly over 2"),
        # right for the warm-up and well after it, then it stops: the whole run is checked
        "stops": (lambda step: 0.2 * min(1.0, (step + 1) / steps) if step < 1000 else 0.0,
                  "stays at study note 5's"),
    }
    for name, (fn, hint) in wrongs.items():
        capsys.readouterr()
        assert not checks.check_warmup_schedule(fn), name
        out = capsys.readouterr().out
        assert "Not yet" in out and hint in out, (name, out)
    assert not checks.check_warmup_schedule(lambda step: 1 / 0)
    assert "ZeroDivisionError" in capsys.readouterr().out
    assert not checks.check_warmup_schedule(0.2)
    assert not checks.check_warmup_schedule(None)


@pytest.mark.parametrize("name, answers", [
    ("check_steps_in_ten_epochs", ["1570", "157 "]),
    ("check_scaled_lr", ["0.4"]),
    ("check_bn_rows_per_replica", ["100", "103, 103"]),
    ("check_running_mean", ["0.651", "0.9 ** 10"]),
    ("check_warmup_schedule", ["236", "(step + 1)"]),
    ("check_fair_comparison", ["-0.031", "-0.05", "-0.012"]),
])
def test_help_does_not_give_the_answer_away(name, answers):
    fn = getattr(checks, name)
    assert_help_hides(fn, answers, module=checks)


def test_every_check_is_tested():
    tested = {"check_steps_in_ten_epochs", "check_scaled_lr", "check_bn_rows_per_replica",
              "check_running_mean", "check_warmup_schedule", "check_fair_comparison"}
    assert {n for n in dir(checks) if n.startswith("check_")} == tested


def test_counts_follow_the_courses_one_rule_ints_not_whole_floats(capsys):
    """Counts are ints in every notebook's checks (dltools.exercises.is_int): numpy's and torch's
    ints and a one-element tensor pass; a whole float (500 / 5 is 100.0, numpy's ceil returns
    floats) is refused with a hint that says how to make an int."""
    import numpy as np
    import torch
    assert checks.check_bn_rows_per_replica(torch.tensor(100))
    assert checks.check_steps_in_ten_epochs(torch.tensor(1570))
    assert checks.check_steps_in_ten_epochs(np.int64(1570))
    assert checks.check_scaled_lr(torch.tensor(0.4))
    assert checks.check_running_mean(torch.tensor(1 - 0.9 ** 10))
    capsys.readouterr()
    for check, whole_float in ((checks.check_bn_rows_per_replica, 500 / 5),
                               (checks.check_steps_in_ten_epochs, np.ceil(60000 / 384) * 10)):
        assert not check(whole_float)
        assert "(an int" in capsys.readouterr().out


def test_warmup_schedule_that_never_returns_is_stopped(capsys, monkeypatch):
    def stuck(step):
        while True:
            pass
    monkeypatch.setattr(checks, "TIME_LIMIT", 1)
    assert not checks.check_warmup_schedule(stuck)
    assert "did not return within 1 s" in capsys.readouterr().out


def test_a_number_in_quotes_is_told_to_be_a_number(capsys):
    assert not checks.check_scaled_lr("0.4")
    assert "not text in quotes" in capsys.readouterr().out


# ------------------------------------------------------------------ exercise 6: a fair comparison

def _per_seed(config, column="test_acc_recalibrated_bn", epochs=(8, 9, 10)):
    """The learner's scores: the notebook's per_seed, on the committed results."""
    return per_seed(config, epochs, column)


def test_fair_comparison_right_answer_passes(capsys):
    answer = paired_interval(_per_seed("dp-512"), _per_seed("one-256"))
    assert answer.high < 0      # the committed runs: DataParallel behind, the interval below 0
    assert checks.check_fair_comparison(answer, RESULTS)
    out = capsys.readouterr().out
    assert "excludes 0" in out and "about 3 percentage points behind batch 256" in out, out
    assert "do not tie the difference to the second device" in out
    assert "borderline" in out and "last 1, 4 or 5 epochs" in out   # computed, not written in


def test_fair_comparison_reading_follows_the_data(capsys):
    """The verdict is built from the intervals: with DataParallel's scores raised by 0.1 it says
    'ahead of', and that one device at batch 512 has the other sign."""
    import copy
    raised = copy.deepcopy(RESULTS)
    for run in raised["runs"]:
        if run["config"] == "dp-512":
            for h in run["history"]:
                h["test_acc_recalibrated_bn"] += 0.1
    answer = checks._interval_of(raised, "dp-512", "one-256", "test_acc_recalibrated_bn",
                                 range(8, 11))
    assert checks.check_fair_comparison(answer, raised)
    out = capsys.readouterr().out
    assert "points ahead of batch 256" in out and "the other sign" in out, out
    assert "with only the last epoch instead of the last 3, the interval includes 0" in out, out


@pytest.mark.parametrize("wrong, hint", [
    (lambda: paired_interval(_per_seed("one-256"), _per_seed("dp-512")), "put dp-512 first"),
    (lambda: paired_interval(_per_seed("dp-512", "test_acc"), _per_seed("one-256", "test_acc")),
     "re-estimated"),
    (lambda: paired_interval(_per_seed("dp-512", epochs=(10,)),
                             _per_seed("one-256", epochs=(10,))), "last epoch only"),
    (lambda: paired_interval(_per_seed("dp-512"), _per_seed("one-512")), "one-512"),
    (lambda: paired_interval(_per_seed("one-512"), _per_seed("one-256")), "per_seed(config)"),
    (lambda: (-0.031, -0.05), "Interval"),
    (lambda: -0.031, "Interval"),
])
def test_fair_comparison_wrong_answers_fail_with_a_hint(capsys, wrong, hint):
    assert not checks.check_fair_comparison(wrong(), RESULTS)
    out = capsys.readouterr().out
    assert out.startswith("Not yet") and hint in out, out


def test_fair_comparison_unanswered(capsys):
    assert not checks.check_fair_comparison(None, RESULTS)
    assert "Not answered yet" in capsys.readouterr().out


def test_bn_rows_names_the_first_replicas_chunk_and_the_whole_batch(capsys):
    for wrong, hint in [(103, "first replicas' chunk"), (512, "only that replica's rows"),
                        (102, "equal split, rounded down"), (512 / 5, "cannot split a row"),
                        (128, "torch.chunk's rule")]:
        assert not checks.check_bn_rows_per_replica(wrong)
        assert hint in capsys.readouterr().out, wrong


def test_running_mean_near_miss_is_told_to_give_3_decimals(capsys):
    assert not checks.check_running_mean(0.65)
    assert "3 decimals" in capsys.readouterr().out
