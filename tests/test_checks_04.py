"""Notebook 04's exercise checks: right answers pass, typical wrong answers fail, and no answer
shows in Jupyter's help (the signature and the docstring)."""

import pytest

import checks_04 as checks
from support.checks import assert_grades, assert_help_hides


@pytest.mark.parametrize("check, right, wrongs", [
    (checks.check_steps_in_ten_epochs, 1180, [2350, 1170, 118, 1180.4, "1180", True]),
    (checks.check_scaled_lr, 0.4, [0.2, 0.1, 0.8, 0.41, "0.4", True]),
    (checks.check_bn_rows_per_replica, 128, [512, 256, 127.9, (128,), True]),
    (checks.check_reinit_keeps, "batchnorm weight", ["conv weight", "linear weight", "bias", 3]),
])
def test_right_answer_passes_and_wrong_ones_fail(check, right, wrongs, capsys):
    assert_grades(capsys, check, right, wrongs)


def test_scaled_lr_names_the_square_root_rule(capsys):
    assert not checks.check_scaled_lr(0.2)
    out = capsys.readouterr().out
    assert "square-root" in out and "batch 512" in out


@pytest.mark.parametrize("spelling", ["BatchNorm weight", " batchnorm  weight ", "BATCHNORM"
                                      " WEIGHT"])
def test_reinit_keeps_accepts_any_case_and_spacing(spelling):
    assert checks.check_reinit_keeps(spelling)


def test_warmup_schedule_runs_the_learners_function(capsys):
    steps = 2 * 118

    def right(step):
        return 0.2 * min(1.0, (step + 1) / steps)

    assert checks.check_warmup_schedule(right)
    wrongs = {   # each mistake, and the hint it must get
        "no warm-up": (lambda step: 0.2, "no warm-up"),
        "off by one": (lambda step: 0.2 * min(1.0, step / steps), "off by one"),
        "one epoch": (lambda step: 0.2 * min(1.0, (step + 1) / 118), "grow linearly over 2"),
        "to lr 0.1": (lambda step: 0.1 * min(1.0, (step + 1) / steps), "stays at the seed's"),
        "wrong start": (lambda step: 0.1 if step == 0 else 0.2 * min(1.0, (step + 1) / steps),
                        "grow linearly over 2"),
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
    ("check_steps_in_ten_epochs", ["1180", "118 "]),
    ("check_scaled_lr", ["0.4"]),
    ("check_bn_rows_per_replica", ["128"]),
    ("check_reinit_keeps", ["keeps its value", "only touches"]),  # the question lists all choices
    ("check_warmup_schedule", ["236", "(step + 1)"]),
])
def test_help_does_not_give_the_answer_away(name, answers):
    fn = getattr(checks, name)
    assert_help_hides(fn, answers, module=checks)


def test_every_check_is_tested():
    tested = {"check_steps_in_ten_epochs", "check_scaled_lr", "check_bn_rows_per_replica",
              "check_reinit_keeps", "check_warmup_schedule"}
    assert {n for n in dir(checks) if n.startswith("check_")} == tested


def test_whole_numbers_computed_as_floats_pass():
    """512 / 4 is 128.0 in Python 3, and numpy's ceil returns floats: both are right answers."""
    import numpy as np
    assert checks.check_bn_rows_per_replica(512 / 4)
    assert checks.check_steps_in_ten_epochs(np.ceil(60000 / 512) * 10)
    assert checks.check_steps_in_ten_epochs(np.int64(1180))


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
