"""The notebook's runs, grouped: one launch per world size runs every technique.

Starting worker processes costs seconds each time, so :func:`run_all` runs DDP, ZeRO-1, FSDP2
(ZeRO-2 and ZeRO-3), tensor parallelism, (with 2 or more ranks) the pipeline schedules, (with
4, 6, ... ranks) FSDP2 and tensor parallelism on a 2-D mesh and (with 2 ranks) the timings of
the alpha-beta model (:func:`~dltools.beyond.overlap.overlap_run`), one after the other in the same
process group, and returns all their results (``tests/test_beyond_runs.py`` runs it).
"""
import torch
import torch.distributed as dist

from ..devices import rank_device
from .fsdp import fsdp_run
from .memory import per_rank_bytes
from .mesh2d import fsdp_tp_run
from .model import make_model
from .overlap import overlap_run
from .pipeline import pipeline_run
from .tensor_parallel import tp_run
from .zero import zero1_run

__all__ = ["CONFIG", "RUNNERS", "STAGES", "predicted_memory", "run_all"]

# width and depth divisible by 4: whole shards at 1, 2 and 4 ranks; batch rows divisible by 4 too
CONFIG = {"width": 64, "depth": 4, "batch": 32, "steps": 2, "lr": 1e-3,
          "pipeline": {"width": 256, "depth": 4, "batch": 256, "schedules": ("gpipe", "1f1b"),
                       "repeats": 2},   # the second step is timed: no first-call costs
          "overlap": {"width": 64}}      # at 2 ranks: one block's all-gather against its forward


RUNNERS = {"ddp": lambda c: zero1_run(**c, shard_optimizer=False),
           "zero1": lambda c: zero1_run(**c),
           "fsdp_zero2": lambda c: fsdp_run(**c, reshard_after_forward=False),
           "fsdp_zero3": lambda c: fsdp_run(**c, reshard_after_forward=True),
           "tp": lambda c: tp_run(**c)}


def run_all(config):
    """Every technique on this process group; a dict of this rank's results.

    ``config["techniques"]`` (default: all of :data:`RUNNERS`) picks the techniques; the pipeline
    runs when there are 2 or more ranks and ``config["pipeline"]`` is set, and ``"fsdp_tp"``
    (:func:`~dltools.beyond.mesh2d.fsdp_tp_run`, pairs of tensor-parallel ranks) when there are 4
    or more, an even number, and ``config.get("mesh2d", True)``; ``"overlap"``
    (:func:`~dltools.beyond.overlap.overlap_run` with ``config["overlap"]``) at 2 ranks, when set.
    """
    common = {k: config[k] for k in ("width", "depth", "batch", "steps", "lr")}
    device = rank_device()
    result = {}
    for name in config.get("techniques", RUNNERS):
        if device.type == "cuda":   # each technique's ``allocated`` peak is its own
            torch.cuda.reset_peak_memory_stats(device)
        result[name] = RUNNERS[name](common)
    result["pipeline"] = result["fsdp_tp"] = result["overlap"] = None
    world = dist.get_world_size()
    if world >= 4 and world % 2 == 0 and config.get("mesh2d", True):
        result["fsdp_tp"] = fsdp_tp_run(**common)
    if world == 2 and config.get("overlap"):   # 2 ranks: on 2 cores, one core each
        result["overlap"] = overlap_run(**config["overlap"])
    if world > 1 and config.get("pipeline"):
        pp = dict(config["pipeline"])
        pp.setdefault("microbatches", (world, 2 * world, 4 * world))   # 1F1B needs m >= p
        result["pipeline"] = pipeline_run(**pp)
    return result


#: the ZeRO stage each technique's *resting* state (after a step) matches: FSDP2 keeps only its
#: shards between steps whatever ``reshard_after_forward`` says (that only changes what it holds
#: between forward and backward), and tensor parallelism splits weights like stage 3
STAGES = {"ddp": 0, "zero1": 1, "fsdp_zero2": 3, "fsdp_zero3": 3, "tp": 3}


def predicted_memory(name, config, world_size):
    """Predicted per-rank bytes ``{'params', 'grads', 'optimizer', 'total'}`` of technique
    ``name`` from the formula :func:`~dltools.beyond.memory.per_rank_bytes`.

    Tensor parallelism keeps each block's ``down.bias`` whole on every rank (a ``Replicate``
    parameter: each rank adds bias / N to its partial sum before the all-reduce), so only the rest
    is divided. FSDP2's prediction is for its busiest rank
    (rank 0), which holds ``ceil(rows / N)`` rows of each parameter.

    >>> p = predicted_memory("fsdp_zero3", {"width": 30, "depth": 1}, 4)["params"]
    >>> p == 4 * (30 * 30 + 30 + 8 * 120 + 8)   # up: 120 rows -> 30; down: 30 rows -> 8
    True

    >>> predicted_memory("zero1", CONFIG, 4)["optimizer"] == 8 * 132352 / 4
    True
    """
    model = make_model(config["width"], config["depth"])
    num_params = sum(p.numel() for p in model.parameters())
    if name.startswith("fsdp"):
        # FSDP2 gives rank 0 ceil(rows / N) rows of every parameter (torch.chunk on dim 0): with
        # rows not divisible by N the shards are uneven, and rank 0 holds the most
        num_params = world_size * sum(-(-p.shape[0] // world_size) * (p.numel() // p.shape[0])
                                      for p in model.parameters())
    if name != "tp":
        return per_rank_bytes(num_params, world_size, stage=STAGES[name])
    whole = config["depth"] * config["width"]
    split = per_rank_bytes(num_params - whole, world_size, stage=3)
    kept = per_rank_bytes(whole, 1, stage=0)
    return {k: split[k] + kept[k] for k in split}
