"""Checks for the exercises of notebook 02 (inside nn.DataParallel).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". Expected values are worked out inside the functions (with
``torch.chunk`` and ``dltools.traffic``), so that Jupyter's help (Shift-Tab) does not show them.
The coding exercise's check runs the learner's module through ``dltools.parallel.DataParallel``.
"""
import math
import traceback
import warnings

import torch
from torch import nn

from dltools import parallel
from dltools.exercises import (
    TimeLimitExceeded,
    as_float,
    call_with_time_limit,
    int_list,
    int_tuple,
    is_real,
    plain,
    real_list,
    report,
)
from dltools.traffic import collective_bytes

#: Seconds a learner's module may take in a check (each call takes a few milliseconds).
TIME_LIMIT = 30


def _chunks(batch, num_devices):
    return [c.shape[0] for c in torch.empty(batch, 0).chunk(num_devices)]


def check_scalar_loss_shape(answer):
    """Exercise 1: the shape of what DataParallel returns for a model that returns a 0-dim loss."""
    batch, num_devices = 7, 5
    sizes = _chunks(batch, num_devices)
    expected = (len(sizes),)
    got = int_tuple(answer)
    if answer is not None and got is None:
        hint = ("give a shape: a tuple of whole numbers such as (5,) (a bare number is not a "
                "shape, and a shape has no fractions).")
    elif got == (num_devices,):
        hint = ("one loss per replica that ran; torch.chunk makes chunks of "
                "ceil(batch / devices) rows, so not every device need get rows.")
    elif got == ():
        hint = "gather cannot concatenate 0-dim tensors: it makes each one a vector of length 1."
    else:
        hint = "one loss comes back per replica that ran: count the chunks."
    return report(None if answer is None else got == expected,
                  f"{batch} rows on {num_devices} devices are chunks {sizes}: {len(sizes)} "
                  f"replicas run, so {len(sizes)} losses come back, shape {expected}.",
                  hint, answer)


def check_replica_loss_weights(answer):
    """Exercise 2: the weights, one per replica, that turn per-replica mean losses into the
    full-batch mean loss."""
    batch, num_devices = 14, 4
    sizes = _chunks(batch, num_devices)
    expected = torch.tensor(sizes, dtype=torch.float64) / batch
    ok = None
    hint = (f"a plain average gives the {sizes[-1]} rows of the small last chunk as much say as "
            f"the {sizes[0]} of each other chunk.")
    if answer is not None:
        values = real_list(answer)
        if values is None:
            ok, hint = False, "give a list of numbers, one weight per replica."
        elif len(values) != len(sizes):
            ok, hint = False, f"one weight per replica that runs: {len(sizes)} of them."
        else:
            got = torch.tensor(values, dtype=torch.float64)
            # Right to two decimals is right: 0.29 for 4/14 (a fraction such as 4 / 14 is exact).
            ok = torch.allclose(got, expected, rtol=0, atol=5e-3)
            even = [batch // num_devices + (j < batch % num_devices) for j in range(num_devices)]
            if not ok and torch.allclose(got, torch.tensor(sizes, dtype=torch.float64)):
                hint = "those are the row counts; weights that sum to 1 give a mean."
            elif not ok and torch.allclose(got, torch.tensor(even, dtype=torch.float64) / batch,
                                           rtol=0, atol=5e-3):
                hint = (f"torch.chunk does not share the rows out evenly ({even}): every chunk "
                        f"but the last has ceil({batch} / {num_devices}) rows.")
            elif not ok and abs(got.sum().item() - 1) > 1e-2:
                hint = "weights that give a mean add up to 1."
    return report(ok, f"chunks {sizes} of {batch} rows: weight each replica's mean by its share of "
                  "the rows.", hint, answer)


def check_broadcast_bytes(answer):
    """Exercise 3: (bytes the master sends and receives, bytes over all links) for one step's
    parameter broadcast and gradient reduce together."""
    num_params, num_devices, bytes_per_param = 1_000_000, 4, 4
    model = num_params * bytes_per_param
    b = collective_bytes("broadcast", model, num_devices)
    r = collective_bytes("reduce", model, num_devices)
    expected = [b["root_sent"] + r["root_received"], b["total"] + r["total"]]
    values = int_list(answer)
    floats = (not isinstance(answer, (str, bytes)) and isinstance(answer, (list, tuple))
              and any(isinstance(v, float) for v in answer))
    if answer is not None and values is None and floats:
        hint = ("write the byte counts as ints, for example 8_000_000 rather than 8e6 (a float): "
                "(the master's, all links').")
    elif answer is not None and (values is None or len(values) != 2):
        hint = ("answer with two whole numbers of bytes: (sent plus received by the master, over "
                "all links).")
    elif values == [b["root_sent"], b["total"]]:
        hint = ("that is the broadcast in forward; backward reduces the gradients to the master "
                "the same way, and they are as large as the parameters.")
    elif values == [2 * (num_devices - 1) * model] * 2:
        hint = ("that is what a master sending every copy itself (and receiving every gradient "
                "itself) would move; NCCL pipelines the broadcast and the reduce along the "
                "devices, so each device forwards what it receives.")
    elif values is not None and values[0] == values[1]:
        hint = ("the master takes part in one hop of each: it sends the parameters to one "
                "neighbour and receives the summed gradients from the other; the other hops are "
                "between the other devices.")
    elif values is not None and values[1] == 2 * num_devices * model:
        hint = "the master already holds the parameters: count the copies the other devices need."
    else:
        hint = ("in a pipelined broadcast each device passes on what it receives, and in a "
                "pipelined reduce each device adds its own gradients to what it receives and "
                "passes the sum on, until it reaches the master: count what leaves and enters the "
                "master, then every hop from one device to the next.")
    return report(None if answer is None else values == expected,
                  f"pipelined broadcast and reduce: the master sends one model and receives one "
                  f"model of gradients ({expected[0]:,} bytes), and the broadcast and the reduce "
                  f"each make {num_devices - 1} hops of one model: {expected[1]:,} bytes over all "
                  "links, every step.", hint, answer)


def check_global_batch_mean(answer):
    """Exercise 4: the mean SyncBatchNorm normalizes one channel with, from per-process chunks."""
    answer = plain(answer)
    rows, means = (4, 4, 2), (1.0, 2.0, 5.0)
    expected = sum(r * m for r, m in zip(rows, means)) / sum(rows)
    ok = None
    if answer is not None and not is_real(answer):
        ok, hint = False, "give one number (a float)."
    else:
        # within float32's rounding: a mean computed with tensors is right too
        ok = None if answer is None else math.isclose(as_float(answer), expected, rel_tol=1e-6)
        if answer is not None and math.isclose(as_float(answer), sum(means) / len(means),
                                               rel_tol=1e-6):
            hint = "that is the plain mean of the three means: a chunk of 2 rows counts less."
        elif answer is not None and as_float(answer) in means:
            hint = ("that is one process's own mean: SyncBatchNorm normalizes with the whole "
                    "batch's statistics, the same on every process.")
        else:
            hint = "weight each process's mean by its number of rows, then divide by all rows."
    return report(ok, "the rows' mean over the whole batch: each chunk's mean weighted by its "
                  "rows.", hint, answer)


# ------------------------------------------------------------------ coding exercise


def check_loss_in_forward(module_class):
    """Exercise 5: a module whose ``forward(X, y, total_rows)`` returns what makes
    ``DataParallel(...)(X, y, len(X)).sum()`` the full-batch mean loss."""
    if module_class is None:
        return report(None, "", "", None)
    if not isinstance(module_class, type):
        return report(False, "", "pass the class itself (its name, without calling it).", 0)
    cases = [(10, 3), (7, 2), (13, 4), (2, 3), (12, 3)]
    for rows, k in cases:
        torch.manual_seed(rows * 10 + k)
        net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3)).double()
        X, y = torch.randn(rows, 4, dtype=torch.float64), torch.randint(0, 3, (rows,))
        reference = nn.functional.cross_entropy(net(X), y)
        want_grads = torch.autograd.grad(reference, list(net.parameters()))
        try:   # one call on the whole batch, before DataParallel, with a time limit
            model = call_with_time_limit(TIME_LIMIT, module_class, net)
            probe = call_with_time_limit(TIME_LIMIT, model, X, y, rows)
        except TimeLimitExceeded as err:
            return report(False, "", str(err), module_class)
        except Exception as err:  # noqa: BLE001 - any error in the learner's code is feedback
            last = traceback.extract_tb(err.__traceback__)[-1]
            return report(False, "", f"running it raised {type(err).__name__}: {err} "
                          f"(line {last.lineno}); forward takes (self, X, y, total_rows).",
                          module_class)
        if not isinstance(probe, torch.Tensor):
            return report(False, "", f"forward returned a {type(probe).__name__}, not a tensor "
                          "(no .item()): DataParallel gathers tensors, and backward needs one.",
                          module_class)
        if not probe.requires_grad:
            return report(False, "", "forward's result carries no gradient (a .detach(), or a new "
                          "tensor made from numbers): compute it from the network's output.",
                          module_class)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # a 0-dim result is allowed: gather warns
                out = parallel.DataParallel(model, device_ids=["cpu"] * k)(X, y, rows)
            got = out.sum()
            grads = torch.autograd.grad(got, list(net.parameters()), allow_unused=True)
        except Exception as err:  # noqa: BLE001 - any error in the learner's code is feedback
            last = traceback.extract_tb(err.__traceback__)[-1]
            return report(False, "", f"running it raised {type(err).__name__}: {err} "
                          f"(line {last.lineno}); forward takes (self, X, y, total_rows).",
                          module_class)
        where = f"with {rows} rows on {k} replicas (chunks {_chunks(rows, k)})"
        if not torch.allclose(got, reference, atol=1e-10):
            return report(False, "", f"{where} the sum is {got.item():.4f}, the full-batch mean "
                          f"loss is {reference.item():.4f}. Each replica sees only its rows; "
                          "total_rows (a non-tensor argument) reaches every replica unchanged.",
                          module_class)
        if any(g is None or not torch.allclose(g, w, atol=1e-10)
               for g, w in zip(grads, want_grads)):
            return report(False, "", f"{where} the loss is right but its gradient is not: compute "
                          "it from the network's output (no .item(), no detach).", module_class)
    return report(True, f"on {len(cases)} batches, even and uneven, the summed result and its "
                  "gradients equal the full-batch mean loss's.", "", module_class)
