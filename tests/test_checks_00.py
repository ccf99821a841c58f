"""Notebook 00's exercise checks: right answers pass, typical wrong answers fail."""
import pytest
import torch

import checks_00 as checks


def verdict(capsys, check, answer):
    ok = check(answer)
    return ok, capsys.readouterr().out


@pytest.mark.parametrize("check, right", [
    (checks.check_batches_per_epoch, 235),
    (checks.check_label_index, 7),
    (checks.check_resized_batch_shape, (256, 1, 64, 64)),
    (checks.check_resized_batch_shape, torch.Size([256, 1, 64, 64])),
])
def test_right_answers_pass(capsys, check, right):
    ok, out = verdict(capsys, check, right)
    assert ok is True and out.startswith("Correct:")


@pytest.mark.parametrize("check, wrong", [
    (checks.check_batches_per_epoch, 234),            # forgot the last, partial batch
    (checks.check_batches_per_epoch, 234.375),
    (checks.check_batches_per_epoch, 235.0),          # a float is not a count
    (checks.check_batches_per_epoch, "235"),
    (checks.check_label_index, 8),
    (checks.check_label_index, 7.0),
    (checks.check_label_index, "sneaker"),
    (checks.check_resized_batch_shape, (256, 64, 64)),  # no channel dimension
    (checks.check_resized_batch_shape, (256, 1, 28, 28)),
    (checks.check_resized_batch_shape, (256.0, 1, 64, 64)),
    (checks.check_resized_batch_shape, "(256, 1, 64, 64)"),
])
def test_typical_wrong_answers_fail(capsys, check, wrong):
    ok, out = verdict(capsys, check, wrong)
    assert ok is False and out.startswith("Not yet:")


@pytest.mark.parametrize("check", [checks.check_batches_per_epoch, checks.check_label_index,
                                   checks.check_resized_batch_shape])
def test_unanswered_and_no_answer_in_the_help(capsys, check):
    ok, out = verdict(capsys, check, None)
    assert ok is False and out.startswith("Not answered yet")
    for secret in ("235", "(256, 1, 64, 64)", " 7"):
        assert secret not in (check.__doc__ or "")
