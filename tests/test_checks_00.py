"""Notebook 00's exercise checks: right answers pass, typical wrong answers fail."""
import pytest
import torch

import checks_00 as checks
from support.checks import assert_help_hides, assert_right, assert_unanswered, assert_wrong


@pytest.mark.parametrize("check, right", [
    (checks.check_batches_per_epoch, 118),
    (checks.check_label_index, 7),
    (checks.check_resized_batch_shape, (256, 1, 64, 64)),
    (checks.check_resized_batch_shape, torch.Size([256, 1, 64, 64])),
])
def test_right_answers_pass(capsys, check, right):
    assert_right(capsys, check, right)


@pytest.mark.parametrize("check, wrong", [
    (checks.check_batches_per_epoch, 117),            # forgot the last, partial batch
    (checks.check_batches_per_epoch, 117.1875),
    (checks.check_batches_per_epoch, 118.0),          # a float is not a count
    (checks.check_batches_per_epoch, "118"),
    (checks.check_batches_per_epoch, 235),            # batch size 256, printed in the notebook
    (checks.check_label_index, 8),
    (checks.check_label_index, 7.0),
    (checks.check_label_index, "sneaker"),
    (checks.check_resized_batch_shape, (256, 64, 64)),  # no channel dimension
    (checks.check_resized_batch_shape, (256, 1, 28, 28)),
    (checks.check_resized_batch_shape, (256.0, 1, 64, 64)),
    (checks.check_resized_batch_shape, "(256, 1, 64, 64)"),
])
def test_typical_wrong_answers_fail(capsys, check, wrong):
    assert_wrong(capsys, check, wrong)


@pytest.mark.parametrize("check", [checks.check_batches_per_epoch, checks.check_label_index,
                                   checks.check_resized_batch_shape])
def test_unanswered_and_no_answer_in_the_help(capsys, check):
    assert_unanswered(capsys, check)
    assert_help_hides(check, ("118", "(256, 1, 64, 64)", " 7"))
