"""dltools.ddp_internals in a one-process group (fast); notebook 03 runs it on 2 processes."""
import torch.distributed as dist

from dltools import ddp_internals as di
from dltools.distributed import single_process_group


def test_buckets_are_rebuilt_in_gradient_order():
    with single_process_group():
        log = di.bucket_log(None, steps=2)
    calls = [e for e in log["events"] if e["what"] == "all_reduce"]
    order = list(log["param_bytes"])
    assert [c["step"] for c in calls] == [0, 1, 1]           # one bucket, then two
    assert calls[0]["params"] == order                       # first step: parameter order
    assert [p for c in calls[1:] for p in c["params"]] == order[::-1]
    assert calls[1]["bytes"] >= dist._DEFAULT_FIRST_BUCKET_BYTES


def test_no_sync_unused_and_checkpoint(tmp_path):
    with single_process_group():
        acc = di.no_sync_log(micro_batches=3)
        unused = di.unused_parameters_log()
        ckpt = di.checkpoint_roundtrip(str(tmp_path / "ck.pt"))
    assert acc["all_reduces"] == {"every backward": 6, "no_sync": 2}
    assert acc["max_grad_diff"] < 1e-6
    assert unused["error_step"] == 1 and "find_unused_parameters" in unused["error"]
    assert unused["steps_with_flag"] == 2 and unused["unused_grad_is_none"]
    assert ckpt["differed_before"] and ckpt["equal_after"]


def test_run_source_defines_and_calls():
    assert di.run_source("def f(a, b):\n    return a * b\n", "f", 6, 7) == 42


def test_bucket_cap_mb_cuts_smaller_buckets():
    with single_process_group():
        small = di.bucket_log(0.25, steps=2)
    calls = [e for e in small["events"] if e["what"] == "all_reduce" and e["step"] == 1]
    cap = int(0.25 * 2**20)
    assert len(calls) == 3                      # the default cap gives 2 (see above)
    for call in calls[:-1]:                     # each closed by the tensor that took it past cap
        assert call["bytes"] >= cap > call["bytes"] - small["param_bytes"][call["params"][-1]]


def test_find_unused_parameters_keeps_the_initial_buckets():
    with single_process_group():
        log = di.bucket_log(None, steps=2, find_unused_parameters=True)
    calls = [e for e in log["events"] if e["what"] == "all_reduce"]
    by_step = [[c["params"] for c in calls if c["step"] == s] for s in (0, 1)]
    assert len(by_step[0]) == 2 and by_step[0] == by_step[1]     # bucketed at once, never rebuilt
    assert by_step[0][-1][0] == "fc1.weight"    # cut first in parameter order, reduced last
