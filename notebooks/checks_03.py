"""Checks for the exercises of notebook 03 (from DataParallel to DistributedDataParallel).

Each check prints whether the answer is right, with a hint when it is not, and returns a Verdict;
``None`` means "not answered yet". Expected values are worked out inside the functions (with
``dltools.traffic`` and PyTorch's own ``DistributedSampler``), so that Jupyter's help (Shift-Tab)
does not show them. The coding exercise's check runs the learner's worker in two real processes
(``dltools.distributed.launch``, gloo) and compares it with single-process training.
"""
import collections
import inspect
import numbers
import re

import torch
from torch import nn
from torch.utils.data import TensorDataset
from torch.utils.data.distributed import DistributedSampler

from dltools.exercises import close_enough, int_list, is_int, plain, report
from dltools.traffic import collective_bytes


def check_ring_bytes_per_rank(answer):
    """Exercise 1: MB each GPU sends per step in a ring all-reduce of the gradients."""
    answer = plain(answer)
    gradient_mb, world_size = 100, 8
    ring = collective_bytes("all_reduce", gradient_mb, world_size)
    naive = collective_bytes("naive_all_reduce", gradient_mb, world_size)
    half = collective_bytes("reduce_scatter", gradient_mb, world_size)
    expected = ring["sent_per_rank"]
    numeric = isinstance(answer, numbers.Real) and not isinstance(answer, bool)
    if answer is not None and not numeric:
        hint = "answer with a number of MB."
    elif close_enough(answer, naive["root_sent"]):
        hint = ("that is what the root sends in the naive all-reduce (a copy of the sum to each "
                "of the others). In the ring, every rank sends 2 (N - 1) chunks of size / N.")
    elif close_enough(answer, half["sent_per_rank"]):
        hint = "that is the reduce-scatter half only; the all-gather half sends as much again."
    elif close_enough(answer, ring["total"]):
        hint = "that is the total over all links; the question asks for one GPU."
    else:
        hint = "in the ring, every rank sends 2 (N - 1) chunks of size / N."
    return report(None if answer is None else close_enough(answer, expected),
                  f"2 (N - 1) / N x size = 2 x {world_size - 1} / {world_size} x {gradient_mb} MB "
                  f"= {expected:g} MB: less than twice the gradients, whatever N is.", hint, answer)


def check_per_rank_batch(answer):
    """Exercise 2: examples each process puts through the model per step."""
    answer = plain(answer)
    global_batch, world_size = 96, 4
    expected = global_batch // world_size
    if answer is not None and not is_int(answer):
        hint = "answer with a whole number (an int): a batch has no fractions."
    elif answer == global_batch:
        hint = "--batch-size is the global batch; look at the DataLoader in scripts/train_ddp.py."
    else:
        hint = "each process takes its share of the global batch."
    return report(None if answer is None else (is_int(answer) and answer == expected),
                  f"the script splits the global batch: {global_batch} / {world_size} = {expected} "
                  "examples per process and step.", hint, answer)


def check_shard_without_set_epoch(answer):
    """Exercise 3: how many different examples rank 1 sees in 10 epochs when the training loop
    never calls ``sampler.set_epoch(epoch)`` (96 examples, 4 ranks, shuffle=True)."""
    answer = plain(answer)
    length, world_size, epochs, rank = 96, 4, 10, 1

    def different(reseed):
        sampler = DistributedSampler(range(length), num_replicas=world_size, rank=rank,
                                     shuffle=True, seed=0)
        seen = set()
        for epoch in range(epochs):
            if reseed:
                sampler.set_epoch(epoch)
            seen |= set(sampler)
        return len(seen)

    expected, with_set_epoch = different(False), different(True)
    if answer is not None and not is_int(answer):
        hint = "answer with a whole number (an int): a count of examples."
    elif answer in (length, with_set_epoch):
        hint = ("that needs a new permutation every epoch. Which argument of the permutation "
                "changes from one epoch to the next, and who changes it?")
    elif answer == epochs * length // world_size:
        hint = "that counts visits; the question asks for different examples."
    else:
        hint = ("each epoch, rank 1 takes every 4th index of one permutation of the 96. "
                "Does the permutation change between epochs here?")
    return report(None if answer is None else (is_int(answer) and answer == expected),
                  f"without set_epoch the permutation is the same every epoch, so rank 1 sees the "
                  f"same {expected} examples ({length} / {world_size}) ten times; with it, "
                  f"{with_set_epoch} different ones.", hint, answer)


def check_padded_shards(answer):
    """Exercise 4: (indices per rank, indices that appear twice in one epoch)."""
    length, world_size = 11, 3   # not the 10 on 4 that notebook 03 prints
    shards = [list(DistributedSampler(range(length), num_replicas=world_size, rank=r,
                                      shuffle=False)) for r in range(world_size)]
    seen = [i for shard in shards for i in shard]
    expected = [len(shards[0]), len(seen) - len(set(seen))]
    values = int_list(answer)
    if answer is not None and (values is None or len(values) != 2):
        hint = "answer with two whole numbers: (indices per rank, indices seen twice)."
    elif values is not None and values[0] == length // world_size:
        hint = ("that is drop_last=True, which drops the tail; by default the sampler pads "
                "instead: every rank gets the same number of indices.")
    else:
        hint = ("the sampler makes every rank's share equal: it rounds the length up to a multiple "
                "of the number of ranks and repeats indices from the start to fill the gap.")
    return report(None if answer is None else values == expected,
                  f"ceil({length} / {world_size}) = {expected[0]} indices per rank, "
                  f"{expected[0] * world_size} in all: {expected[1]} "
                  f"{'index appears' if expected[1] == 1 else 'indices appear'} twice.",
                  hint, answer)


# ------------------------------------------------------------------ coding exercise

_WORLD, _GLOBAL_BATCH, _LR, _EPOCHS, _ROWS = 2, 12, 0.5, 2, 48
#: Seconds the two workers of exercise 5 may take together.
_DEADLINE = 120
#: Seconds a rank waits at a collective for the other one.
_TIMEOUT = 60


def _dataset():
    g = torch.Generator().manual_seed(3)
    X = torch.randn(_ROWS, 8, generator=g)
    y = (X[:, :3].argmax(dim=1) + (X[:, 3] > 1).long()) % 3
    return TensorDataset(X, y)


def _reference(dataset, global_batch, reshuffle=True):
    """One process, the full global batch, the permutation DistributedSampler draws each epoch."""
    torch.manual_seed(0)
    model = nn.Linear(8, 3)
    opt = torch.optim.SGD(model.parameters(), lr=_LR)
    X, y = dataset.tensors
    for epoch in range(_EPOCHS):
        g = torch.Generator().manual_seed(epoch if reshuffle else 0)   # seed 0 + epoch
        order = torch.randperm(len(X), generator=g)
        for start in range(0, len(X), global_batch):
            idx = order[start:start + global_batch]
            opt.zero_grad()
            nn.functional.cross_entropy(model(X[idx]), y[idx]).backward()
            opt.step()
    return model.state_dict()


def _close(state, ref):
    return (isinstance(state, dict) and set(state) == set(ref)
            and all(isinstance(state[k], torch.Tensor) and state[k].shape == ref[k].shape
                    and torch.allclose(state[k].float(), ref[k], atol=1e-5) for k in ref))


def check_ddp_worker(worker):
    """Exercise 5: run your worker in 2 processes and compare with single-process training."""
    from dltools.ddp_internals import run_worker_for_check
    from dltools.distributed import WorkerError, launch

    if worker is None:
        return report(None, "", "", None)
    if not inspect.isfunction(worker):
        return report(False, "", "pass the function itself (its name, without calling it).", 0)
    try:
        source = inspect.getsource(worker)
    except (OSError, TypeError):
        return report(False, "", "define the worker with def in a cell, then pass it.", 0)
    dataset = _dataset()
    try:
        results = launch(run_worker_for_check, _WORLD, source, worker.__name__, dataset,
                         _GLOBAL_BATCH, _LR, _EPOCHS, timeout=_TIMEOUT, deadline=_DEADLINE)
    except WorkerError as err:
        last = (err.worker_traceback.strip().splitlines() or [str(err)])[-1]
        if last.startswith("NameError"):
            last += (" (the worker runs in new processes from its own source alone: import what "
                     "it uses, torch, nn and the rest, inside the function)")
        # launch's own explanation of a timeout or a peer that left (which rank to look at)
        why = [line.strip() for line in str(err).splitlines()
               if line.startswith(("A worker waited", "Rank(s)"))]
        said = f"a worker raised: {last}" + ("" if last.endswith(".") else ".")
        return report(False, "", " ".join([said, *why]), 0)
    except TimeoutError:
        return report(False, "", f"the workers did not finish within {_DEADLINE} s (a right one "
                      "takes a few seconds) and were stopped: look for a loop that never ends, "
                      "or a rank that waits for a collective the other rank never calls.", 0)
    ref = _reference(dataset, _GLOBAL_BATCH)
    states, seen = [r[0] for r in results], [r[1] for r in results]
    state = states[0]
    if not all(isinstance(s, dict) and all(isinstance(v, torch.Tensor) for v in s.values())
               for s in states):
        return report(False, "", "return the plain model's state_dict (a dict of tensors) on "
                      "every rank.", 0)
    if any(k.startswith("module.") for k in state):
        return report(False, "", "the keys start with 'module.': return model.module.state_dict(), "
                      "the plain model inside the DDP wrapper.", 0)
    if any(read and len(read) != _EPOCHS * _ROWS // _WORLD for read in seen) or (
            all(seen) and collections.Counter(i for read in seen for i in read)
            != collections.Counter({i: _EPOCHS for i in range(_ROWS)})):
        most = max(len(read) for read in seen) // _EPOCHS
        return report(False, "", f"a rank read {most} examples per epoch; with {_WORLD} "
                      f"processes each should read its own {_ROWS // _WORLD} of the {_ROWS}, the "
                      "ranks together every example once: shard the data with "
                      "DistributedSampler(dataset, shuffle=True, seed=0), passed as sampler=.", 0)
    if not all(s.keys() == state.keys() and all(torch.equal(s[k], state[k]) for k in state)
               for s in states):
        if re.search(r"\b(DDP|DistributedDataParallel)\(", source):   # a wrapper was made
            return report(False, "", "the two ranks end with different parameters: their "
                          "gradients were not averaged. You made a DDP wrapper, but the training "
                          "step does not go through it: call the wrapper (its forward sets up the "
                          "gradient averaging), not the plain model inside it.", 0)
        return report(False, "", "the two ranks end with different parameters: their gradients "
                      "were not averaged. Wrap the model in DDP.", 0)
    if _close(state, ref):
        return report(True, f"both ranks end identical and equal to one process training on the "
                      f"global batch of {_GLOBAL_BATCH} ({_EPOCHS} epochs, {_ROWS} examples, "
                      "reshuffled every epoch).", "", 0)
    per_rank = _GLOBAL_BATCH // _WORLD
    if _close(state, _reference(dataset, _GLOBAL_BATCH, reshuffle=False)):
        hint = "the ranks agree, but every epoch used the same order: call set_epoch(epoch)."
    elif _close(state, _reference(dataset, _GLOBAL_BATCH * _WORLD)):
        hint = (f"each rank used the whole global batch: its loader should take {_GLOBAL_BATCH} / "
                f"{_WORLD} = {per_rank} examples per step.")
    else:
        hint = ("the ranks agree, but not with one process on the global batch: shard the data "
                "with DistributedSampler(dataset, shuffle=True, seed=0), per-rank batches of "
                "global / world size, and set_epoch every epoch.")
    return report(False, "", hint, 0)

