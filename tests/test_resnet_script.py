"""Tests of scripts/train_resnet_ddp.py, the DDP version of notebook 04's training."""
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dltools

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "train_resnet_ddp.py"


@pytest.fixture(scope="module")
def script():
    spec = importlib.util.spec_from_file_location("train_resnet_ddp", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_global_batch_is_split_evenly(script):
    assert script.per_rank_batch_size(512, 2) == 256
    assert script.per_rank_batch_size(256, 1) == 256
    with pytest.raises(ValueError, match="does not split evenly over 3 processes"):
        script.per_rank_batch_size(512, 3)


def test_bad_arguments_are_refused(script, capsys):
    with pytest.raises(SystemExit):
        script.parse_args(["--out", "x.json", "--epochs", "0"])
    assert "--epochs must be at least 1" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        script.parse_args([])  # --out is required
    assert script.parse_args(["--out", "x.json"]).batch_size == 512  # the seed's 2-GPU global batch


def test_subset_size_is_checked(script, tmp_path):
    with pytest.raises(ValueError, match="--num-test must be in 1..10000"):
        script.load_split(False, 10_001, None)


def test_refuses_to_run_without_torchrun(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(tmp_path / "r.json")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert "launch it with torchrun" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_two_process_run_writes_results_and_a_plain_checkpoint(tmp_path):
    out, ckpt = tmp_path / "r.json", tmp_path / "net.pt"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                    "--nproc_per_node=2", str(SCRIPT), "--out", str(out), "--checkpoint", str(ckpt),
                    "--num-train", "64", "--num-test", "30", "--width", "4", "--epochs", "2",
                    "--batch-size", "16", "--lr", "0.05"],
                   check=True, capture_output=True, env=env)
    r = json.loads(out.read_text())
    assert (r["world_size"], r["backend"], r["per_rank_batch_size"]) == (2, "gloo", 8)
    assert r["steps_per_epoch"] == 4                      # 64 images / 2 ranks / 8 per step
    assert r["shard_sizes"] == [32, 32] and r["shards_cover_train_set_once"]
    assert r["set_epoch_reshuffles"] and r["params_identical"]
    assert [row[0] for row in r["history"]] == [1, 2]
    # The checkpoint has no "module." prefix and scores what the script reported on the same images.
    state = torch.load(ckpt)
    assert not any(k.startswith("module.") for k in state)
    net = dltools.resnet18(10, width=4)
    net.load_state_dict(state)
    _, test_iter = dltools.load_data_fashion_mnist(16, num_train=1, num_test=30)
    assert abs(dltools.evaluate_accuracy_gpu(net, test_iter) - r["test_acc"]) < 1e-9
