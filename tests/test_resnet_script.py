"""Tests of scripts/train_resnet_ddp.py (notebook 04's training under DDP) and its single-device
twin scripts/train_resnet_single.py."""
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import dltools
from dltools import distributed as dd
from support.processes import assert_no_process_left

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
SCRIPT = SCRIPTS / "train_resnet_ddp.py"
TINY = ["--num-train", "64", "--num-test", "30", "--width", "4", "--epochs", "2",
        "--batch-size", "16", "--lr", "0.05"]


@pytest.fixture(scope="module")
def scripts():
    """The two scripts and common.py as modules (the scripts import common from their folder)."""
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield {name: importlib.import_module(name)
               for name in ("common", "train_resnet_ddp", "train_resnet_single")}
    finally:
        sys.path.remove(str(SCRIPTS))


def test_global_batch_is_split_evenly(scripts):
    split = scripts["common"].per_rank_batch_size
    assert split(512, 2) == 256
    assert split(256, 1) == 256
    with pytest.raises(SystemExit, match="must be divisible by the 3 processes"):
        split(512, 3)


@pytest.mark.parametrize("name", ["train_resnet_ddp", "train_resnet_single"])
def test_flags_and_bad_arguments(scripts, capsys, name):
    parse = scripts[name].parse_args
    with pytest.raises(SystemExit):
        parse(["--epochs", "0"])
    assert "argument --epochs: must be 1 or more, got 0" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["--out", "x.json"])  # one report flag: --report
    args = parse(["--report", "r.json", "--checkpoint", "c.pt", "--width", "8", "--epochs", "3",
                  "--batch-size", "64", "--lr", "0.3", "--num-train", "100", "--num-test", "50",
                  "--seed", "2", "--data-root", "d"])
    assert (args.report, args.checkpoint, args.width, args.epochs, args.batch_size, args.lr,
            args.num_train, args.num_test, args.seed, args.data_root) == (
        Path("r.json"), Path("c.pt"), 8, 3, 64, 0.3, 100, 50, 2, "d")
    assert parse([]).batch_size == 512  # study note 5's 2-GPU global batch


def test_subset_size_is_checked(scripts):
    with pytest.raises(ValueError, match="--num-test must be in 1..10000"):
        scripts["common"].load_split(False, 10_001)


def test_refuses_to_run_without_torchrun(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--report", str(tmp_path / "r.json")],
                          capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert "launch it with torchrun" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_two_process_run_writes_results_and_a_plain_checkpoint(tmp_path):
    ckpt = tmp_path / "net.pt"
    r = dd.run_torchrun(SCRIPT, 2, *TINY, "--checkpoint", ckpt)
    assert (r["world_size"], r["backend"], r["per_rank_batch_size"]) == (2, "gloo", 8)
    assert r["global_batch_size"] == 16 and r["lr"] == 0.05 and r["epochs"] == 2
    assert r["steps_per_epoch"] == 4                      # 64 images / 2 ranks / 8 per step
    assert r["shard_sizes"] == [32, 32] and r["shards_cover_train_set_once"]
    assert r["set_epoch_reshuffles"] is True and r["params_identical"] is True
    assert [row[0] for row in r["history"]] == [1, 2] and r["test_acc"] == r["history"][-1][3]
    assert r["sec_per_epoch"] > 0 and r["examples_per_sec"] > 0
    assert r["train_examples_per_epoch"] == 64            # the train means cover both ranks' shards
    assert r["log"].count("epoch 1:") == 1                # only rank 0 prints
    # The checkpoint has no "module." prefix and scores what the script reported on the same images.
    state = torch.load(ckpt)
    assert not any(k.startswith("module.") for k in state)
    net = dltools.resnet18(10, width=4)
    net.load_state_dict(state)
    _, test_iter = dltools.load_data_fashion_mnist(16, num_train=1, num_test=30)
    assert abs(dltools.evaluate_accuracy_gpu(net, test_iter) - r["test_acc"]) < 1e-9
    assert_no_process_left()


def test_every_rank_scores_with_rank_0s_batchnorm_statistics(tmp_path):
    """At a scale where the network learns (well above chance), the test accuracy the script
    reports equals the saved checkpoint's (rank 0's weights and BatchNorm statistics) on the same
    images. Each rank scores its own share of the test set: without the broadcast of rank 0's
    running statistics, rank 1 would score with its own, which its last training step moved."""
    ckpt = tmp_path / "net.pt"
    r = dd.run_torchrun(SCRIPT, 2, "--num-train", "1024", "--num-test", "500", "--width", "4",
                        "--epochs", "3", "--batch-size", "32", "--lr", "0.1", "--checkpoint", ckpt)
    assert r["test_acc"] > 0.3                            # chance is 0.1
    net = dltools.resnet18(10, width=4)
    net.load_state_dict(torch.load(ckpt))
    _, test_iter = dltools.load_data_fashion_mnist(100, num_train=1, num_test=500)
    assert abs(dltools.evaluate_accuracy_gpu(net, test_iter) - r["test_acc"]) < 1e-9
    assert_no_process_left()


def test_one_process_ddp_is_the_single_device_script(tmp_path):
    """With one process, DDP changes nothing: same batches (same seeded shuffle), same weights."""
    one_thread = {"OMP_NUM_THREADS": "1"}  # the same kernels on both sides
    subprocess.run([sys.executable, str(SCRIPTS / "train_resnet_single.py"), *TINY,
                    "--report", str(tmp_path / "single.json"),
                    "--checkpoint", str(tmp_path / "single.pt")],
                   check=True, capture_output=True, env={**os.environ, **one_thread})
    single = json.loads((tmp_path / "single.json").read_text())
    ddp = dd.run_torchrun(SCRIPT, 1, *TINY, "--checkpoint", tmp_path / "ddp.pt", env=one_thread)
    assert ddp["fingerprints"] == single["fingerprints"]  # bit for bit
    flat = [x for row in single["history"] for x in row]
    assert [x for row in ddp["history"] for x in row] == pytest.approx(flat, abs=1e-6)
    assert ddp["shards_cover_train_set_once"] and ddp["shard_sizes"] == [64]
    for key in ("global_batch_size", "per_rank_batch_size", "steps_per_epoch", "num_train",
                "num_test", "width", "lr", "epochs"):
        assert ddp[key] == single[key], key
    single_state = torch.load(tmp_path / "single.pt")
    ddp_state = torch.load(tmp_path / "ddp.pt")
    assert list(single_state) == list(ddp_state)
    assert all(torch.equal(single_state[k], ddp_state[k]) for k in single_state)
    assert_no_process_left()
