"""Notebook 03's exercise checks: right answers pass, typical wrong answers fail."""
import importlib.util
import inspect

import pytest

import checks_03 as checks
from support.checks import assert_help_hides, assert_right, assert_unanswered, assert_wrong
from support.processes import assert_no_process_left


@pytest.mark.parametrize("check, right", [
    (checks.check_ring_bytes_per_rank, 175),
    (checks.check_ring_bytes_per_rank, 175.0),
    (checks.check_per_rank_batch, 24),
    (checks.check_shard_without_set_epoch, 24),
    (checks.check_padded_shards, (4, 1)),
    (checks.check_padded_shards, [4, 1]),
])
def test_right_answers_pass(capsys, check, right):
    assert_right(capsys, check, right)


@pytest.mark.parametrize("check, wrong", [
    (checks.check_ring_bytes_per_rank, 1400),      # the naive root's traffic, both ways
    (checks.check_ring_bytes_per_rank, 700),       # the naive root's sends
    (checks.check_ring_bytes_per_rank, 87.5),      # reduce-scatter only
    (checks.check_ring_bytes_per_rank, 200),       # 2P
    (checks.check_ring_bytes_per_rank, 12.5),      # one chunk
    (checks.check_ring_bytes_per_rank, "175"),
    (checks.check_ring_bytes_per_rank, True),
    (checks.check_per_rank_batch, 96),
    (checks.check_per_rank_batch, 24.0),           # not an int
    (checks.check_per_rank_batch, 24.9),           # int() would truncate this to 24
    (checks.check_per_rank_batch, "24"),
    (checks.check_per_rank_batch, 384),
    (checks.check_shard_without_set_epoch, 96),    # thinks every epoch reshuffles
    (checks.check_shard_without_set_epoch, 240),   # visits, not different examples
    (checks.check_shard_without_set_epoch, 24.0),  # not an int
    (checks.check_shard_without_set_epoch, "24"),
    (checks.check_shard_without_set_epoch, 6),
    (checks.check_padded_shards, (3, 0)),          # drop_last=True
    (checks.check_padded_shards, (4, 0)),          # thinks the shards never overlap
    (checks.check_padded_shards, (3, 2)),          # the notebook's printed case, 10 on 4
    (checks.check_padded_shards, (3.67, 0)),
    (checks.check_padded_shards, (4.0, 1.0)),
    (checks.check_padded_shards, 4),
    (checks.check_padded_shards, (4, 1, 0)),
])
def test_typical_wrong_answers_fail(capsys, check, wrong):
    assert_wrong(capsys, check, wrong)


@pytest.mark.parametrize("check", [checks.check_ring_bytes_per_rank, checks.check_per_rank_batch,
                                   checks.check_shard_without_set_epoch, checks.check_padded_shards,
                                   checks.check_ddp_worker])
def test_unanswered_and_no_answer_in_the_help(capsys, check):
    assert_unanswered(capsys, check)
    assert_help_hides(check, ("175", "24", "(4, 1)", "DDP(", "same order", "seed + epoch"))


# ------------------------------------------------------------------ coding: the DDP lines


def right_worker(dataset, global_batch_size, lr, num_epochs):
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader
    from torch.utils.data.distributed import DistributedSampler

    from dltools.distributed import rank_device

    device = rank_device()
    torch.manual_seed(0)
    model = nn.Linear(8, 3).to(device)
    model = DDP(model, device_ids=[device.index] if device.type == "cuda" else None)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=global_batch_size // dist.get_world_size(),
                        sampler=sampler)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    for epoch in range(num_epochs):
        sampler.set_epoch(epoch)
        for X, y in loader:
            X, y = X.to(device), y.to(device)
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(X), y).backward()
            optimizer.step()
    return {k: v.cpu() for k, v in model.module.state_dict().items()}


WRONG = {  # the typical mistakes, as edits of right_worker's source
    "no_ddp": [("    model = DDP(model, device_ids=[device.index] if device.type == \"cuda\" "
                "else None)\n", ""), ("model.module.state_dict()", "model.state_dict()")],
    "no_set_epoch": [("        sampler.set_epoch(epoch)\n", "")],
    "global_batch_per_rank": [("batch_size=global_batch_size // dist.get_world_size()",
                               "batch_size=global_batch_size")],
    "module_prefix": [("model.module.state_dict()", "model.state_dict()")],
    "no_sampler": [("sampler=sampler)", "shuffle=True)")],
    "raises": [("optimizer.step()", "optimizer.step(); 1 / 0")],
    "whole_data_alone": [  # no DDP: every rank trains alone on every example, in the same order
        ("    model = DDP(model, device_ids=[device.index] if device.type == \"cuda\" "
         "else None)\n", ""), ("model.module.state_dict()", "model.state_dict()"),
        ("DistributedSampler(dataset, shuffle=True", "DistributedSampler(dataset, num_replicas=1, "
         "rank=0, shuffle=True"),
        ("batch_size=global_batch_size // dist.get_world_size()", "batch_size=global_batch_size")],
    "whole_data_alone_in_workers": [  # the same, read by a DataLoader worker process
        ("    model = DDP(model, device_ids=[device.index] if device.type == \"cuda\" "
         "else None)\n", ""), ("model.module.state_dict()", "model.state_dict()"),
        ("DistributedSampler(dataset, shuffle=True", "DistributedSampler(dataset, num_replicas=1, "
         "rank=0, shuffle=True"),
        ("batch_size=global_batch_size // dist.get_world_size()", "batch_size=global_batch_size"),
        ("sampler=sampler)", "sampler=sampler, num_workers=1)")],
    "bypasses_ddp": [("    model = DDP(model, ", "    ddp = DDP(model, "),   # then calls model(X)
                     ("model.module.state_dict()", "model.state_dict()")],
    "in_workers": [("sampler=sampler)", "sampler=sampler, num_workers=1)")],  # right
    "unseeded_no_ddp": [("    torch.manual_seed(0)\n", ""),
                        ("    model = DDP(model, device_ids=[device.index] if device.type == "
                         "\"cuda\" else None)\n", ""),
                        ("model.module.state_dict()", "model.state_dict()")],
    "unseeded": [("    torch.manual_seed(0)\n", "")],  # right: DDP broadcasts rank 0's start
    "loops_forever": [("            optimizer.step()\n", "            optimizer.step()\n"
                       "            while True:\n                pass\n")],
    "imports_outside": [("    import torch\n", "")],   # as if torch were imported in another cell
    "rank1_late": [("    device = rank_device()\n", "    device = rank_device()\n"
                    "    import time\n    if dist.get_rank() == 1:\n        time.sleep(30)\n")],
    "makes_the_group": [("    device = rank_device()\n", "    dist.init_process_group('gloo')\n"
                         "    device = rank_device()\n")],   # as PyTorch's tutorial workers do
    "rank0_only": [("    return {k: v.cpu()", "    if dist.get_rank():\n        return None\n"
                    "    return {k: v.cpu()")],
}


def make_worker(name, folder):
    """A mistaken copy of right_worker, written to a module as a learner's cell would define it."""
    source = inspect.getsource(right_worker)
    for old, new in WRONG[name]:
        assert old in source, old
        source = source.replace(old, new)
    path = folder / f"learner_{name}.py"
    path.write_text(source.replace("def right_worker", f"def {name}"))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def test_ddp_worker_right(capsys, tmp_path):
    assert_right(capsys, checks.check_ddp_worker, right_worker)
    assert_right(capsys, checks.check_ddp_worker, make_worker("unseeded", tmp_path))
    assert_right(capsys, checks.check_ddp_worker, make_worker("in_workers", tmp_path))


@pytest.mark.parametrize("name, words", [
    ("no_ddp", "Wrap the model in DDP"),
    ("no_set_epoch", "set_epoch"),
    ("global_batch_per_rank", "6 examples per step"),
    ("module_prefix", "model.module.state_dict()"),
    ("no_sampler", "DistributedSampler"),
    ("raises", "ZeroDivisionError"),
    ("rank0_only", "on every rank"),
    ("imports_outside", "import what it uses"),
    ("whole_data_alone", "read 48 examples per epoch"),
    ("whole_data_alone_in_workers", "read 48 examples per epoch"),  # reads in a worker process
    ("unseeded_no_ddp", "Wrap the model in DDP"),
    ("bypasses_ddp", "call the wrapper"),
])
def test_ddp_worker_wrong(capsys, tmp_path, name, words):
    assert_wrong(capsys, checks.check_ddp_worker, make_worker(name, tmp_path), words)


def test_ddp_worker_that_waits_or_makes_the_group_is_told_why(capsys, tmp_path, monkeypatch):
    """Sweep 3 (X10, X11): the check kept only the traceback's last line, gloo's "Timed out
    waiting 60000ms", and dropped launch's pointer to the rank that never came; and a worker
    that makes its own process group got torch's "initialize the default process group twice"."""
    monkeypatch.setattr(checks, "_TIMEOUT", 5)
    assert_wrong(capsys, checks.check_ddp_worker, make_worker("rank1_late", tmp_path),
                 "Rank(s) [1] had neither returned nor raised")
    assert_wrong(capsys, checks.check_ddp_worker, make_worker("makes_the_group", tmp_path),
                 "launch made the process group before calling it")


@pytest.mark.parametrize("wrong", ["right_worker", right_worker.__call__, print])
def test_ddp_worker_not_a_function(capsys, wrong):
    assert_wrong(capsys, checks.check_ddp_worker, wrong)


def test_ddp_worker_that_never_ends_is_stopped(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(checks, "_DEADLINE", 5)
    assert_wrong(capsys, checks.check_ddp_worker, make_worker("loops_forever", tmp_path),
                 "did not finish within 5 s")
    assert_no_process_left()
