"""Notebook 00's exercise checks: right answers pass, typical wrong answers fail."""
import pytest
import torch

import checks_00 as checks
from support.checks import assert_help_hides, assert_right, assert_unanswered, assert_wrong


@pytest.mark.parametrize("check, right", [
    (checks.check_batches_per_epoch, 118),
    (checks.check_test_images_per_class, 1000),
    (checks.check_test_images_per_class, torch.tensor(1000).item()),
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
    (checks.check_test_images_per_class, 6000),       # the training set's count
    (checks.check_test_images_per_class, 10000),      # every test image
    (checks.check_test_images_per_class, 1000.0),
    (checks.check_test_images_per_class, "1000"),
    (checks.check_resized_batch_shape, (256, 64, 64)),  # no channel dimension
    (checks.check_resized_batch_shape, (256, 1, 28, 28)),
    (checks.check_resized_batch_shape, (256.0, 1, 64, 64)),
    (checks.check_resized_batch_shape, "(256, 1, 64, 64)"),
])
def test_typical_wrong_answers_fail(capsys, check, wrong):
    assert_wrong(capsys, check, wrong)


@pytest.mark.parametrize("check", [checks.check_batches_per_epoch,
                                   checks.check_test_images_per_class,
                                   checks.check_resized_batch_shape])
def test_unanswered_and_no_answer_in_the_help(capsys, check):
    assert_unanswered(capsys, check)
    assert_help_hides(check, ("118", "(256, 1, 64, 64)", "1000", "1,000"))


@pytest.mark.parametrize("check, answer, says", [
    (checks.check_batches_per_epoch, "118", "whole number (an int)."),
    (checks.check_batches_per_epoch, 118.0, "not a float"),
    (checks.check_test_images_per_class, 6000, "training set"),
    (checks.check_resized_batch_shape, (1, 64, 64), "batch size in front"),
    (checks.check_resized_batch_shape, (256, 64, 64), "channel dimension"),
])
def test_hints_fit_the_mistake(capsys, check, answer, says):
    assert_wrong(capsys, check, answer, says)


def test_the_whole_bincount_is_told_to_give_one_of_its_numbers(capsys):
    """Sweep 4: torch.bincount(labels) itself (ten counts) was told "a whole number (an int)"."""
    assert not checks.check_test_images_per_class(torch.full((10,), 1000))
    assert "a tensor of 10 numbers, one per class" in capsys.readouterr().out
