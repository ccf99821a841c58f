"""Check functions for the notebooks' exercises.

Each ``check_*`` takes the learner's answer, prints whether it is right (with a hint when it is not)
and returns True/False. ``None`` means "not answered yet". Sections follow the notebooks; each
notebook adds its own section below.
"""
import math

import torch

__all__ = ["report"]


def report(ok, right, hint, answer=None):
    """Print the verdict on an answer and return it as a bool.

    >>> report(True, 'well done', 'try again')
    Correct: well done
    True
    >>> report(False, 'well done', 'try again', answer=None)
    Not answered yet: replace None with your answer.
    False
    """
    if ok is None or (answer is None and not ok):
        print("Not answered yet: replace None with your answer.")
        return False
    print(f"Correct: {right}" if ok else f"Not yet: {hint}")
    return bool(ok)


def _same_shape(answer, expected):
    try:
        return tuple(answer) == tuple(expected)
    except TypeError:
        return False


# ------------------------------------------------------------------ 00 getting started


def check_batches_per_epoch(answer, num_examples=60000, batch_size=256):
    """How many batches does one pass over ``num_examples`` take at ``batch_size``?

    >>> check_batches_per_epoch(235)
    Correct: 60,000 / 256 = 234.4, and the last, smaller batch counts too: 235.
    True
    >>> check_batches_per_epoch(234)
    Not yet: the last batch is smaller than the others but still a batch (round up).
    False
    """
    expected = math.ceil(num_examples / batch_size)
    return report(answer == expected,
                  f"{num_examples:,} / {batch_size} = {num_examples / batch_size:.1f}, and the last, "
                  f"smaller batch counts too: {expected}.",
                  "the last batch is smaller than the others but still a batch (round up).", answer)


def check_label_index(answer, name="sneaker"):
    """Which class index does Fashion-MNIST use for ``name``?

    >>> check_label_index(7)
    Correct: index 7 is 'sneaker'.
    True
    """
    from .data import FASHION_MNIST_LABELS
    expected = FASHION_MNIST_LABELS.index(name)
    return report(answer == expected, f"index {expected} is {name!r}.",
                  "look at dltools.get_fashion_mnist_labels(range(10)).", answer)


def check_resized_batch_shape(answer, batch_size=256, resize=64):
    """Shape of the first training batch with ``load_data_fashion_mnist(batch_size, resize=resize)``.

    >>> check_resized_batch_shape((256, 1, 64, 64))
    Correct: (batch, channels, height, width) = (256, 1, 64, 64).
    True
    >>> check_resized_batch_shape(torch.Size([256, 64, 64]))
    Not yet: images keep a channel dimension (grayscale: 1) between batch and height.
    False
    """
    expected = (batch_size, 1, resize, resize)
    return report(_same_shape(answer, expected) if answer is not None else None,
                  f"(batch, channels, height, width) = {expected}.",
                  "images keep a channel dimension (grayscale: 1) between batch and height.", answer)


# ------------------------------------------------------------------ 01 data parallelism, a first look


def _int_list(answer):
    """``answer`` as a list of ints, or None when it is not a sequence of whole numbers."""
    try:
        values = list(answer)
    except TypeError:
        return None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        return None
    return values


def _chunk_feedback(answer, batch_size, num_devices):
    from .parallel import chunk_sizes
    expected = chunk_sizes(batch_size, num_devices)
    values = _int_list(answer) if answer is not None else None
    if answer is not None and values is None:
        hint = "give a list of whole numbers, one per replica that gets rows, e.g. [3, 3, 2]."
    elif values is not None and sum(values) != batch_size:
        hint = f"the chunks must add up to the batch: {sum(values)} != {batch_size}."
    else:
        hint = (f"torch.chunk gives every chunk ceil({batch_size}/{num_devices}) = "
                f"{-(-batch_size // num_devices)} rows, in order, and the last one what is left; "
                "replicas without rows do not run.")
    return report(values == expected if answer is not None else None,
                  f"chunk_sizes({batch_size}, {num_devices}) = {expected}.", hint, answer)


def check_dp_chunk_sizes(answer, batch_size=50, num_devices=4):
    """Rows each device gets when DataParallel splits a batch of ``batch_size`` over ``num_devices``.

    >>> check_dp_chunk_sizes([13, 13, 13, 11])
    Correct: chunk_sizes(50, 4) = [13, 13, 13, 11].
    True
    >>> check_dp_chunk_sizes([12, 12, 13, 13])
    Not yet: torch.chunk gives every chunk ceil(50/4) = 13 rows, in order, and the last one what is left; replicas without rows do not run.
    False
    """
    return _chunk_feedback(answer, batch_size, num_devices)


def check_dp_last_batch(answer, num_examples=100, batch_size=32, num_devices=3):
    """Chunk sizes of the last, smaller batch of an epoch (``num_examples`` rows, ``batch_size``).

    >>> check_dp_last_batch([2, 2])
    Correct: chunk_sizes(4, 3) = [2, 2].
    True
    >>> check_dp_last_batch([2, 1, 1])
    Not yet: torch.chunk gives every chunk ceil(4/3) = 2 rows, in order, and the last one what is left; replicas without rows do not run.
    False
    """
    last = num_examples % batch_size or batch_size
    return _chunk_feedback(answer, last, num_devices)


def check_dp_wrapped_key(answer):
    """Key of the last layer's bias in ``nn.DataParallel(nn.Sequential(nn.Linear(10, 20), nn.ReLU(),
    nn.Linear(20, 5))).state_dict()``.

    >>> check_dp_wrapped_key('module.2.bias')
    Correct: the wrapper stores the network as .module, so every key gains 'module.': 'module.2.bias'.
    True
    >>> check_dp_wrapped_key('2.bias')
    Not yet: that is the key of the plain network; what is the wrapped network's attribute called?
    False
    """
    from torch import nn
    net = nn.DataParallel(nn.Sequential(nn.Linear(10, 20), nn.ReLU(), nn.Linear(20, 5)))
    expected = list(net.state_dict())[-1]
    if isinstance(answer, str) and answer == expected.removeprefix("module."):
        hint = "that is the key of the plain network; what is the wrapped network's attribute called?"
    else:
        hint = ("Sequential names its layers 0, 1, 2 (ReLU is number 1 and has no parameters); print "
                "list(net.state_dict()) to see the keys.")
    return report(answer == expected if answer is not None else None,
                  f"the wrapper stores the network as .module, so every key gains 'module.': {expected!r}.",
                  hint, answer)


def check_dp_visible_gpus(answer, visible="5,2"):
    """``CUDA_VISIBLE_DEVICES=5,2`` on an 8-GPU machine: ``(torch.cuda.device_count(), physical GPU
    behind cuda:0)``.

    >>> check_dp_visible_gpus((2, 5))
    Correct: 2 GPUs are visible, renumbered in the order listed: cuda:0 is physical GPU 5, cuda:1 is GPU 2.
    True
    >>> check_dp_visible_gpus((2, 2))
    Not yet: the process sees only the listed GPUs, numbered from 0 in the order the variable lists them.
    False
    """
    listed = [int(i) for i in visible.split(",")]
    expected = (len(listed), listed[0])
    names = ", ".join(f"cuda:{j} is {'physical GPU ' if j == 0 else 'GPU '}{i}" for j, i in enumerate(listed))
    values = _int_list(answer) if answer is not None else None
    if answer is not None and (values is None or len(values) != 2):
        hint = "answer with two whole numbers: (device count, physical index of cuda:0)."
    else:
        hint = ("the process sees only the listed GPUs, numbered from 0 in the order the variable "
                "lists them.")
    return report(values == list(expected) if answer is not None else None,
                  f"{len(listed)} GPUs are visible, renumbered in the order listed: {names}.", hint, answer)


# ------------------------------------------------------------------ 02 inside nn.DataParallel


def check_scalar_loss_shape(answer, batch_size=6, num_devices=4):
    """A model returns a 0-dim loss; what shape does DataParallel give back for this batch?

    >>> check_scalar_loss_shape((3,))
    Correct: 6 rows on 4 devices are chunks [2, 2, 2]: 3 replicas run, so 3 losses come back.
    True
    >>> check_scalar_loss_shape((4,))
    Not yet: one loss per replica that ran; torch.chunk makes chunks of ceil(6/4) rows, so not every device gets rows.
    False
    """
    from .parallel import chunk_sizes
    sizes = chunk_sizes(batch_size, num_devices)
    if isinstance(answer, int) and not isinstance(answer, bool):
        answer_shape = (answer,)
    else:
        try:
            answer_shape = tuple(int(a) for a in answer) if answer is not None else None
        except (TypeError, ValueError):
            answer_shape = ()
    ok = answer_shape == (len(sizes),) if answer is not None else None
    return report(ok, f"{batch_size} rows on {num_devices} devices are chunks {sizes}: {len(sizes)} "
                      f"replicas run, so {len(sizes)} losses come back.",
                  f"one loss per replica that ran; torch.chunk makes chunks of "
                  f"ceil({batch_size}/{num_devices}) rows, so not every device gets rows.", answer)


def check_replica_loss_weights(answer, batch_size=10, num_devices=3):
    """Weights that turn per-replica mean losses into the full-batch mean loss.

    >>> check_replica_loss_weights([0.4, 0.4, 0.2])
    Correct: chunks [4, 4, 2] of 10 rows: weight each replica's mean by its share of the rows.
    True
    >>> check_replica_loss_weights([1/3, 1/3, 1/3])
    Not yet: a plain average gives the 2 rows of the small last chunk as much say as the 4 of the others.
    False
    """
    from .parallel import chunk_sizes
    sizes = chunk_sizes(batch_size, num_devices)
    expected = torch.tensor(sizes, dtype=torch.float64) / batch_size
    ok = None
    if answer is not None:
        try:
            got = torch.as_tensor([float(a) for a in answer], dtype=torch.float64)
            ok = got.shape == expected.shape and torch.allclose(got, expected, atol=1e-3)
        except (TypeError, ValueError):
            ok = False
    return report(ok, f"chunks {sizes} of {batch_size} rows: weight each replica's mean by its share "
                      "of the rows.",
                  f"a plain average gives the {sizes[-1]} rows of the small last chunk as much say as "
                  f"the {sizes[0]} of the others.", answer)


def check_broadcast_bytes(answer, num_params=1_000_000, num_devices=4, bytes_per_param=4):
    """Bytes of parameters nn.DataParallel broadcasts from the master per step (float32, no buffers).

    >>> check_broadcast_bytes(12_000_000)
    Correct: 1,000,000 parameters x 4 bytes to each of the 3 other devices = 12,000,000 bytes, every step.
    True
    >>> check_broadcast_bytes(16_000_000)
    Not yet: the master already holds the parameters; count the copies sent to the other devices.
    False
    """
    expected = num_params * bytes_per_param * (num_devices - 1)
    ok = None if answer is None else answer == expected
    return report(ok, f"{num_params:,} parameters x {bytes_per_param} bytes to each of the "
                      f"{num_devices - 1} other devices = {expected:,} bytes, every step.",
                  "the master already holds the parameters; count the copies sent to the other devices.",
                  answer)


def check_sync_batchnorm(answer):
    """Which PyTorch module makes BatchNorm use the statistics of the whole (global) batch?

    >>> check_sync_batchnorm(torch.nn.SyncBatchNorm)
    Correct: nn.SyncBatchNorm (with DistributedDataParallel) gathers every process's per-channel mean, variance and count.
    True
    >>> check_sync_batchnorm('BatchNorm2d')
    Not yet: the module's name says what it does to the statistics across processes.
    False
    """
    name = getattr(answer, "__name__", answer)
    ok = None if answer is None else isinstance(name, str) and name.split(".")[-1].lower() == "syncbatchnorm"
    return report(ok, "nn.SyncBatchNorm (with DistributedDataParallel) gathers every process's "
                      "per-channel mean, variance and count.",
                  "the module's name says what it does to the statistics across processes.", answer)


# ------------------------------------------------------------------ 04 ResNet-18 across devices


def check_steps_in_ten_epochs(answer, num_examples=60000, batch_size=512, num_epochs=10):
    """Optimizer steps in ``num_epochs`` epochs over ``num_examples`` images at global ``batch_size``
    (the seed's 2-GPU run).

    >>> check_steps_in_ten_epochs(1180)
    Correct: ceil(60000 / 512) = 118 steps per epoch, 1180 in 10 epochs (the 1-GPU run at batch 256 takes 2350).
    True
    >>> check_steps_in_ten_epochs(2350)
    Not yet: that is the 1-GPU run at batch 256; doubling the batch halves the steps.
    False
    """
    per_epoch = math.ceil(num_examples / batch_size)
    expected = per_epoch * num_epochs
    half = math.ceil(num_examples / (batch_size // 2)) * num_epochs
    hint = ("that is the 1-GPU run at batch 256; doubling the batch halves the steps." if answer == half
            else "one step per batch; count the last, smaller batch too, then multiply by the epochs.")
    return report(answer == expected,
                  f"ceil({num_examples} / {batch_size}) = {per_epoch} steps per epoch, {expected} in "
                  f"{num_epochs} epochs (the 1-GPU run at batch {batch_size // 2} takes {half}).",
                  hint, answer)


def check_scaled_lr(answer, base_lr=0.1, base_batch=256, batch_size=1024):
    """Learning rate for ``batch_size`` by the linear-scaling rule from ``base_lr`` at ``base_batch``.

    >>> check_scaled_lr(0.4)
    Correct: 0.1 x 1024 / 256 = 0.4 (reached gradually, with a warm-up).
    True
    >>> check_scaled_lr(0.2)
    Not yet: the rule multiplies the learning rate by the factor the batch grew by (1024 / 256 = 4).
    False
    """
    expected = base_lr * batch_size / base_batch
    try:
        ok = answer is not None and math.isclose(float(answer), expected, rel_tol=1e-6)
    except (TypeError, ValueError):
        ok = False
    return report(ok, f"{base_lr} x {batch_size} / {base_batch} = {expected:g} (reached gradually, "
                  "with a warm-up).",
                  f"the rule multiplies the learning rate by the factor the batch grew by "
                  f"({batch_size} / {base_batch} = {batch_size // base_batch}).", answer)


def check_bn_rows_per_replica(answer, batch_size=512, num_devices=4):
    """Rows each BatchNorm layer normalises over in training mode, for a global batch of
    ``batch_size`` under DataParallel on ``num_devices`` GPUs.

    >>> check_bn_rows_per_replica(128)
    Correct: every replica normalises its own chunk: chunk_sizes(512, 4) = [128, 128, 128, 128].
    True
    >>> check_bn_rows_per_replica(512)
    Not yet: BatchNorm runs inside each replica's forward and sees only that replica's rows.
    False
    """
    from .parallel import chunk_sizes
    sizes = chunk_sizes(batch_size, num_devices)
    return report(answer == sizes[0] and len(set(sizes)) == 1,
                  f"every replica normalises its own chunk: chunk_sizes({batch_size}, {num_devices}) "
                  f"= {sizes}.",
                  "BatchNorm runs inside each replica's forward and sees only that replica's rows.",
                  answer)


def check_reinit_keeps(answer):
    """Which parameter kind does ``net.apply(init_weights_normal)`` leave as it was in
    ``dltools.resnet18``: 'conv weight', 'linear weight' or 'batchnorm weight'?

    >>> check_reinit_keeps('batchnorm weight')
    Correct: init_weights_normal only touches Linear and Conv2d weights; BatchNorm's weight, bias and running statistics (and every bias) keep their values.
    True
    >>> check_reinit_keeps('conv weight')
    Not yet: read the isinstance test in inspect.getsource(dltools.init_weights_normal).
    False
    """
    choices = ("conv weight", "linear weight", "batchnorm weight")
    if answer is not None and answer not in choices:
        return report(False, "", f"answer with one of {choices}.", answer)
    return report(answer == "batchnorm weight",
                  "init_weights_normal only touches Linear and Conv2d weights; BatchNorm's weight, "
                  "bias and running statistics (and every bias) keep their values.",
                  "read the isinstance test in inspect.getsource(dltools.init_weights_normal).", answer)


# ------------------------------------------------------------------ 03 from DataParallel to DDP


def check_ring_bytes_per_rank(answer, gradient_mb=100, world_size=8):
    """MB each rank sends in a ring all-reduce of ``gradient_mb`` MB of gradients over ``world_size`` ranks.

    >>> check_ring_bytes_per_rank(175)
    Correct: 2 (N - 1) / N x size = 2 x 7 / 8 x 100 MB = 175 MB, less than twice the gradients whatever N is.
    True
    >>> check_ring_bytes_per_rank(1400)
    Not yet: that is what rank 0 handles in the naive all-reduce. In the ring, each rank sends 2 (N - 1) chunks of size / N.
    False
    """
    n = world_size
    expected = 2 * (n - 1) / n * gradient_mb
    naive = 2 * (n - 1) * gradient_mb
    ok = None if answer is None else _close_enough(answer, expected)
    hint = ("that is what rank 0 handles in the naive all-reduce. " if _close_enough(answer, naive) else "") + \
        "In the ring, each rank sends 2 (N - 1) chunks of size / N."
    return report(ok, f"2 (N - 1) / N x size = 2 x {n - 1} / {n} x {gradient_mb} MB = {expected:g} MB, "
                  "less than twice the gradients whatever N is.", hint, answer)


def check_per_rank_batch(answer, global_batch=96, world_size=4):
    """Batch size each process of ``scripts/train_ddp.py`` uses for ``--batch-size global_batch``.

    >>> check_per_rank_batch(24)
    Correct: the script splits the global batch: 96 / 4 = 24 examples per process and step.
    True
    >>> check_per_rank_batch(96)
    Not yet: --batch-size is the global batch; look at the DataLoader in scripts/train_ddp.py.
    False
    """
    expected = global_batch // world_size
    return report(None if answer is None else answer == expected,
                  f"the script splits the global batch: {global_batch} / {world_size} = {expected} "
                  "examples per process and step.",
                  "--batch-size is the global batch; look at the DataLoader in scripts/train_ddp.py.",
                  answer)


def check_without_set_epoch(answer):
    """What happens if ``sampler.set_epoch(epoch)`` is left out? (a letter)

    a) every rank gets the whole data set; b) every epoch visits the examples in the same order;
    c) the ranks get overlapping shards; d) training fails with an error.

    >>> check_without_set_epoch('b')
    Correct: the shuffle is seeded with seed + epoch, and epoch stays 0: the same order every epoch (the shards stay disjoint).
    True
    >>> check_without_set_epoch('c')
    Not yet: every rank seeds the same permutation and keeps every N-th index, so the shards never overlap. What does the epoch change?
    False
    """
    letter = answer.strip().lower()[:1] if isinstance(answer, str) else answer
    return report(None if answer is None else letter == "b",
                  "the shuffle is seeded with seed + epoch, and epoch stays 0: the same order every "
                  "epoch (the shards stay disjoint).",
                  "every rank seeds the same permutation and keeps every N-th index, so the shards "
                  "never overlap. What does the epoch change?", answer)


def _close_enough(answer, expected, rel=0.01):
    try:
        return abs(float(answer) - expected) <= rel * abs(expected)
    except (TypeError, ValueError):
        return False
