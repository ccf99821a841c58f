"""Notebook 01's exercise checks (right answers pass, typical wrong answers fail) and its
diagram script."""
import functools
import importlib.util
from pathlib import Path

import pytest
import torch
from torch import nn

import checks_01 as checks
import dltools
from dltools.parallel import scatter as library_scatter
from dltools.parallel import split_batch as library_split
from support.checks import assert_help_hides, assert_right, assert_unanswered, assert_wrong, verdict

ROOT = Path(__file__).resolve().parent.parent



# ------------------------------------------------------------------ answers to predict


@pytest.mark.parametrize("check, right", [
    (checks.check_dp_chunk_sizes, [13, 13, 13, 11]),
    (checks.check_dp_chunk_sizes, (13, 13, 13, 11)),
    (checks.check_dp_chunk_sizes, torch.Size([13, 13, 13, 11])),
    (checks.check_dp_last_batch, [2, 2]),
    (checks.check_dp_wrapped_key, "module.2.bias"),
    (checks.check_dp_visible_gpus, (2, 5)),
])
def test_right_answers_pass(capsys, check, right):
    assert_right(capsys, check, right)


@pytest.mark.parametrize("check, wrong", [
    (checks.check_dp_chunk_sizes, [12, 12, 13, 13]),   # the right sum in the wrong shape
    (checks.check_dp_chunk_sizes, [13, 13, 13, 13]),
    (checks.check_dp_chunk_sizes, [12.5, 12.5, 12.5, 12.5]),
    (checks.check_dp_chunk_sizes, [13.0, 13, 13, 11]),
    (checks.check_dp_chunk_sizes, ["13", "13", "13", "11"]),
    (checks.check_dp_chunk_sizes, [True, 1]),
    (checks.check_dp_chunk_sizes, 13),
    (checks.check_dp_last_batch, [2, 1, 1]),            # "every device gets something"
    (checks.check_dp_last_batch, [11, 11, 10]),         # a full batch, not the last one
    (checks.check_dp_last_batch, [4]),
    (checks.check_dp_wrapped_key, "2.bias"),
    (checks.check_dp_wrapped_key, "module.1.bias"),     # ReLU has no parameters but keeps its index
    (checks.check_dp_wrapped_key, 3),
    (checks.check_dp_visible_gpus, (2, 2)),
    (checks.check_dp_visible_gpus, (8, 5)),
    (checks.check_dp_visible_gpus, (2.0, 5)),
    (checks.check_dp_visible_gpus, (2, 5, 0)),
    (checks.check_dp_visible_gpus, 2),
])
def test_typical_wrong_answers_fail(capsys, check, wrong):
    assert_wrong(capsys, check, wrong)


def test_hints_do_not_give_the_answer_away(capsys):
    for answer in ([12, 12, 13, 13], [13, 13, 13, 13], [10, 10, 10, 20]):
        _, out = verdict(capsys, checks.check_dp_chunk_sizes, answer)
        assert "13" not in out.replace(str(answer), "") and "11" not in out, out
        assert "chunk_sizes" not in out, out  # the helper that computes the answer
    for answer in ([2, 1, 1], [1, 1, 1], [11, 11, 10]):
        _, out = verdict(capsys, checks.check_dp_last_batch, answer)
        assert "2, 2" not in out and " 4 " not in out and "= 2" not in out, out
    for answer in ("module.1.bias", "net.2.bias", "bias"):   # the prompt forbids printing the keys
        _, out = verdict(capsys, checks.check_dp_wrapped_key, answer)
        assert "module.2" not in out and "print" not in out, out


@pytest.mark.parametrize("check", [checks.check_dp_chunk_sizes, checks.check_dp_last_batch,
                                   checks.check_dp_wrapped_key, checks.check_dp_visible_gpus,
                                   checks.check_split_batch, checks.check_allreduce])
def test_unanswered_and_no_answer_in_the_help(capsys, check):
    assert_unanswered(capsys, check)
    assert_help_hides(check, ("13, 13, 13, 11", "[2, 2]", "module.2.bias", "(2, 5)", "50", "5,2"))


def test_the_gpu_exercise_source_does_not_show_the_numbers():
    import inspect
    source = inspect.getsource(checks.check_dp_visible_gpus)  # what `check_dp_visible_gpus??` shows
    assert "5, 2" not in source and "[5" not in source and "5,2" not in source


# ------------------------------------------------------------------ coding: split_batch


def split_right(X, y, devices):  # d2l's, on any device
    assert X.shape[0] == y.shape[0]
    return ([x.to(d) for x, d in zip(X.chunk(len(devices)), devices)],
            [t.to(d) for t, d in zip(y.chunk(len(devices)), devices)])


def split_even(X, y, devices):  # batch // k rows each: drops or misplaces the rest
    assert X.shape[0] == y.shape[0]
    k = max(1, X.shape[0] // len(devices))
    return list(X.split(k)), list(y.split(k))


def split_no_check(X, y, devices):
    return ([x.to(d) for x, d in zip(X.chunk(len(devices)), devices)],
            [t.to(d) for t, d in zip(y.chunk(len(devices)), devices)])


def split_no_to(X, y, devices):  # right on CPUs only: every chunk stays on X's device
    assert X.shape[0] == y.shape[0]
    return list(X.chunk(len(devices))), list(y.chunk(len(devices)))


def split_shuffled(X, y, devices):
    assert X.shape[0] == y.shape[0]
    return list(X.flip(0).chunk(len(devices))), list(y.flip(0).chunk(len(devices)))


def split_only_X(X, y, devices):
    assert X.shape[0] == y.shape[0]
    return list(X.chunk(len(devices)))


def split_crashes(X, y, devices):
    raise ValueError("not written yet")


def split_wraps_library(X, y, devices):
    return dltools.split_batch(X, y, devices)


def split_alias(X, y, devices):  # the library's function under a name imported earlier
    return library_split(X, y, devices)


def split_library_scatter(X, y, devices):
    assert X.shape[0] == y.shape[0]
    return library_scatter(X, devices), library_scatter(y, devices)


def split_d2l_scatter(X, y, devices):  # d2l's exact code: nn.parallel.scatter needs GPUs
    assert X.shape[0] == y.shape[0]
    return nn.parallel.scatter(X, devices), nn.parallel.scatter(y, devices)


def split_zeroes_inputs(X, y, devices):  # right chunks, of the caller's batch wiped in place
    assert X.shape[0] == y.shape[0]
    X.zero_()
    y.zero_()
    return split_right(X, y, devices)


def split_clones_then_zeroes(X, y, devices):  # right copies returned, then the batch wiped
    out = [c.clone() for c in split_right(X, y, devices)[0]], \
        [c.clone() for c in split_right(X, y, devices)[1]]
    X.zero_()
    y.zero_()
    return out


def split_first_chunks_checked(X, y, devices):
    # compares the first chunks, not the batches: 9 X rows and 10 y rows on 4 devices pass
    xs, ys = split_no_check(X, y, devices)
    assert len(xs[0]) == len(ys[0])
    return xs, ys


def test_split_batch_right(capsys):
    assert_right(capsys, checks.check_split_batch, split_right)


@pytest.mark.parametrize("wrong, words", [
    (split_even, "shapes"), (split_no_check, "different row counts"),
    (split_shuffled, "rows are not the right ones"), (split_only_X, "two sequences"),
    (split_crashes, "raised ValueError"), ("split_batch", "function itself"),
    (split_no_to, "must be on devices[i]"),
    (dltools.split_batch, "the library's split_batch"),
    (split_wraps_library, "your own split_batch"),
    (split_d2l_scatter, "runs only on GPUs"),
    (split_alias, "your own split_batch"), (split_library_scatter, "your own split_batch"),
    (functools.partial(dltools.split_batch), "your own split_batch"),
    (split_zeroes_inputs, "changed X or y in place"),
    (split_clones_then_zeroes, "changed X or y in place"),
    (split_first_chunks_checked, "different row counts"),
])
def test_split_batch_wrong(capsys, wrong, words):
    assert_wrong(capsys, checks.check_split_batch, wrong, words)


# ------------------------------------------------------------------ coding: allreduce


def allreduce_right(data):  # d2l's
    for i in range(1, len(data)):
        data[0][:] += data[i].to(data[0].device)
    for i in range(1, len(data)):
        data[i][:] = data[0].to(data[i].device)


def allreduce_mean(data):
    allreduce_right(data)
    for t in data:
        t /= len(data)


def allreduce_master_only(data):
    for i in range(1, len(data)):
        data[0][:] += data[i].to(data[0].device)


def allreduce_rebinds(data):
    total = sum(t.to(data[0].device) for t in data)
    for i in range(len(data)):
        data[i] = total.to(data[i].device)


def allreduce_nothing(data):
    pass


def allreduce_no_to(data):  # right on CPUs only: on GPUs, adding across devices raises
    for i in range(1, len(data)):
        data[0][:] += data[i]
    for i in range(1, len(data)):
        data[i][:] = data[0]


def allreduce_float64_only(data):  # right on the float64 probes, wrong on float32 gradients
    allreduce_right(data)
    if data[0].dtype == torch.float32:
        for t in data:
            t *= 7


def test_allreduce_right(capsys):
    assert_right(capsys, checks.check_allreduce, allreduce_right)


@pytest.mark.parametrize("wrong, words", [
    (allreduce_mean, "the mean"), (allreduce_master_only, "every tensor"),
    (allreduce_rebinds, "in place"), (allreduce_nothing, "should hold their sum"),
    (split_crashes, "raised"), (3, "function itself"),
    (allreduce_no_to, "same device"),
    (allreduce_float64_only, "full-batch"),   # only the training step can catch this one
])
def test_allreduce_wrong(capsys, wrong, words):
    assert_wrong(capsys, checks.check_allreduce, wrong, words)


# ------------------------------------------------------------------ the diagram script


def _diagram_module():
    spec = importlib.util.spec_from_file_location("make_dp_diagram",
                                                  ROOT / "images" / "make_dp_diagram.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_diagram_script_writes_the_same_png_twice(tmp_path):
    draw = _diagram_module().draw
    first = draw(tmp_path / "a").read_bytes()
    second = draw(tmp_path / "b").read_bytes()
    assert first[:8] == b"\x89PNG\r\n\x1a\n"
    assert first == second


def test_committed_diagram_exists():
    assert (ROOT / "images" / _diagram_module().FILENAME).is_file()


def split_loops_forever(X, y, devices):
    while True:
        pass


def split_sleeps(X, y, devices):
    import time
    time.sleep(3600)


@pytest.mark.parametrize("wrong", [split_loops_forever, split_sleeps])
def test_split_batch_that_never_returns_is_stopped(capsys, monkeypatch, wrong):
    monkeypatch.setattr(checks, "TIME_LIMIT", 1)
    assert_wrong(capsys, checks.check_split_batch, wrong, "did not return within 1 s")


def allreduce_loops_forever(data):
    while True:
        pass


def test_allreduce_that_never_returns_is_stopped(capsys, monkeypatch):
    monkeypatch.setattr(checks, "TIME_LIMIT", 1)
    assert_wrong(capsys, checks.check_allreduce, allreduce_loops_forever,
                 "did not return within 1 s")


def test_the_library_is_left_as_it_was():
    # The check watches for calls of the library's split_batch; it must not change the library.
    code = dltools.parallel.split_batch.__code__, dltools.parallel.scatter.__code__
    checks.check_split_batch(split_wraps_library)
    assert (dltools.parallel.split_batch.__code__, dltools.parallel.scatter.__code__) == code
    X, y = torch.arange(6.).reshape(3, 2), torch.arange(3)
    assert [t.shape[0] for t in dltools.split_batch(X, y, ["cpu", "cpu"])[0]] == [2, 1]
