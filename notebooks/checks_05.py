"""Checks for the exercises of notebook 05 (beyond DDP: ZeRO, FSDP2, tensor and pipeline
parallelism).

Each check prints whether the answer is right, with a hint when it is not, and returns True/False;
``None`` means "not answered yet". Expected values are worked out inside the functions (from
``dltools.beyond.memory`` and the schedules' rules), so Jupyter's help does not show them.
"""
import numbers

import torch

from dltools.beyond.memory import GB, per_rank_bytes
from dltools.exercises import close_enough, int_tuple, is_int, report


def check_zero3_memory(answer):
    """GB of parameters, gradients and optimizer state per GPU: 7e9 parameters, bf16 mixed
    precision with Adam, ZeRO-3 on 8 GPUs."""
    expected = per_rank_bytes(7e9, 8, stage=3, precision="bf16")["total"] / GB
    unsharded = per_rank_bytes(7e9, 1, stage=0, precision="bf16")["total"] / GB
    stage1 = per_rank_bytes(7e9, 8, stage=1, precision="bf16")["total"] / GB
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, numbers.Real)):
        return report(False, "", "give a number of GB (1 GB = 1e9 bytes).", answer)
    if close_enough(answer, unsharded):
        hint = "that is one GPU's share without sharding; ZeRO-3 divides all three parts by 8."
    elif close_enough(answer, stage1):
        hint = "that is ZeRO-1 (only the optimizer state sharded)."
    else:
        hint = "2 + 2 + 12 bytes per parameter in bf16 mixed precision, all of it sharded 8 ways."
    return report(close_enough(answer, expected),
                  f"16 bytes x 7e9 / 8 = {expected:g} GB per GPU (activations come on top).",
                  hint, answer)


def check_tp_all_reduces(answer):
    """All-reduces per training step (forward + backward) of tensor parallelism on a stack of 12
    MLP blocks whose input requires a gradient."""
    blocks = 12
    expected = 2 * blocks
    if answer is not None and not is_int(answer):
        return report(False, "", "a number of collectives is a whole number (an int).", answer)
    hint = ("that counts one direction only: backward all-reduces the input's gradient too."
            if answer == blocks else "count one per block in forward (after the row-wise layer) "
            "and one per block in backward (the gradient of the column-wise layer's input).")
    return report(answer == expected, f"one per block each way: {expected}.", hint, answer)


def check_in_flight(answer):
    """(GPipe, 1F1B): most microbatches whose activations stage 0 holds at once, p = 4, m = 16."""
    p, m = 4, 16
    expected = (m, min(m, p))
    got = int_tuple(answer) if answer is not None else None
    if answer is not None and (got is None or len(got) != 2):
        return report(False, "", "answer with a pair of ints: (gpipe, one_f_one_b).", answer)
    if got == expected[::-1]:
        hint = "the other way round: GPipe runs every forward before the first backward."
    else:
        hint = ("GPipe forwards all m before any backward; 1F1B starts backwards once the "
                "first microbatch has gone through all p stages.")
    return report(got == expected, f"GPipe holds all {m}, 1F1B at most p = {p} on stage 0 "
                  "(p - s on stage s).", hint, answer)


def check_bubble(answer):
    """The bubble fraction of GPipe (or 1F1B) with p = 4 stages and m = 12 microbatches."""
    p, m = 4, 12
    expected = (p - 1) / (m + p - 1)
    if answer is not None and close_enough(answer, (p - 1) / m):
        hint = "(p - 1) / m is bubble time over busy time; the question asks bubble over total."
    else:
        hint = "each stage is idle p - 1 of the m + p - 1 slots."
    return report(close_enough(answer, expected, rel=1e-3),
                  f"(p - 1) / (m + p - 1) = 3/15 = {expected:g}.", hint, answer)


def check_sharded_adam(shard):
    """Your ``shard(tensor, rank, world_size)``, used for ZeRO-1 by hand.

    What is checked (and can fail): the shards put back in rank order are the tensor, and no rank
    holds more than ``ceil(numel / N)`` elements, so each rank's Adam state is at most 1/N of it.
    Then each rank runs Adam on its shard only and the pieces must match Adam on the whole. As
    Adam works element by element, that holds for any valid sharding (it is what lets ZeRO-1 shard
    the optimizer state at all); it fails only if ``shard`` cuts the gradient differently from the
    parameter (a function with state or randomness)."""
    if shard is None:
        return report(None, "", "")
    torch.manual_seed(0)
    world, numel, lr = 4, 10, 0.1
    param, grads = torch.randn(numel), [torch.randn(numel) for _ in range(3)]
    full = param.clone().requires_grad_()
    full_opt = torch.optim.Adam([full], lr=lr)
    try:
        pieces = [shard(param.clone(), r, world) for r in range(world)]
        if not all(isinstance(p, torch.Tensor) for p in pieces):
            return report(False, "", "shard must return a tensor (a slice of the input).", shard)
        sizes = [p.numel() for p in pieces]
        if sum(sizes) != numel or not torch.equal(torch.cat(pieces), param):
            return report(False, "", f"the shards of 0..{numel - 1} on {world} ranks, put back "
                          f"in rank order, must be the tensor itself; got sizes {sizes}.", shard)
        if max(sizes) > -(-numel // world):
            return report(False, "", f"sizes {sizes}: a rank holds more than its share "
                          f"ceil({numel}/{world}); then its optimizer state is not 1/N.", shard)
        locals_ = [p.clone().requires_grad_() for p in pieces]
        opts = [torch.optim.Adam([p], lr=lr) for p in locals_]
        for g in grads:
            full.grad = g.clone()
            full_opt.step()
            for r in range(world):
                locals_[r].grad = shard(g.clone(), r, world).clone()
                opts[r].step()
    except Exception as err:  # noqa: BLE001 (the learner's code: report it, do not crash)
        return report(False, "", f"your function raised {type(err).__name__}: {err}", shard)
    state = [opts[r].state[locals_[r]]["exp_avg"].numel() for r in range(world)]
    gap = (torch.cat([p.detach() for p in locals_]) - full.detach()).abs().max().item()
    return report(gap <= 1e-6, f"shards of {sizes} elements, Adam state per rank {state} instead "
                  f"of {numel} each; after 3 steps of Adam on each shard alone the gathered "
                  f"parameters differ from Adam on the whole tensor by {gap:.1e} (Adam is "
                  "elementwise, so any valid sharding gives this).",
                  "the gathered parameters differ from Adam on the whole tensor: does each rank "
                  "get the same slice of the gradient as of the parameter?", shard)
