"""Notebook 05's exercise checks: right answers pass, typical wrong answers fail, and no answer
shows in Jupyter's help (the signature and the docstring)."""

import pytest
import torch

import checks_05 as checks
from support.checks import assert_grades, assert_help_hides


@pytest.mark.parametrize("check, right, wrongs", [
    (checks.check_zero_memory, 37.375, [208, 13, 61.75, 34.81, 11.375, 26, 38, 36.8, "37.375",
                                        True]),
    (checks.check_tp_all_reduces, 24, [12, 48, 24.0, 23.9, "24", True]),
    (checks.check_in_flight, (32, 6), [(6, 32), (32, 8), (32, 32), (6, 6), (32, 1), (32.0, 6.0),
                                       32, "32, 6"]),
    (checks.check_bubble, 0.2, [0.25, 3 / 16, 0.3, 20, "0.2", True]),
])
def test_right_answer_passes_and_wrong_ones_fail(check, right, wrongs, capsys):
    assert_grades(capsys, check, right, wrongs)


def test_hints_name_the_usual_mistakes(capsys):
    checks.check_zero_memory(208)
    assert "without sharding" in capsys.readouterr().out
    checks.check_zero_memory(37.375e9 / 2**30)
    assert "GiB" in capsys.readouterr().out
    checks.check_tp_all_reduces(12)
    assert "one direction" in capsys.readouterr().out
    checks.check_in_flight((6, 32))
    assert "other way round" in capsys.readouterr().out
    checks.check_in_flight((32, 8))
    assert "stage 0's" in capsys.readouterr().out
    checks.check_bubble(0.25)
    assert "busy time" in capsys.readouterr().out
    checks.check_bubble(20)
    assert "percentage" in capsys.readouterr().out
    checks.check_zero_memory(37.375e9)
    assert "in bytes" in capsys.readouterr().out


def test_a_total_rounded_to_whole_gb_passes_and_counts_must_be_ints(capsys):
    assert checks.check_zero_memory(37)            # rounded to whole GB
    assert "Correct" in capsys.readouterr().out
    # as in every notebook's checks (dltools.exercises.is_int): a count is an int, and the hint
    # says so
    assert not checks.check_tp_all_reduces(24.0)
    assert "whole number (an int)" in capsys.readouterr().out
    assert not checks.check_in_flight((32.0, 6.0))
    assert "pair of ints" in capsys.readouterr().out


def zero1_right(optimizer, piece, full_grad, rank, world_size):
    piece.grad = torch.tensor_split(full_grad, world_size)[rank].clone()
    optimizer.step()


def zero1_chunk(optimizer, piece, full_grad, rank, world_size):  # chunk cuts 10 as 3, 3, 3, 1
    piece.grad = torch.chunk(full_grad, world_size)[rank].clone()
    optimizer.step()


def zero1_rank0_slice(optimizer, piece, full_grad, rank, world_size):  # every rank: the first
    piece.grad = full_grad[:piece.numel()].clone()
    optimizer.step()


def zero1_no_step(optimizer, piece, full_grad, rank, world_size):
    piece.grad = torch.tensor_split(full_grad, world_size)[rank].clone()


def zero1_zero_grad(optimizer, piece, full_grad, rank, world_size):  # Adam does not move
    piece.grad = torch.zeros_like(piece)
    optimizer.step()


def zero1_whole_grad(optimizer, piece, full_grad, rank, world_size):
    piece.grad = full_grad
    optimizer.step()


def zero1_divided(optimizer, piece, full_grad, rank, world_size):  # averaged a second time
    piece.grad = torch.tensor_split(full_grad, world_size)[rank] / world_size
    optimizer.step()


def zero1_divided_then_zero_grad(optimizer, piece, full_grad, rank, world_size):
    piece.grad = torch.tensor_split(full_grad, world_size)[rank] / world_size
    optimizer.step()
    optimizer.zero_grad()   # a training loop's habit: the gradient is gone after the call


def zero1_times_100(optimizer, piece, full_grad, rank, world_size):
    piece.grad = 100 * torch.tensor_split(full_grad, world_size)[rank]
    optimizer.step()


def zero1_negated(optimizer, piece, full_grad, rank, world_size):
    piece.grad = -torch.tensor_split(full_grad, world_size)[rank]
    optimizer.step()


def zero1_right_then_zero_grad(optimizer, piece, full_grad, rank, world_size):
    piece.grad = torch.tensor_split(full_grad, world_size)[rank].clone()
    optimizer.step()
    optimizer.zero_grad()


def test_zero1_step_right(capsys):
    assert checks.check_zero1_step(zero1_right)
    assert checks.check_zero1_step(zero1_right_then_zero_grad)
    assert capsys.readouterr().out.count("Correct") == 2


@pytest.mark.parametrize("wrong, says", [
    (zero1_chunk, "raised RuntimeError"),
    (zero1_rank0_slice, "rank 1's piece got another gradient"),
    (zero1_no_step, "never stepped"), (zero1_whole_grad, "raised RuntimeError"),
    (zero1_zero_grad, "did not change"),
    (zero1_divided, "times 0.25"), (zero1_divided_then_zero_grad, "times 0.25"),
    (zero1_times_100, "times 100"), (zero1_negated, "times -1"),
    ("zero1_step", "function itself"),
])
def test_zero1_step_wrong(wrong, says, capsys):
    assert not checks.check_zero1_step(wrong)
    assert says in capsys.readouterr().out


def test_zero1_step_not_answered(capsys):
    assert not checks.check_zero1_step(None)
    assert "Not answered yet" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_zero_memory, checks.check_tp_all_reduces,
                                   checks.check_in_flight, checks.check_bubble,
                                   checks.check_zero1_step])
def test_help_does_not_show_the_answer(check):
    assert_help_hides(check, ("37.375", "24", "(32, 6)", "0.2", "tensor_split", "chunk"))


def zero1_waits_forever(optimizer, piece, full_grad, rank, world_size):
    import time
    time.sleep(3600)


def test_zero1_step_that_never_returns_is_stopped(capsys, monkeypatch):
    monkeypatch.setattr(checks, "TIME_LIMIT", 1)
    assert not checks.check_zero1_step(zero1_waits_forever)
    assert "on rank 0 of 4: your function did not return within 1 s" in capsys.readouterr().out


def test_a_number_in_quotes_is_told_to_be_a_number(capsys):
    assert not checks.check_bubble("0.2")
    assert "not text in quotes" in capsys.readouterr().out
