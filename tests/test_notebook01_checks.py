"""Notebook 01's exercise checks (dltools.exercises, section 01) and its diagram script."""
import importlib.util
from pathlib import Path

import pytest
import torch

from dltools import exercises as ex
from dltools.parallel import chunk_sizes

ROOT = Path(__file__).resolve().parent.parent


def verdict(capsys, check, answer, **kwargs):
    ok = check(answer, **kwargs)
    return ok, capsys.readouterr().out


@pytest.mark.parametrize("check, right", [
    (ex.check_dp_chunk_sizes, [13, 13, 13, 11]),
    (ex.check_dp_last_batch, [2, 2]),
    (ex.check_dp_wrapped_key, "module.2.bias"),
    (ex.check_dp_visible_gpus, (2, 5)),
])
def test_right_wrong_and_unanswered(capsys, check, right):
    ok, out = verdict(capsys, check, right)
    assert ok is True and out.startswith("Correct:")
    ok, out = verdict(capsys, check, None)
    assert ok is False and out.startswith("Not answered yet")


@pytest.mark.parametrize("check, wrong", [
    (ex.check_dp_chunk_sizes, [12, 12, 13, 13]),   # the right sum in the wrong shape
    (ex.check_dp_chunk_sizes, [13, 13, 13, 13]),
    (ex.check_dp_last_batch, [2, 1, 1]),            # "every device gets something": not torch.chunk
    (ex.check_dp_last_batch, [11, 11, 10]),         # a full batch, not the last one
    (ex.check_dp_wrapped_key, "2.bias"),
    (ex.check_dp_wrapped_key, "module.1.bias"),     # ReLU has no parameters but keeps its index
    (ex.check_dp_visible_gpus, (2, 2)),
    (ex.check_dp_visible_gpus, (8, 5)),
])
def test_wrong_answers_are_rejected(capsys, check, wrong):
    ok, out = verdict(capsys, check, wrong)
    assert ok is False and out.startswith("Not yet:")


@pytest.mark.parametrize("check, bad, words", [
    (ex.check_dp_chunk_sizes, 13, "list of whole numbers"),
    (ex.check_dp_chunk_sizes, ["13", "13", "13", "11"], "list of whole numbers"),
    (ex.check_dp_chunk_sizes, [True, 1], "list of whole numbers"),
    (ex.check_dp_chunk_sizes, [10, 10, 10, 10], "add up to the batch: 40 != 50"),
    (ex.check_dp_visible_gpus, 2, "two whole numbers"),
    (ex.check_dp_visible_gpus, (2, 5, 0), "two whole numbers"),
    (ex.check_dp_wrapped_key, 3, "print list(net.state_dict())"),
])
def test_bad_input_gets_a_clear_hint_not_a_crash(capsys, check, bad, words):
    ok, out = verdict(capsys, check, bad)
    assert ok is False and words in out


def test_a_tensor_shape_or_tuple_is_accepted():
    assert ex.check_dp_chunk_sizes((13, 13, 13, 11))
    assert ex.check_dp_chunk_sizes(torch.Size([13, 13, 13, 11]))


@pytest.mark.parametrize("batch, n", [(50, 4), (30, 8), (10, 3), (3, 8), (7, 7)])
def test_chunk_checks_follow_torch_chunk(batch, n):
    expected = [c.shape[0] for c in torch.arange(batch).chunk(n)]
    assert ex.check_dp_chunk_sizes(expected, batch_size=batch, num_devices=n)
    assert expected == chunk_sizes(batch, n)


@pytest.mark.parametrize("num_examples, batch_size, n, expected", [
    (100, 32, 3, [2, 2]), (100, 10, 3, [4, 4, 2]), (101, 10, 8, [1])])
def test_last_batch_is_the_remainder_or_a_full_batch(num_examples, batch_size, n, expected):
    assert ex.check_dp_last_batch(expected, num_examples=num_examples, batch_size=batch_size,
                                  num_devices=n)


def test_visible_gpus_follows_the_listed_order():
    assert ex.check_dp_visible_gpus((3, 1), visible="1,0,7")
    assert not ex.check_dp_visible_gpus((3, 0), visible="1,0,7")


def _diagram_module():
    spec = importlib.util.spec_from_file_location("make_dp_diagram", ROOT / "images" / "make_dp_diagram.py")
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
