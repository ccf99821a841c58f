"""dltools.beyond's workers, run for real: 2 processes (gloo on CPU), every technique in one launch.

One launch (about 20 s on 2 busy cores) checks what notebook 05 relies on: each technique trains
like one process, the memory each rank holds matches the 1/N formulas, and the collectives are
the ones the notebook names.
"""
import pytest

from dltools.beyond.model import UPDATE_TOLERANCE
from dltools.beyond.pipeline import bubble_fraction, logical_timeline, max_in_flight
from dltools.beyond.runs import CONFIG, RUNNERS, predicted_memory, run_all
from dltools.distributed import launch

SMALL = {**CONFIG, "width": 32, "batch": 16,
         "pipeline": {"width": 32, "depth": 4, "batch": 16, "microbatches": (2, 4)},
         "overlap": {"width": 32, "sizes": (2**12, 2**14), "rows": (8, 32), "repeats": 2}}


@pytest.fixture(scope="module")
def results():
    return launch(run_all, 2, SMALL, timeout=120)


def test_every_technique_trains_like_one_process(results):
    for r in results:
        for name in RUNNERS:
            assert r[name]["losses"] == pytest.approx(r[name]["ref_losses"], rel=1e-5), name
            assert r[name]["grad_diff"] < 1e-5 and r[name]["param_diff"] < UPDATE_TOLERANCE, name


def test_memory_per_rank_matches_the_formulas(results):
    for r in results:
        for name in RUNNERS:
            predicted = predicted_memory(name, SMALL, 2)
            measured = r[name]["memory"]
            # as notebook 05 asserts: exact, but Adam's 4-byte step counter per tensor held
            assert measured["params"] == predicted["params"], name
            assert measured["grads"] == predicted["grads"], name
            extra = measured["optimizer"] - predicted["optimizer"]
            assert 0 < extra <= 4 * 4 * SMALL["depth"], (name, extra)   # 4 tensors per block
    for r in results:   # ZeRO-2 holds shards + gathered parameters between forward and backward
        p = 4 * r["ddp"]["num_params"]
        assert r["fsdp_zero2"]["held_after_forward"] == {"sharded": p // 2, "unsharded": p}
        assert r["fsdp_zero3"]["held_after_forward"] == {"sharded": p // 2, "unsharded": 0}
        assert r["fsdp_zero2"]["held_after_step"] == {"sharded": p // 2, "unsharded": 0}
    ddp, zero3 = results[0]["ddp"]["memory"], results[0]["fsdp_zero3"]["memory"]
    assert zero3["params"] * 2 == ddp["params"]         # the shards really are halves


def test_collectives_are_the_expected_ones(results):
    model_bytes = 4 * results[0]["ddp"]["num_params"]
    assert results[0]["ddp"]["comm"] == {"all_reduce": model_bytes}
    for name in ("ddp", "zero1"):   # the hook's count against the parameters' own bytes
        assert results[0][name]["comm"]["all_reduce"] == results[0][name]["grad_bytes"]
        assert results[0][name]["backward_seen_by_dispatcher"] == {"all_reduce": model_bytes}
    assert results[0]["zero1"]["comm"] == {"all_reduce": model_bytes, "broadcast": model_bytes}
    assert results[0]["fsdp_zero3"]["comm"] == {
        "forward": {"all_gather": model_bytes},
        "backward": {"all_gather": model_bytes, "reduce_scatter": model_bytes}}
    assert results[0]["fsdp_zero2"]["comm"]["backward"] == {"reduce_scatter": model_bytes}
    assert results[0]["tp"]["calls"] == {"forward": {"all_reduce": 4},
                                         "backward": {"all_reduce": 4}}


def test_pipeline_matches_one_process_and_its_schedules(results):
    for key in (("gpipe", 2), ("gpipe", 4), ("1f1b", 2), ("1f1b", 4)):
        events = [e for r in results for e in r["pipeline"]["runs"][key]["events"]]
        assert all(r["pipeline"]["runs"][key]["grad_diff"] < 1e-5 for r in results)
        last = results[1]["pipeline"]["runs"][key]
        assert last["loss"] == pytest.approx(last["ref_loss"], rel=1e-5)
        m = key[1]
        assert [max_in_flight(events, s) for s in (0, 1)] == (
            [m, m] if key[0] == "gpipe" else [2, 1])
        assert bubble_fraction(logical_timeline(events)) == pytest.approx(1 / (m + 1))


def test_the_overlap_timings_are_complete_and_the_same_on_every_rank(results):
    """The alpha-beta section's timings: one block's all-gather is handed the block's 4 bytes per
    parameter in one call, and every rank returns the slowest rank's times (not its own)."""
    first, second = (r["overlap"] for r in results)
    assert first == second
    block = 32 * 128 + 128 + 128 * 32 + 32
    assert first["block_bytes"] == 4 * block and first["counted"] == {"all_gather": 4 * block}
    assert first["matmul_params"] == 2 * 32 * 128
    assert [len(first[k]) for k in ("gather_s", "forward_s", "overlapped_s")] == [2, 2, 2]
    assert all(t > 0 for k in ("gather_s", "forward_s", "overlapped_s") for t in first[k])


def test_fsdp_and_tensor_parallelism_on_a_2d_mesh():
    """4 ranks as 2 x 2: tensor-parallel pairs (0, 1) and (2, 3), FSDP2 across them. It trains
    like one process; each rank holds a quarter of the model (down's bias, which tensor
    parallelism keeps whole, a half); TP's all-reduces carry the pair's rows, FSDP2's gathers the
    pair's half of the model."""
    from dltools.beyond.mesh2d import fsdp_tp_run
    from dltools.beyond.model import make_model

    width, depth, batch = 16, 2, 8
    results = launch(fsdp_tp_run, 4, width, depth, batch, timeout=120)
    num_params = sum(p.numel() for p in make_model(width, depth).parameters())
    biases = depth * width                       # each block's down.bias
    for r in results:
        assert r["losses"] == pytest.approx(r["ref_losses"], rel=1e-5)
        assert r["grad_diff"] < 1e-5 and r["param_diff"] < UPDATE_TOLERANCE
        assert r["mesh"]["tp_group"] == [r["rank"] // 2 * 2, r["rank"] // 2 * 2 + 1]
        assert r["mesh"]["dp_group"] == [r["rank"] % 2, r["rank"] % 2 + 2]
        assert r["memory"]["params"] == 4 * ((num_params - biases) // 4 + biases // 2)
        assert r["calls"]["forward"] == {"all_gather": depth, "all_reduce": depth}
        assert r["comm"]["forward"]["all_reduce"] == depth * (batch // 2) * width * 4
        assert r["comm"]["forward"]["all_gather"] == 4 * ((num_params - biases) // 2 + biases)
        assert r["comm"]["backward"]["reduce_scatter"] == r["comm"]["forward"]["all_gather"]


def test_a_2d_mesh_needs_pairs():
    from dltools.beyond.mesh2d import fsdp_tp_run
    from dltools.distributed import single_process_group
    with single_process_group(), pytest.raises(ValueError, match="1 ranks cannot form pairs of 2"):
        fsdp_tp_run(16, 2, 8)
