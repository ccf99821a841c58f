"""Beyond DDP: the techniques of notebook 05, one short module each, run for real on CPUs.

* :mod:`.memory` — where training memory goes: bytes of parameters, gradients and optimizer state
  measured from the tensors a rank holds, the formulas they are checked against, and a counter of
  the bytes every collective moves;
* :mod:`.zero` — ZeRO-1: DDP plus ``ZeroRedundancyOptimizer``;
* :mod:`.fsdp` — ZeRO-2/3 with FSDP2's ``fully_shard``;
* :mod:`.tensor_parallel` — an MLP split column-wise then row-wise (``ColwiseParallel``,
  ``RowwiseParallel``);
* :mod:`.pipeline` — ``torch.distributed.pipelining`` with GPipe and 1F1B, timed per microbatch;
* :mod:`.runs` — the workers the notebook launches, one launch per world size.

Every worker compares its result with the same model trained in one process.
"""
