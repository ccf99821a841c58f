"""Pipeline parallelism with ``torch.distributed.pipelining``: GPipe and 1F1B, timed for real.

The model's blocks are cut into ``p`` consecutive stages, one per rank. The batch is split into
``m`` microbatches; stage ``s`` runs microbatch ``i`` once stage ``s - 1`` has sent it the
activations (and, in backward, once stage ``s + 1`` has sent back their gradient). GPipe runs all
forwards, then all backwards; 1F1B starts backwards as soon as it can, so a stage holds the
activations of at most ``p - s`` microbatches instead of ``m``. Both leave every stage idle for
``p - 1`` of the ``m + p - 1`` slots: the bubble.
Call :func:`pipeline_run` inside a process group, on every rank. On GPUs its times are those of
the host's calls (kernels run asynchronously), so the wall-clock timeline is only indicative
there; the order of the events, which :func:`max_in_flight` and :func:`logical_timeline` use, is
exact.
"""
import copy
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

from ..devices import rank_device
from .model import make_batch, make_model, max_rel_diff

__all__ = ["SCHEDULES", "bubble_fraction", "max_in_flight", "pipeline_run", "stage_blocks"]

SCHEDULES = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}


def stage_blocks(model, stage, num_stages):
    """The consecutive blocks of ``model`` (an ``nn.Sequential``) that stage ``stage`` runs.

    >>> stage_blocks(make_model(8, 3), 0, 2)
    Traceback (most recent call last):
    ...
    ValueError: 3 blocks cannot be split into 2 equal stages: use a depth divisible by 2
    """
    if len(model) % num_stages:
        raise ValueError(f"{len(model)} blocks cannot be split into {num_stages} equal stages: "
                         f"use a depth divisible by {num_stages}")
    per = len(model) // num_stages
    return model[stage * per:(stage + 1) * per]


def _timed(stage, events, kind, method):
    """Wrap ``stage.<method>`` to record when this rank computed which microbatch."""
    inner = getattr(stage, method)

    def wrapper(chunk_id, *args, **kwargs):
        start = time.perf_counter()   # CLOCK_MONOTONIC: one clock for all processes of a machine
        try:
            return inner(chunk_id, *args, **kwargs)
        finally:
            events.append({"stage": stage.stage_index, "what": kind, "microbatch": chunk_id,
                           "start": start, "end": time.perf_counter()})
    setattr(stage, method, wrapper)


def pipeline_run(width=128, depth=4, batch=64, microbatches=(4,), schedules=("gpipe", "1f1b"),
                 repeats=1):
    """Run one training step per (schedule, m) on ``p = world size`` stages; time every microbatch.

    Returns, per ``(schedule, m)``: this rank's ``events`` (forward/backward of each microbatch,
    start and end in seconds, of the last of ``repeats`` steps), its ``loss`` (last stage only),
    and ``grad_diff``: this stage's gradients against the same blocks' in single-process training
    on the whole batch (relative to the largest).
    """
    rank, world = dist.get_rank(), dist.get_world_size()
    if depth % world:
        raise ValueError(f"depth {depth} cannot be split into {world} equal stages: use a depth "
                         f"divisible by the world size")
    device = rank_device()
    model, (x, y) = make_model(width, depth), make_batch(batch, width)
    ref = copy.deepcopy(model)
    ref_loss = nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()
    ref_grads = [p.grad for p in stage_blocks(ref, rank, world).parameters()]
    x, y = x.to(device), y.to(device)
    runs = {}
    for name in schedules:
        for m in microbatches:
            part = copy.deepcopy(stage_blocks(model, rank, world)).to(device)
            stage = PipelineStage(part, rank, world, device)
            # the loss averages over a microbatch; scale_grads (default) divides the summed
            # gradients by m, so they equal the full-batch mean's
            schedule = SCHEDULES[name](stage, m, loss_fn=nn.functional.mse_loss)
            for _ in range(repeats):
                events, losses = [], []
                part.zero_grad()
                _timed(stage, events, "forward", "forward_one_chunk")
                _timed(stage, events, "backward", "backward_one_chunk")
                dist.barrier()
                if rank == 0:
                    schedule.step(x)
                elif rank == world - 1:
                    # return_outputs=False: by default the last stage also keeps every
                    # microbatch's output until the next step (only the losses are used)
                    schedule.step(target=y, losses=losses, return_outputs=False)
                else:
                    schedule.step()
                del stage.forward_one_chunk, stage.backward_one_chunk   # unwrap
            grads = [p.grad for p in part.parameters()]
            loss = torch.stack(losses).mean().item() if losses else None
            runs[(name, m)] = {"events": events, "loss": loss, "ref_loss": ref_loss.item(),
                               "grad_diff": max_rel_diff(grads, ref_grads)}
    return {"rank": rank, "world_size": world, "runs": runs}


def bubble_fraction(events):
    """Measured bubble: the share of the run (first start to last end, over all stages) in which
    a stage computed nothing, averaged over stages.

    >>> ev = [dict(stage=0, start=0, end=1), dict(stage=1, start=1, end=2)]
    >>> bubble_fraction(ev)   # each stage idle half of the 2 s
    0.5
    """
    t0, t1 = min(e["start"] for e in events), max(e["end"] for e in events)
    stages = sorted({e["stage"] for e in events})
    busy = [sum(e["end"] - e["start"] for e in events if e["stage"] == s) for s in stages]
    return sum(1 - b / (t1 - t0) for b in busy) / len(stages)


def max_in_flight(events, stage):
    """Most microbatches whose activations ``stage`` held at once (forwarded, not yet backwarded),
    read from the order in which the stage really ran them.

    >>> ev = [dict(stage=0, what=w, start=t) for t, w in enumerate(['forward'] * 3 + ['backward'])]
    >>> max_in_flight(ev, 0)
    3
    """
    held = peak = 0
    for e in sorted((e for e in events if e["stage"] == stage), key=lambda e: e["start"]):
        held += 1 if e["what"] == "forward" else -1
        peak = max(peak, held)
    return peak


def logical_timeline(events, forward_cost=1, backward_cost=2):
    """Replay the order each stage really ran its microbatches in, on a clock where a forward
    takes ``forward_cost`` and a backward ``backward_cost`` units and messages are instant.

    A forward of microbatch ``i`` on stage ``s`` starts when stage ``s`` is free and stage
    ``s - 1`` has finished forwarding ``i``; a backward, when stage ``s + 1`` has finished its
    backward of ``i``. Returns events with ``start``/``end`` in units: the schedule with the noise
    of a shared CPU taken out (wall-clock times on 2 busy cores say more about the machine).

    >>> ev = [dict(stage=s, what=w, microbatch=0, start=t) for t, (s, w) in enumerate(
    ...     [(0, 'forward'), (1, 'forward'), (1, 'backward'), (0, 'backward')])]
    >>> [(e['stage'], e['what'], e['start'], e['end']) for e in logical_timeline(ev)]
    [(0, 'forward', 0, 1), (0, 'backward', 4, 6), (1, 'forward', 1, 2), (1, 'backward', 2, 4)]
    """
    stages = sorted({e["stage"] for e in events})
    order = {s: sorted((e for e in events if e["stage"] == s), key=lambda e: e["start"])
             for s in stages}
    done, free, pos, out = {}, dict.fromkeys(stages, 0), dict.fromkeys(stages, 0), []
    cost = {"forward": forward_cost, "backward": backward_cost}
    while any(pos[s] < len(order[s]) for s in stages):
        progressed = False
        for s in stages:
            while pos[s] < len(order[s]):
                e = order[s][pos[s]]
                dep = (s - 1, "forward") if e["what"] == "forward" else (s + 1, "backward")
                if dep[0] in free and (dep[0], dep[1], e["microbatch"]) not in done:
                    break   # waits for a message not sent yet
                ready = done.get((dep[0], dep[1], e["microbatch"]), 0)
                start = max(free[s], ready)
                free[s] = start + cost[e["what"]]
                done[(s, e["what"], e["microbatch"])] = free[s]
                out.append({**e, "start": start, "end": free[s]})
                pos[s] += 1
                progressed = True
        if not progressed:
            raise ValueError("the recorded orders deadlock: is an event missing?")
    return sorted(out, key=lambda e: (e["stage"], e["start"]))
