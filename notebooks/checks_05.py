"""Checks for the exercises of notebook 05 (beyond DDP: ZeRO, FSDP2, tensor and pipeline
parallelism).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". Expected values are worked out inside the functions (from
``dltools.beyond.memory`` and the schedules' rules), so Jupyter's help does not show them.
"""
import numbers

import torch

from dltools.beyond.memory import GB, per_rank_bytes
from dltools.exercises import (
    TimeLimitExceeded,
    call_with_time_limit,
    close_enough,
    int_tuple,
    is_int,
    plain,
    report,
)

#: Seconds a learner's function may run in a check.
TIME_LIMIT = 30


def check_zero_memory(answer):
    """GB of parameters, gradients and optimizer state per GPU: 13e9 parameters, bf16 mixed
    precision with Adam, ZeRO-2 on 16 GPUs."""
    answer = plain(answer)
    billions, gpus = 13, 16
    expected = per_rank_bytes(billions * 1e9, gpus, stage=2, precision="bf16")["total"] / GB
    others = {stage: per_rank_bytes(billions * 1e9, gpus, stage=stage, precision="bf16")["total"]
              / GB for stage in (0, 1, 3)}
    if answer is not None and (isinstance(answer, bool) or not isinstance(answer, numbers.Real)):
        return report(False, "", "give a number of GB (1 GB = 1e9 bytes).", answer)
    if close_enough(answer, expected * GB / 2**30, rel=0.005):
        hint = "that is in GiB (2**30 bytes); give GB (1e9 bytes)."
    elif close_enough(answer, expected * GB, rel=0.02):
        hint = "that is in bytes; give GB (1 GB = 1e9 bytes)."
    elif close_enough(answer, others[0]):
        hint = "that is one GPU's share without sharding; ZeRO-2 shards two of the three parts."
    elif close_enough(answer, others[1]):
        hint = ("that is ZeRO-1 (only the optimizer state sharded), or ZeRO-2 with fp32's 4 + 4 "
                "bytes of parameters and gradients: bf16 mixed precision keeps 2 + 2.")
    elif close_enough(answer, others[3]):
        hint = "that is ZeRO-3 (the parameters sharded too); ZeRO-2 keeps a whole bf16 copy."
    else:
        hint = ("2 + 2 + 12 bytes per parameter in bf16 mixed precision: which of the three parts "
                "does ZeRO-2 divide by the number of GPUs?")
    return report(close_enough(answer, expected) or answer == round(expected),   # 37 too
                  f"2 bytes x 13e9 of parameters, plus (2 + 12) bytes x 13e9 / 16 of gradients and "
                  f"optimizer state = {expected:g} GB per GPU (activations come on top).",
                  hint, answer)


def check_tp_all_reduces(answer):
    """All-reduces per training step (forward + backward) of tensor parallelism on a stack of 12
    MLP blocks whose input requires a gradient."""
    answer = plain(answer)
    blocks = 12
    expected = 2 * blocks
    if answer is not None and not is_int(answer):
        return report(False, "", "a number of collectives is a whole number (an int).", answer)
    hint = ("that counts one direction only: backward all-reduces the input's gradient too."
            if answer == blocks else "count one per block in forward (after the row-wise layer) "
            "and one per block in backward (the gradient of the column-wise layer's input).")
    return report(answer == expected, f"one per block each way: {expected}.", hint, answer)


def check_in_flight(answer):
    """(GPipe, 1F1B): most microbatches whose activations stage 2 holds at once, p = 8, m = 32."""
    p, m, stage = 8, 32, 2
    expected = (m, min(m, p - stage))
    got = int_tuple(answer) if answer is not None else None
    if answer is not None and (got is None or len(got) != 2):
        return report(False, "", "answer with a pair of ints: (gpipe, one_f_one_b).", answer)
    if got == expected[::-1]:
        hint = "the other way round: GPipe runs every forward before the first backward."
    elif got == (m, p):
        hint = ("that is stage 0's: a later stage starts its backwards sooner, since the first "
                "microbatch has fewer stages left to go through.")
    else:
        hint = ("GPipe forwards all m before any backward; under 1F1B a stage starts backwards "
                "once the first microbatch has gone through the stages after it and come back.")
    return report(got == expected, f"GPipe holds all {m}, 1F1B at most p - s = {p} - {stage} on "
                  f"stage {stage}.", hint, answer)


def check_bubble(answer):
    """The bubble fraction of GPipe (or 1F1B) with p = 4 stages and m = 12 microbatches."""
    answer = plain(answer)
    p, m = 4, 12
    expected = (p - 1) / (m + p - 1)
    if isinstance(answer, str):
        hint = "give a number (a fraction such as 0.25), not text in quotes."
    elif answer is not None and close_enough(answer, 100 * expected):
        hint = "that is a percentage; give the fraction (a number between 0 and 1)."
    elif answer is not None and close_enough(answer, (p - 1) / m):
        hint = "(p - 1) / m is bubble time over busy time; the question asks bubble over total."
    else:
        hint = "each stage is idle p - 1 of the m + p - 1 slots."
    return report(close_enough(answer, expected, rel=1e-3),
                  f"(p - 1) / (m + p - 1) = 3/15 = {expected:g}.", hint, answer)


def check_zero1_step(zero1_step):
    """Exercise 5: ``zero1_step(optimizer, piece, full_grad, rank, world_size)``, run for every
    rank of 4 for 3 steps; the pieces put back together are compared with Adam on the whole
    parameter."""
    if zero1_step is None:
        return report(None, "", "")
    if not callable(zero1_step):
        return report(False, "", "pass the function itself (its name, without calling it).", 0)
    torch.manual_seed(0)
    world, numel, lr = 4, 10, 0.1
    param, grads = torch.randn(numel), [torch.randn(numel) for _ in range(3)]
    full = param.clone().requires_grad_()
    full_opt = torch.optim.Adam([full], lr=lr)
    pieces = [p.clone().requires_grad_() for p in torch.tensor_split(param, world)]
    opts = [torch.optim.Adam([p], lr=lr) for p in pieces]
    sizes = [p.numel() for p in pieces]
    # the gradient each piece has when its optimizer steps (a zero_grad() after the step would
    # hide it from a look afterwards)
    at_step = {}
    for r, opt in enumerate(opts):
        opt.register_step_pre_hook(lambda o, args, kwargs, r=r: at_step.__setitem__(
            r, None if pieces[r].grad is None else pieces[r].grad.detach().clone()))
    for g in grads:
        full.grad = g.clone()
        full_opt.step()
        for r in range(world):
            try:
                call_with_time_limit(TIME_LIMIT, zero1_step, opts[r], pieces[r], g.clone(), r,
                                     world)
            except TimeLimitExceeded as err:
                return report(False, "", f"on rank {r} of {world}: {err}", zero1_step)
            except Exception as err:  # noqa: BLE001 (the learner's code: report it, do not crash)
                return report(False, "", f"on rank {r} of {world} (pieces of {sizes} elements) "
                              f"your function raised {type(err).__name__}: {err}", zero1_step)
            # Adam hardly notices a gradient's scale (it divides by its running size), so the
            # pieces alone would accept a gradient divided by 4 or times 100: check the gradient.
            want, got = torch.tensor_split(g, world)[r], at_step.pop(r, pieces[r].grad)
            if got is not None and got.shape == want.shape and got.any() \
                    and not torch.allclose(got, want):
                ratio = (got.double() @ want.double() / (want.double() @ want.double())).item()
                scaled = torch.allclose(got, ratio * want, rtol=1e-4, atol=1e-6)
                return report(False, "", f"rank {r}'s piece has the right part of full_grad "
                              f"times {ratio:.3g}: full_grad is already the whole gradient (the "
                              "all-reduce averaged it), so give the piece its part unchanged."
                              if scaled else f"rank {r}'s piece got another gradient than its "
                              "part of full_grad, cut the way the pieces were cut.", zero1_step)
    if not all(opts[r].state.get(pieces[r]) for r in range(world)):
        return report(False, "", "a rank's optimizer never stepped: after giving the piece its "
                      "gradient, call optimizer.step().", zero1_step)
    gathered = torch.cat([p.detach() for p in pieces])
    gap = (gathered - full.detach()).abs().max().item()
    moved = [not torch.equal(p.detach(), q) for p, q in
             zip(pieces, torch.tensor_split(param, world))]
    if not all(moved):
        return report(False, "", f"the pieces of ranks {[r for r, m in enumerate(moved) if not m]} "
                      "did not change: give each piece its part of full_grad before the step.",
                      zero1_step)
    if gap > 1e-6:
        wrong = [r for r, (a, b) in enumerate(zip(torch.tensor_split(gathered, world),
                                                    torch.tensor_split(full.detach(), world)))
                 if (a - b).abs().max() > 1e-6]
        return report(False, "", f"the pieces of ranks {wrong} differ from Adam on the whole "
                      "parameter: each rank needs the part of full_grad that matches its piece, "
                      "cut the way the pieces were cut.", zero1_step)
    state = [opts[r].state[pieces[r]]["exp_avg"].numel() for r in range(world)]
    return report(True, f"each rank updated only its piece ({sizes} elements), with Adam "
                  f"state for {state} elements instead of {numel} each; put back together, the "
                  f"pieces equal Adam on the whole parameter (largest difference {gap:.1e}). An "
                  "all-gather of the pieces ends the step.", "", zero1_step)
