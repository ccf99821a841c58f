"""Notebook 05's exercise checks: right answers pass, typical wrong answers fail, and no answer
shows in Jupyter's help (the signature and the docstring)."""
import inspect

import pytest
import torch

import checks_05 as checks


@pytest.mark.parametrize("check, right, wrongs", [
    (checks.check_zero3_memory, 14, [112, 7, 28, 38.5, 13, "14", True]),
    (checks.check_tp_all_reduces, 24, [12, 48, 24.0, 23.9, "24", True]),
    (checks.check_in_flight, (16, 4), [(4, 16), (16, 16), (4, 4), (16, 1), (16.0, 4.0), 16,
                                       "16, 4"]),
    (checks.check_bubble, 0.2, [0.25, 3 / 16, 0.3, "0.2", True]),
])
def test_right_answer_passes_and_wrong_ones_fail(check, right, wrongs, capsys):
    assert check(right) is True
    assert "Correct" in capsys.readouterr().out
    for wrong in wrongs:
        assert check(wrong) is False, wrong
    assert check(None) is False
    assert "Not answered yet" in capsys.readouterr().out


def test_hints_name_the_usual_mistakes(capsys):
    checks.check_zero3_memory(112)
    assert "without sharding" in capsys.readouterr().out
    checks.check_tp_all_reduces(12)
    assert "one direction" in capsys.readouterr().out
    checks.check_in_flight((4, 16))
    assert "other way round" in capsys.readouterr().out
    checks.check_bubble(0.25)
    assert "busy time" in capsys.readouterr().out


@pytest.mark.parametrize("shard", [
    lambda t, r, n: torch.chunk(t, n)[r] if r < len(torch.chunk(t, n)) else t[:0],
    lambda t, r, n: torch.tensor_split(t, n)[r],
])
def test_sharded_adam_accepts_real_shardings(shard, capsys):
    assert checks.check_sharded_adam(shard) is True
    assert "Correct" in capsys.readouterr().out


@pytest.mark.parametrize("shard, says", [
    (lambda t, r, n: t, "must be the tensor itself"),                       # no sharding
    (lambda t, r, n: t[r::n], "must be the tensor itself"),                 # strided, out of order
    (lambda t, r, n: t[:7] if r == 0 else torch.tensor_split(t[7:], n - 1)[r - 1], "share"),
    (lambda t, r, n: t[r * (t.numel() // n):(r + 1) * (t.numel() // n)],
     "must be the tensor itself"),                                       # drops the remainder
    (lambda t, r, n: torch.tensor_split(t, n)[n - 1 - r], "must be the tensor itself"),  # reversed
    (lambda t, r, n: torch.tensor_split(t, n)[r] * 1.0001, "must be the tensor itself"),  # altered
    (lambda t, r, n: None, "must return a tensor"),
    (lambda t, r, n: 1 / 0, "ZeroDivisionError"),
])
def test_sharded_adam_rejects_wrong_shardings(shard, says, capsys):
    assert checks.check_sharded_adam(shard) is False
    assert says in capsys.readouterr().out


def test_sharded_adam_catches_mismatched_gradient_shards(capsys):
    calls = []

    def shard(t, r, n):  # right for the parameter, but hands every rank rank 0's gradient
        calls.append(r)
        pieces = torch.tensor_split(t, n)
        return pieces[r] if len(calls) <= n else pieces[0][:pieces[r].numel()]

    assert checks.check_sharded_adam(shard) is False
    assert "same slice of the gradient" in capsys.readouterr().out


def test_sharded_adam_not_answered(capsys):
    assert checks.check_sharded_adam(None) is False
    assert "Not answered yet" in capsys.readouterr().out


@pytest.mark.parametrize("check", [checks.check_zero3_memory, checks.check_tp_all_reduces,
                                   checks.check_in_flight, checks.check_bubble,
                                   checks.check_sharded_adam])
def test_help_does_not_show_the_answer(check):
    shown = str(inspect.signature(check)) + (check.__doc__ or "")
    for answer in ("14", "24", "(16, 4)", "0.2", "tensor_split", "chunk"):
        assert answer not in shown, (check.__name__, answer)
