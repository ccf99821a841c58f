"""Notebook 02's exercise checks: right answers pass, typical wrong answers fail."""

import pytest
import torch
from torch import nn

import checks_02 as checks
from support.checks import assert_help_hides, assert_right, assert_unanswered, assert_wrong, verdict


@pytest.mark.parametrize("check, right", [
    (checks.check_scalar_loss_shape, (4,)),
    (checks.check_scalar_loss_shape, torch.Size([4])),
    (checks.check_replica_loss_weights, [4 / 14, 4 / 14, 4 / 14, 2 / 14]),
    (checks.check_replica_loss_weights, (2 / 7, 2 / 7, 2 / 7, 1 / 7)),
    (checks.check_replica_loss_weights, torch.tensor([4, 4, 4, 2]) / 14),
    (checks.check_broadcast_bytes, (8_000_000, 24_000_000)),
    (checks.check_global_batch_mean, 2.2),
    (checks.check_global_batch_mean, 11 / 5),
    (checks.check_replica_loss_weights, [0.286, 0.286, 0.286, 0.143]),   # rounded: sum 1.001
    (checks.check_replica_loss_weights, [0.2861, 0.2855, 0.2855, 0.1429]),  # off by 6e-4
    (checks.check_replica_loss_weights, [0.29, 0.29, 0.29, 0.14]),      # two decimals
])
def test_right_answers_pass(capsys, check, right):
    assert_right(capsys, check, right)


@pytest.mark.parametrize("check, wrong", [
    (checks.check_scalar_loss_shape, (4.9,)),      # int() would truncate this to 4
    (checks.check_scalar_loss_shape, (4.0,)),
    (checks.check_scalar_loss_shape, (5,)),        # one per device: not every device gets rows
    (checks.check_scalar_loss_shape, (3,)),        # 7 // 2 chunks: forgot the last, short one
    (checks.check_scalar_loss_shape, ()),          # a scalar
    (checks.check_scalar_loss_shape, 4),           # a number, not a shape
    (checks.check_scalar_loss_shape, "(4,)"),
    (checks.check_scalar_loss_shape, (True,)),
    (checks.check_replica_loss_weights, [1 / 4] * 4),
    (checks.check_replica_loss_weights, [4, 4, 4, 2]),
    (checks.check_replica_loss_weights, [0.3, 0.3, 0.3, 0.1]),       # rounded too far
    (checks.check_replica_loss_weights, [0.3, 0.3, 0.3]),
    (checks.check_replica_loss_weights, ["0.3", "0.3", "0.3", "0.1"]),
    (checks.check_replica_loss_weights, [True, True, True, False]),
    (checks.check_replica_loss_weights, {0.25: 1, 0.5: 2}),
    (checks.check_replica_loss_weights, 0.4),
    (checks.check_broadcast_bytes, (4_000_000, 12_000_000)),   # the broadcast alone
    (checks.check_broadcast_bytes, (24_000_000, 24_000_000)),  # every copy from the master
    (checks.check_broadcast_bytes, (8_000_000, 32_000_000)),   # a copy to the master too
    (checks.check_broadcast_bytes, (8_000_000.0, 24_000_000)),
    (checks.check_broadcast_bytes, 24_000_000),
    (checks.check_broadcast_bytes, (2_000_000, 6_000_000)),    # parameters, not bytes
    (checks.check_broadcast_bytes, (8_000_000, 8_000_000)),    # the master's link only
    (checks.check_broadcast_bytes, {8_000_000: 0, 24_000_000: 1}),   # a dict is no answer
    (checks.check_scalar_loss_shape, {4}),
    (checks.check_global_batch_mean, 8 / 3),     # the plain mean of the means
    (checks.check_global_batch_mean, 1.0),       # one process's own mean
    (checks.check_global_batch_mean, 2.0),       # another process's own mean
    (checks.check_global_batch_mean, 5.0),
    (checks.check_global_batch_mean, 2.201),
    (checks.check_global_batch_mean, "2.2"),
    (checks.check_global_batch_mean, True),
])
def test_typical_wrong_answers_fail(capsys, check, wrong):
    assert_wrong(capsys, check, wrong)


def test_an_even_split_is_told_how_torch_chunk_cuts(capsys):
    ok, out = verdict(capsys, checks.check_replica_loss_weights, [4 / 14, 4 / 14, 3 / 14, 3 / 14])
    assert ok is False and "ceil(14 / 4)" in out and "[4, 4, 3, 3]" in out


def test_hints_do_not_give_the_answer_away(capsys):
    for answer in ((1_000_000, 3_000_000), (4_000_000, 12_000_000), (4_000_000, 4_000_000),
                   (3, 3)):
        _, out = verdict(capsys, checks.check_broadcast_bytes, answer)
        assert "8,000,000" not in out and "24,000,000" not in out and "collective_bytes" not in out
        assert "once" not in out, out
    _, out = verdict(capsys, checks.check_scalar_loss_shape, (5,))
    assert "(4,)" not in out and "= 2" not in out, out


@pytest.mark.parametrize("check", [checks.check_scalar_loss_shape,
                                   checks.check_replica_loss_weights, checks.check_broadcast_bytes,
                                   checks.check_global_batch_mean, checks.check_loss_in_forward])
def test_unanswered_and_no_answer_in_the_help(capsys, check):
    assert_unanswered(capsys, check)
    assert_help_hides(check, ("(3,)", "0.2857", "4000000", "4,000,000", "2.0", "reduction"))


# ------------------------------------------------------------------ coding: loss in forward


class Right(nn.Module):
    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, X, y, total_rows):
        return nn.functional.cross_entropy(self.net(X), y, reduction="sum") / total_rows


class RightPerSample(Right):
    def forward(self, X, y, total_rows):
        return nn.functional.cross_entropy(self.net(X), y, reduction="none") / total_rows


class MeanOfChunk(Right):  # the mistake the exercise is about
    def forward(self, X, y, total_rows):
        return nn.functional.cross_entropy(self.net(X), y) / (total_rows / len(X)) * 0 + \
            nn.functional.cross_entropy(self.net(X), y)


class SumOfChunk(Right):  # forgets to divide: right only up to scale
    def forward(self, X, y, total_rows):
        return nn.functional.cross_entropy(self.net(X), y, reduction="sum")


class Detached(Right):  # right value, no gradient
    def forward(self, X, y, total_rows):
        loss = nn.functional.cross_entropy(self.net(X), y, reduction="sum") / total_rows
        return loss.detach().requires_grad_()


class PlainDetach(Right):  # the typical mistake: .detach() on the loss
    def forward(self, X, y, total_rows):
        loss = nn.functional.cross_entropy(self.net(X), y, reduction="sum") / total_rows
        return loss.detach()


class Item(Right):  # the other typical mistake: a Python number
    def forward(self, X, y, total_rows):
        return (nn.functional.cross_entropy(self.net(X), y, reduction="sum") / total_rows).item()


class WrongSignature(Right):
    def forward(self, X, y):
        return nn.functional.cross_entropy(self.net(X), y)


@pytest.mark.parametrize("right", [Right, RightPerSample])
def test_loss_in_forward_right(capsys, right):
    assert_right(capsys, checks.check_loss_in_forward, right)


@pytest.mark.parametrize("wrong, words", [
    (MeanOfChunk, "full-batch mean"), (SumOfChunk, "full-batch mean"),
    (Detached, "gradient"), (WrongSignature, "raised TypeError"), (Right(nn.Linear(4, 3)), "class"),
    (PlainDetach, "carries no gradient"), (Item, "not a tensor (no .item())"),
])
def test_loss_in_forward_wrong(capsys, wrong, words):
    assert_wrong(capsys, checks.check_loss_in_forward, wrong, words)


def test_byte_counts_written_as_floats_get_their_own_hint(capsys):
    _, out = verdict(capsys, checks.check_broadcast_bytes, (8e6, 2.4e7))
    assert out.startswith("Not yet:") and "as ints" in out and "8e6" in out


class Forever(Right):
    def forward(self, X, y, total_rows):
        while True:
            pass


def test_loss_in_forward_that_never_returns_is_stopped(capsys, monkeypatch):
    """The check calls the learner's module with a time limit, as the other checks do (sweep 2,
    H1: it used to wait forever)."""
    monkeypatch.setattr(checks, "TIME_LIMIT", 2)
    assert_wrong(capsys, checks.check_loss_in_forward, Forever, "did not return within 2 s")
