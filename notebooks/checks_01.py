"""Checks for the exercises of notebook 01 (data parallelism, a first look).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". Expected values are worked out inside the functions (with
``torch.chunk``, ``nn.DataParallel`` and ``dltools``), so that Jupyter's help (Shift-Tab) does not
show them. The coding exercises' checks run the learner's function and compare with dltools/torch.

Device placement is checked on several different devices. Without a GPU they are simulated: under
PyTorch's ``FakeTensorMode`` tensors can be created on ``cuda:0``, ``cuda:1``, ... (shapes and
devices only, no values), and an operation that mixes two GPUs raises as it would on real ones. So
a missing ``.to(device)``, which goes unnoticed when every device is the CPU, fails the check here
too. With a GPU they are real: the GPUs, and the CPU as one more device when there are too few.
"""
import contextlib
import sys
import traceback

import torch
from torch import nn
from torch._subclasses.fake_tensor import FakeTensorMode

import dltools
from dltools.exercises import TimeLimitExceeded, call_with_time_limit, int_list, report


def _chunks(batch, num_devices):
    return [c.shape[0] for c in torch.empty(batch, 0).chunk(num_devices)]


def _chunk_verdict(answer, batch, num_devices):
    expected = _chunks(batch, num_devices)
    values = int_list(answer)
    if answer is not None and values is None:
        hint = ("give a list of whole numbers (ints), one per replica that gets rows, "
                "e.g. [3, 3, 2].")
    elif values is not None and sum(values) != batch:
        hint = (f"your chunks add up to {sum(values)} rows, which is not the size of the batch "
                "being split.")
    else:
        hint = ("torch.chunk gives every chunk ceil(batch / devices) rows, in order, and the last "
                "one what is left; replicas without rows do not run.")
    return report(None if answer is None else values == expected,
                  f"dltools.chunk_sizes({batch}, {num_devices}) = {expected}.", hint, answer)


def check_dp_chunk_sizes(answer):
    """Exercise 1: the rows each device gets."""
    return _chunk_verdict(answer, 50, 4)


def check_dp_last_batch(answer):
    """Exercise 2: the chunk sizes of the last batch of an epoch."""
    examples, batch, num_devices = 100, 32, 3
    return _chunk_verdict(answer, examples % batch or batch, num_devices)


def check_dp_wrapped_key(answer):
    """Exercise 3: the state_dict key of the last layer's bias, once wrapped."""
    net = nn.DataParallel(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)))
    expected = list(net.state_dict())[-1]
    if isinstance(answer, str) and answer == expected.removeprefix("module."):
        hint = ("that is the key of the plain network; what is the wrapped network's attribute "
                "called?")
    else:
        hint = ("a key is <wrapper's attribute>.<layer's index>.<parameter>; Sequential numbers "
                "its layers 0, 1, 2 (ReLU is number 1 and has no parameters).")
    return report(None if answer is None else answer == expected,
                  f"the wrapper stores the network as .module, so every key gains 'module.': "
                  f"{expected!r}.", hint, answer)


def _cuda_numbering(variable):
    """The physical GPUs behind cuda:0, cuda:1, ... for a CUDA_VISIBLE_DEVICES value."""
    return [int(index) for index in variable.split(",")]


_EXERCISE_4_VARIABLE = "5,2"  # the value exercise 4 sets, as it appears in its text


def check_dp_visible_gpus(answer):
    """Exercise 4: (device count, nvidia-smi's number of the GPU behind cuda:0)."""
    listed = _cuda_numbering(_EXERCISE_4_VARIABLE)
    expected = [len(listed), listed[0]]
    values = int_list(answer)
    if answer is not None and (values is None or len(values) != 2):
        hint = "answer with two whole numbers: (device count, nvidia-smi's number of cuda:0)."
    else:
        hint = ("the process sees only the listed GPUs, numbered from 0 in the order the variable "
                "lists them.")
    names = ", ".join(f"cuda:{j} is nvidia-smi's GPU {i}" for j, i in enumerate(listed))
    return report(None if answer is None else values == expected,
                  f"{len(listed)} GPUs are visible, renumbered in the order listed: {names}.",
                  hint, answer)


# ------------------------------------------------------------------ coding exercises


#: Seconds a learner's function may run in a check (each call takes a few milliseconds).
TIME_LIMIT = 30


def _call(fn, *args):
    """Run the learner's code: (result, None), or (None, a one-line description of the error)."""
    try:
        return call_with_time_limit(TIME_LIMIT, fn, *args), None
    except TimeLimitExceeded as err:
        return None, str(err)
    except Exception as err:  # noqa: BLE001 - any error in the learner's code is feedback
        last = traceback.extract_tb(err.__traceback__)[-1]
        return None, f"your function raised {type(err).__name__}: {err} (line {last.lineno})"


def _shapes(parts):
    return [tuple(p.shape) for p in parts]


def _placement_devices(k):
    """``k`` devices for the placement checks, and the mode to create tensors on them in.

    Without CUDA: ``cuda:0`` ... ``cuda:k-1`` under ``FakeTensorMode`` (no memory, no values).
    With CUDA, FakeTensorMode cannot simulate a GPU the machine lacks (a fake tensor on ``cuda:i``
    first makes a real one there: ``init_gpu_context`` in torch/_subclasses/fake_tensor.py), so
    the devices are real: the GPUs, then the CPU, in turn (Colab's one GPU: cuda:0, cpu, cuda:0).
    """
    n = torch.cuda.device_count()
    if n == 0:
        return [torch.device("cuda", i) for i in range(k)], FakeTensorMode()
    cycle = [torch.device("cuda", i) for i in range(n)] + ([torch.device("cpu")] if n < k else [])
    return (cycle * k)[:k], contextlib.nullcontext()


def _named(devices):
    """'3 (simulated) GPUs' or 'devices cuda:0, cpu, cuda:0', for the hints."""
    if torch.cuda.device_count() == 0:
        return f"{len(devices)} (simulated) GPUs"
    return "devices " + ", ".join(map(str, devices))


def _reference_split(X, y, devices):
    """How ``nn.DataParallel`` splits a batch (``torch.chunk``'s rule), chunk i on devices[i]."""
    return ([x.to(d) for x, d in zip(X.chunk(len(devices)), devices)],
            [t.to(d) for t, d in zip(y.chunk(len(devices)), devices)])


def _call_own(fn, *args):
    """``_call``, refused when the learner's function calls the library's split_batch or scatter,
    whether directly, through a wrapper, an alias or a partial: a profile hook watches the calls
    (in this thread, only while the learner's function runs; nothing of the library is changed)."""
    library = {dltools.parallel.split_batch.__code__, dltools.parallel.scatter.__code__}
    used = []

    def watch(frame, event, arg):
        if event == "call" and frame.f_code in library:
            used.append(frame.f_code.co_name)

    previous = sys.getprofile()
    sys.setprofile(watch)
    try:
        result, err = _call(fn, *args)
    finally:
        sys.setprofile(previous)
    if used:
        return None, ("this exercise asks for your own split_batch: split with tensor.chunk, not "
                      f"with dltools' {used[0]}")
    return result, err


def check_split_batch(split_batch):
    """Exercise 5: ``split_batch(X, y, devices)``, run on several batches and devices."""
    if split_batch is None:
        return report(None, "", "", None)
    if not callable(split_batch):
        return report(False, "", "pass the function itself (its name, without calling it).", 0)
    library = split_batch is dltools.split_batch
    if library or getattr(split_batch, "__module__", "") == "dltools.parallel":
        return report(False, "", "that is the library's split_batch: write your own function in "
                      "the cell above and pass it.", split_batch)
    devices = dltools.replica_devices()
    cases = [(10, 3), (12, 4), (7, 2), (2, 3), (1, 1), (30, 8)]
    for rows, k in cases:
        devs = (devices * k)[:k]
        X = torch.arange(rows * 3, dtype=torch.float32).reshape(rows, 3).to(devs[0])
        y = torch.arange(rows).to(devs[0])
        want_X, want_y = _reference_split(X, y, devs)
        # copies: the reference chunks are views of X and y, which the learner's code may change
        given_X, given_y = X.clone(), y.clone()
        got, err = _call_own(split_batch, given_X, given_y, list(devs))
        if err is None and not (torch.equal(given_X, X) and torch.equal(given_y, y)):
            return report(False, "", f"for {rows} rows on {k} devices your function changed X or "
                          "y in place: the caller's batch must stay as it was (split it, do not "
                          "write to it).", split_batch)
        if err and "non cpu device" in err:
            return report(False, "", f"{err}. nn.parallel.scatter (d2l's way) runs only on GPUs; "
                          "split with tensor.chunk and move each chunk with .to(device), which "
                          "work on any device.", split_batch)
        if err:
            return report(False, "", err, split_batch)
        try:
            got_X, got_y = got
            got_X, got_y = list(got_X), list(got_y)
        except (TypeError, ValueError):
            return report(False, "", "return two sequences: the chunks of X and the chunks of y.",
                          split_batch)
        where = f"for {rows} rows on {k} devices"
        if _shapes(got_X) != _shapes(want_X) or _shapes(got_y) != _shapes(want_y):
            return report(False, "", f"{where} the chunks should have shapes {_shapes(want_X)} and "
                          f"{_shapes(want_y)}, yours have {_shapes(got_X)} and {_shapes(got_y)}; "
                          "split the rows as torch.chunk does (and as DataParallel does).",
                          split_batch)
        same = all(torch.equal(a.cpu(), b.cpu()) for a, b in zip(got_X + got_y, want_X + want_y))
        if not same:
            return report(False, "", f"{where} the rows are not the right ones, in order.",
                          split_batch)
        placed = [t.device for t in got_X] == [t.device for t in got_y] == list(devs[:len(got_X)])
        if not placed:
            return report(False, "", f"{where} chunk i must be on devices[i]: use .to(device).",
                          split_batch)
    for rows, k in [(10, 3), (2, 3)]:  # placement, on distinct (perhaps simulated) devices
        gpus, mode = _placement_devices(k)
        with mode:
            X, y = torch.zeros(rows, 3, device=gpus[0]), torch.zeros(rows, device=gpus[0])
            got, err = _call_own(split_batch, X, y, gpus)
            if err is None:
                got_X, got_y = (list(part) for part in got)
                placed = [t.device for t in got_X] == [t.device for t in got_y] == gpus[:len(got_X)]
        if err:
            return report(False, "", f"on {_named(gpus)} {err}", split_batch)
        if not placed:
            return report(False, "", f"on {_named(gpus)} chunk i must be on devices[i]: "
                          "move each chunk there with .to(device). (With only CPUs every device is "
                          "the same, so the missing .to() does not show when you run it here.)",
                          split_batch)
    for x_rows, y_rows, k in [(4, 5, 2), (9, 10, 4)]:
        _, err = _call_own(split_batch, torch.zeros(x_rows, 3), torch.zeros(y_rows),
                           (devices * k)[:k])
        if err is None:
            break
    if err is None:
        return report(False, "", "X and y with different row counts must raise an error (d2l "
                      "asserts they match): otherwise features and labels get paired wrongly.",
                      split_batch)
    return report(True, f"your split_batch splits {len(cases)} batches as DataParallel does "
                  "(uneven chunks, fewer rows than devices) and rejects mismatched X and y.", "",
                  split_batch)


def check_allreduce(allreduce):
    """Exercise 6: ``allreduce(data)`` sums a list of per-device tensors in place, then a
    from-scratch data-parallel training step with it is compared with one device."""
    if allreduce is None:
        return report(None, "", "", None)
    if not callable(allreduce):
        return report(False, "", "pass the function itself (its name, without calling it).", 0)
    devices = dltools.replica_devices()
    # 1. the sum, on every device, in place
    gen = torch.Generator().manual_seed(1)
    for k in (2, 3, 4):
        devs = (devices * k)[:k]
        values = [torch.randn(2, 3, generator=gen, dtype=torch.float64) for _ in devs]
        total = sum(values)
        data = [v.clone().to(d) for v, d in zip(values, devs)]
        objects = [id(t) for t in data]
        _, err = _call(allreduce, data)
        if err:
            return report(False, "", err, allreduce)
        if [id(t) for t in data] != objects:
            return report(False, "", "the list must hold the same tensors afterwards: update them "
                          "in place (t[:] = ...), since they are the replicas' .grad tensors.",
                          allreduce)
        if torch.allclose(data[0].cpu(), total / k):
            return report(False, "", "that is the mean; d2l's allreduce sums (its sgd divides by "
                          "the batch size).", allreduce)
        if not torch.allclose(data[0].cpu(), total):
            return report(False, "", f"with {k} tensors, data[0] should hold their sum.", allreduce)
        if not all(torch.allclose(t.cpu(), total) for t in data):
            return report(False, "", "every tensor must end up holding the sum (copy it back to "
                          "each device), or the replicas drift apart.", allreduce)
        if [t.device for t in data] != list(devs):
            return report(False, "", "each tensor must stay on its own device.", allreduce)
    # 2. the same on distinct (perhaps simulated) devices: adding across them without .to() raises
    for k in (2, 3):
        gpus, mode = _placement_devices(k)
        with mode:
            data = [torch.zeros(2, 3, device=d) for d in gpus]
            objects = [id(t) for t in data]
            _, err = _call(allreduce, data)
            devices_after = [t.device for t in data]
        if err:
            return report(False, "", f"on {_named(gpus)} {err}. On GPUs, tensors must be on "
                          "the same device to be added: move one with .to(device) first.",
                          allreduce)
        if [id(t) for t in data] != objects or devices_after != gpus:
            return report(False, "", f"on {_named(gpus)} each tensor must stay, updated in "
                          "place, on its own device.", allreduce)
    # 3. d2l's train_batch with it: equal to a full-batch step on one device
    torch.manual_seed(0)
    X, y = torch.randn(10, 4), torch.randint(0, 3, (10,))
    W, b = torch.randn(4, 3) * 0.1, torch.zeros(3)
    params = [W.clone().requires_grad_(), b.clone().requires_grad_()]
    # clone(): on a CPU .to(d) returns the same tensor, and replicas sharing memory with
    # `params` would make the comparison below compare a tensor with itself.
    device_params = [[p.detach().clone().to(d).requires_grad_() for p in params]
                     for d in devices]
    loss = nn.CrossEntropyLoss(reduction="none")
    X_shards, y_shards = dltools.split_batch(X.to(devices[0]), y.to(devices[0]), devices)
    used = device_params[:len(X_shards)]
    for Xs, ys, (Wd, bd) in zip(X_shards, y_shards, used):
        loss(Xs @ Wd + bd, ys).sum().backward()
    with torch.no_grad():
        for i in range(len(params)):
            _, err = _call(allreduce, [p[i].grad for p in used])
            if err:
                return report(False, "", err, allreduce)
    for p in used:
        dltools.sgd(p, 0.5, X.shape[0])
    loss(X @ params[0] + params[1], y).sum().backward()
    dltools.sgd(params, 0.5, X.shape[0])
    ok = all(torch.allclose(p.detach().cpu(), q, atol=1e-6) for dp in used
             for p, q in zip(dp, params))
    return report(ok, "your allreduce sums the gradients in place on every device; one "
                  f"from-scratch data-parallel step on {len(used)} replicas leaves every replica's "
                  "parameters where a full-batch step on one device leaves them.",
                  "the replicas' parameters after one step differ from a full-batch step on one "
                  "device.", allreduce)
