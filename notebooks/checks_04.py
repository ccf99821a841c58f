"""Checks for the exercises of notebook 04 (ResNet-18 across devices).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". The expected values are worked out inside the functions from the
setup of study note 5 (or from the results given), so that Jupyter's help (Shift-Tab) does not
show them.
"""
import math
import numbers

import torch

from dltools.exercises import (
    TimeLimitExceeded,
    as_float,
    call_with_time_limit,
    is_int,
    plain,
    report,
)

# Study note 5's runs: all 60,000 training images, 10 epochs; one GPU at batch 256 and lr 0.1, two
# GPUs at batch 512 and lr 0.2.
_IMAGES, _EPOCHS, _BATCH_1, _LR_1, _BATCH_2 = 60000, 10, 256, 0.1, 512

#: Seconds a learner's function may run in a check.
TIME_LIMIT = 30


def check_steps_in_ten_epochs(answer):
    """Optimizer steps of study note 5's training on 3 GPUs (global batch 3 x 128) in 10 epochs."""
    answer = plain(answer)
    batch = 3 * 128   # 3 GPUs, 128 images each
    per_epoch = math.ceil(_IMAGES / batch)
    expected = per_epoch * _EPOCHS
    one_gpu = math.ceil(_IMAGES / _BATCH_1) * _EPOCHS
    two_gpus = math.ceil(_IMAGES / _BATCH_2) * _EPOCHS
    if answer is not None and not is_int(answer):
        return report(False, "", "a number of steps is a whole number (an int, as the course's "
                      "other counts are; int(x) or math.ceil gives one).", answer)
    if answer in (one_gpu, two_gpus):
        hint = "that is one of study note 5's runs; count with the global batch of 3 GPUs."
    elif answer == _IMAGES // batch * _EPOCHS:
        hint = "the last, smaller batch of each epoch is a step too."
    elif answer == math.ceil(_IMAGES / (batch // 3)) * _EPOCHS:
        hint = "one step takes a global batch: the batch of every GPU together."
    else:
        hint = "one step per batch; count the batches of an epoch, then multiply by the epochs."
    return report(answer == expected,
                  f"ceil({_IMAGES} / {batch}) = {per_epoch} steps per epoch, {expected} in "
                  f"{_EPOCHS} epochs (study note 5's two-GPU run takes {two_gpus}).", hint, answer)


def check_scaled_lr(answer):
    """The learning rate for batch 1024 on 4 GPUs by the linear-scaling rule."""
    answer = plain(answer)
    batch = 4 * _BATCH_1
    expected = _LR_1 * batch / _BATCH_1
    ok = isinstance(answer, numbers.Real) and not isinstance(answer, bool) and math.isclose(
        as_float(answer), expected, rel_tol=1e-6)
    real = answer is not None and isinstance(answer, numbers.Real) and not isinstance(answer, bool)
    sqrt_rule = _LR_1 * math.sqrt(batch / _BATCH_1)   # here also study note 5's rate at batch 512
    if isinstance(answer, str):
        hint = "give a number (a learning rate such as 0.05), not text in quotes."
    elif real and math.isclose(as_float(answer), sqrt_rule, rel_tol=1e-6):
        hint = (f"{sqrt_rule:g} is what the square-root rule gives, and study note 5's rate for "
                f"batch {_BATCH_2}; the linear rule multiplies by the factor the global batch "
                "grew by.")
    else:
        hint = "the rule multiplies the learning rate by the factor the batch grew by."
    return report(ok, f"{_LR_1} x {batch} / {_BATCH_1} = {expected:g}, reached gradually, with a "
                  "warm-up.", hint, answer)


def check_bn_rows_per_replica(answer):
    """Rows the last replica's BatchNorm layers normalise over: DataParallel, 5 GPUs, batch 512."""
    from dltools.parallel import chunk_sizes
    answer = plain(answer)
    devices = 5
    sizes = chunk_sizes(_BATCH_2, devices)
    if answer is not None and not is_int(answer):
        hint = ("a number of rows is a whole number (an int): scatter cannot split a row, and "
                "512 / 5 is a float; int(x) or // gives an int."
                if isinstance(answer, numbers.Real) and not isinstance(answer, bool)
                else "a number of rows is a whole number (an int).")
        return report(False, "", hint, answer)
    if answer == _BATCH_2:
        hint = "BatchNorm runs inside each replica's forward and sees only that replica's rows."
    elif answer == sizes[0]:
        hint = "that is the first replicas' chunk; the last one gets the rows left over."
    elif answer == _BATCH_2 // devices:
        hint = ("an equal split, rounded down, is not scatter's rule: it uses torch.chunk's "
                "(notebook 01).")
    else:
        hint = (f"how does scatter split {_BATCH_2} rows over {devices} devices? It uses "
                "torch.chunk's rule (notebook 01).")
    return report(answer == sizes[-1],
                  f"every replica normalises its own chunk: chunk_sizes({_BATCH_2}, {devices}) = "
                  f"{sizes}, so the last replica's statistics come from {sizes[-1]} rows and the "
                  "others' from " + str(sizes[0]) + ".", hint, answer)


def check_running_mean(answer):
    """A running mean that starts at 0 and moves 10% of the way each step, after 10 steps of 1."""
    answer = plain(answer)
    momentum, steps = 0.1, 10
    expected = 1 - (1 - momentum) ** steps
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real):
        return report(False, "", "give a number, such as 0.5.", answer)
    answer = as_float(answer)
    left = (1 - momentum) ** steps
    if math.isclose(answer, left, abs_tol=5e-4):
        hint = "that is what is left of the start (0); the running mean has moved the rest."
    elif math.isclose(answer, 1.0, abs_tol=5e-4):
        hint = ("each step moves it only 10% of the remaining way: it gets close to 1, never "
                "there.")
    elif math.isclose(answer, 1 - (1 - momentum) ** (steps - 1), abs_tol=5e-4) or \
            math.isclose(answer, 1 - (1 - momentum) ** (steps + 1), abs_tol=5e-4):
        hint = "count the steps again: 10 updates, each multiplying the distance to 1 by 0.9."
    elif abs(answer - expected) < 0.01:
        hint = "close: give 3 decimals, or the expression itself."
    else:
        hint = "after one step it is 0.1, after two 0.19: each step keeps 0.9 of the distance to 1."
    return report(math.isclose(answer, expected, abs_tol=5e-4),
                  f"1 - 0.9 ** {steps} = {expected:.3f}: the distance to the batches' mean shrinks "
                  "by 0.9 each step, so a network that makes half the steps has statistics that "
                  "lag further behind.", hint, answer)


def _reference_lrs(peak, warmup_steps, num_steps):
    """The learning rate of every step under LambdaLR with a linear warm-up, from torch itself."""
    w = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([w], lr=peak)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warmup_steps))
    lrs = []
    for _ in range(num_steps):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return lrs


def check_warmup_schedule(lr_at):
    """Your ``lr_at(step)`` against the learning rates torch's LambdaLR gives, step by step."""
    if lr_at is None:
        return report(None, "", "", None)
    if not callable(lr_at):
        return report(False, "", "pass the function itself: check_warmup_schedule(lr_at).", lr_at)
    warmup = 2 * math.ceil(_IMAGES / _BATCH_2)
    # every step of the 10-epoch run, so that a rate that drops (or stops) later is caught too
    expected = _reference_lrs(2 * _LR_1, warmup, _EPOCHS * math.ceil(_IMAGES / _BATCH_2))
    try:
        got = call_with_time_limit(TIME_LIMIT, lambda: [float(lr_at(step))
                                                        for step in range(len(expected))])
    except TimeLimitExceeded as err:
        return report(False, "", f"lr_at: {err}", lr_at)
    except Exception as err:  # the learner's code: report, do not raise
        return report(False, "", f"lr_at raised {type(err).__name__}: {err}", lr_at)
    bad = [s for s, (g, e) in enumerate(zip(got, expected)) if not math.isclose(g, e, rel_tol=1e-6)]
    if not bad:
        return report(True, f"the rate grows linearly over the first {warmup} steps (2 epochs of "
                      f"{warmup // 2}), then stays at {2 * _LR_1:g}.", "", lr_at)
    s = bad[0]
    if math.isclose(got[0], 2 * _LR_1):
        hint = "step 0 already uses the full rate: there is no warm-up."
    elif all(math.isclose(got[t], expected[t] - 2 * _LR_1 / warmup, abs_tol=1e-12)
             for t in range(warmup)):
        hint = "off by one step: step 0 should already use 1/warmup of the rate (see LambdaLR)."
    elif not math.isclose(got[-1], 2 * _LR_1):
        hint = f"after the warm-up the rate stays at study note 5's two-GPU rate, {2 * _LR_1:g}."
    else:
        hint = (f"the rate should grow linearly over 2 epochs of the two-GPU run "
                f"({warmup} steps): step k uses {2 * _LR_1:g} * (k + 1) / {warmup}.")
    return report(False, "", f"step {s}: yours {got[s]:.6g}, expected {expected[s]:.6g}; {hint}",
                  lr_at)


_FAIR = {"a": "dp-512", "b": "one-256", "column": "test_acc_recalibrated_bn", "last": 3}


def _interval_of(results, a, b, column, epochs):
    """paired_interval of configuration a minus b in a batch_scaling.py report."""
    from dltools.stats import paired_interval

    def per_seed(config):
        scores = {}
        for run in results["runs"]:
            if run["config"] == config:
                rows = [h[column] for h in run["history"] if h["epoch"] in epochs]
                scores[run["seed"]] = sum(rows) / len(rows)
        return [scores[k] for k in sorted(scores)]

    return paired_interval(per_seed(a), per_seed(b))


def check_fair_comparison(answer, results=None):
    """Exercise 6: paired_interval of dp-512 minus one-256, each run scored by the mean of its last
    3 epochs with BatchNorm re-estimated, from ``results`` (batch_scaling.py's report, as a dict;
    by default the course's committed results/batch_scaling_cpu.json)."""
    if answer is None:
        return report(None, "", "", None)
    if results is None:
        import json

        from dltools.paths import course_root
        results = json.loads((course_root() / "results" / "batch_scaling_cpu.json").read_text())
    try:
        low, high = float(answer.low), float(answer.high)
    except (AttributeError, TypeError, ValueError):
        return report(False, "", "give the Interval that paired_interval(a, b) returns.", answer)
    epochs_run = max(h["epoch"] for h in results["runs"][0]["history"])
    last = range(epochs_run - _FAIR["last"] + 1, epochs_run + 1)
    want = _interval_of(results, _FAIR["a"], _FAIR["b"], _FAIR["column"], last)
    wrong = {  # (a, b, column, epochs) -> hint
        (_FAIR["b"], _FAIR["a"], _FAIR["column"], "last"):
            "that is one-256 minus dp-512: put dp-512 first.",
        (_FAIR["a"], _FAIR["b"], "test_acc", "last"):
            "that scores the runs as study note 5 did; use the re-estimated column (R).",
        (_FAIR["a"], _FAIR["b"], _FAIR["column"], "final"):
            "that scores each run by its last epoch only; use the mean of the last 3 (LAST).",
        (_FAIR["a"], "one-512", _FAIR["column"], "last"):
            "that compares with one-512; the exercise compares with one-256.",
    }
    close = lambda i: abs(low - i.low) < 1e-3 and abs(high - i.high) < 1e-3  # noqa: E731
    if close(want):
        return report(True, f"dp-512 minus one-256: {want}. "
                      + _fair_reading(results, want, epochs_run), "", answer)
    for (a, b, column, epochs), hint in wrong.items():
        span = last if epochs == "last" else [epochs_run]
        if close(_interval_of(results, a, b, column, span)):
            return report(False, "", hint, answer)
    return report(False, "", "use per_seed(config) for both configurations (its defaults are the "
                  "last 3 epochs, BatchNorm re-estimated), then paired_interval(a, b) with a the "
                  "DataParallel runs. (This check grades the committed CPU results, "
                  "results/batch_scaling_cpu.json: an interval from another report, such as your "
                  "own GPU run, is not graded here.)", answer)


def _fair_reading(results, want, epochs_run):
    """What exercise 6's interval says, built from the intervals themselves: whether it excludes
    0, whether that holds for other windows (the last 1 to 5 epochs), and what one device at batch
    512 shows beside it."""
    def window(k):
        return _interval_of(results, _FAIR["a"], _FAIR["b"], _FAIR["column"],
                            range(epochs_run - k + 1, epochs_run + 1))
    others = {k: window(k) for k in range(1, 6) if k != _FAIR["last"] and k <= epochs_run}
    flips = sorted(k for k, i in others.items() if i.excludes_zero != want.excludes_zero)
    side = "behind" if want.mean < 0 else "ahead of"
    if want.excludes_zero:
        reading = (f"It excludes 0, so by rule 3 these runs show it: on this CPU proxy (width 4, "
                   f"3 seeds) DataParallel at batch 512 ends about {abs(100 * want.mean):.0f} "
                   f"percentage points {side} batch 256.")
    else:
        reading = "It includes 0: these runs do not show a difference."
    if flips:
        now = "includes" if want.excludes_zero else "excludes"
        ks = ", ".join(map(str, flips[:-1])) + (" or " if len(flips) > 1 else "") + str(flips[-1])
        window = "only the last epoch" if flips == [1] else f"a window of the last {ks} epochs"
        reading += (f" A borderline result: with {window} instead of the last "
                    f"{_FAIR['last']}, the interval {now} 0. Rule 1 fixes the window before "
                    "looking, for this reason.")
    reading += (" (The notebook computes about a dozen such intervals, so one of them may "
                "exclude 0 by chance.)")
    other = _interval_of(results, "one-512", _FAIR["b"], _FAIR["column"],
                         range(epochs_run - _FAIR["last"] + 1, epochs_run + 1))
    same = (other.mean < 0) == (want.mean < 0)
    reading += (f" One device at batch 512 minus one-256: {other}, "
                f"{'the same sign' if same else 'the other sign'}"
                f"{' and an interval that includes 0' if not other.excludes_zero else ''}: "
                + ("these runs do not tie the difference to the second device (H0/H3)."
                   if same else "the second device may matter here (H0/H3)."))
    return reading
