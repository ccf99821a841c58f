"""Nothing a script wrote before is lost (issue: nothing lost, nothing left running).

Every training script checks its arguments and output paths before any work (argparse types in
scripts/common.py), writes its checkpoint and report whole or not at all, and batch_scaling.py
never drops the runs of an earlier report."""
import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dltools import distributed as dd
from support.processes import assert_no_process_left

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
TRAINING = ["train_single", "train_ddp", "train_resnet_single", "train_resnet_ddp"]
BAD = [(["--epochs", "-1"], "argument --epochs: must be 1 or more, got -1"),
       (["--epochs", "0"], "argument --epochs: must be 1 or more, got 0"),
       (["--batch-size", "0"], "argument --batch-size: must be 1 or more"),
       (["--num-train", "0"], "argument --num-train: must be 1 or more"),
       (["--num-train", "60001"], "argument --num-train: Fashion-MNIST has 60,000 train images"),
       (["--width", "two"], "argument --width: 'two' is not a whole number"),
       (["--lr", "0"], "argument --lr: must be a number above 0"),
       (["--lr", "nan"], "argument --lr: must be a number above 0"),
       (["--report", "/no/such/folder/r.json"], "the folder /no/such/folder does not exist"),
       (["--checkpoint", str(SCRIPTS)], "is a folder: give a file name in it")]


@pytest.fixture(scope="module")
def scripts():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield {name: importlib.import_module(name)
               for name in ["common", *TRAINING, "batch_scaling"]}
    finally:
        sys.path.remove(str(SCRIPTS))


@pytest.mark.parametrize("name", TRAINING)
@pytest.mark.parametrize("argv, says", BAD, ids=lambda x: " ".join(x) if isinstance(x, list)
                         else None)
def test_bad_arguments_stop_before_any_work(scripts, capsys, name, argv, says):
    with pytest.raises(SystemExit) as stop:
        scripts[name].parse_args(argv)
    assert stop.value.code == 2 and says in capsys.readouterr().err


def _old_outputs(tmp_path):
    checkpoint, report = tmp_path / "old.pt", tmp_path / "old.json"
    torch.save({"weights": torch.arange(3)}, checkpoint)
    report.write_text('{"losses": [0.5]}\n')
    return checkpoint, report, checkpoint.read_bytes(), report.read_bytes()


def test_a_run_refused_leaves_the_earlier_outputs(tmp_path):
    checkpoint, report, pt, js = _old_outputs(tmp_path)
    proc = subprocess.run([sys.executable, str(SCRIPTS / "train_single.py"), "--epochs", "0",
                           "--checkpoint", str(checkpoint), "--report", str(report)],
                          capture_output=True, text=True)
    assert proc.returncode == 2 and "--epochs: must be 1 or more" in proc.stderr
    assert checkpoint.read_bytes() == pt and report.read_bytes() == js


def test_a_ddp_run_refused_leaves_the_earlier_outputs(tmp_path):
    checkpoint, report, pt, js = _old_outputs(tmp_path)
    with pytest.raises(dd.TorchrunError, match="--epochs: must be 1 or more, got -1"):
        dd.run_torchrun(SCRIPTS / "train_ddp.py", 2, "--epochs", "-1", "--checkpoint",
                        checkpoint, "--report", report, report=False)
    assert checkpoint.read_bytes() == pt and report.read_bytes() == js
    assert_no_process_left()


def test_an_interrupted_save_leaves_the_earlier_file(scripts, tmp_path, monkeypatch):
    common = scripts["common"]
    checkpoint, report, pt, js = _old_outputs(tmp_path)

    def dies_midway(obj, f):
        Path(f).write_bytes(b"half a checkpoint")
        raise KeyboardInterrupt

    monkeypatch.setattr(common.torch, "save", dies_midway)
    with pytest.raises(KeyboardInterrupt):
        common.save_checkpoint({"w": torch.ones(2)}, checkpoint)
    real_write_text = Path.write_text

    def write_half_then_die(self, text, *args, **kwargs):
        real_write_text(self, text[:5])
        raise KeyboardInterrupt

    monkeypatch.setattr(Path, "write_text", write_half_then_die)
    with pytest.raises(KeyboardInterrupt):
        common.write_report(report, losses=[0.1])
    assert checkpoint.read_bytes() == pt and report.read_bytes() == js
    assert sorted(p.name for p in tmp_path.iterdir()) == ["old.json", "old.pt"]   # no temp file
    monkeypatch.undo()
    common.save_checkpoint({"w": torch.ones(2)}, checkpoint)
    assert torch.load(checkpoint)["w"].tolist() == [1.0, 1.0]


def test_batch_scaling_keeps_an_earlier_report_of_another_scale(tmp_path):
    script = SCRIPTS / "batch_scaling.py"
    earlier = {"scale": {"width": 2, "num_train": 192, "num_test": 100, "epochs": 2,
                         "batch_divisor": 8, "warmup_epochs": 1, "bn_images": 2000},
               "runs": [{"config": "one-256", "seed": 0}]}
    report = tmp_path / "bs.json"
    report.write_text(json.dumps(earlier))
    proc = subprocess.run([sys.executable, str(script), "--configs", "one-256", "--width", "4",
                           "--epochs", "2", "--batch-divisor", "8", "--warmup-epochs", "1",
                           "--num-train", "192", "--num-test", "100", "--report", str(report)],
                          capture_output=True, text=True)
    assert proc.returncode == 1
    assert "holds 1 runs at another scale (width 2 there, 4 now); they would be lost" in proc.stderr
    assert json.loads(report.read_text()) == earlier
    report.write_text("not a report")
    proc = subprocess.run([sys.executable, str(script), "--report", str(report)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "is not a report of this script" in proc.stderr
    assert report.read_text() == "not a report"


@pytest.mark.parametrize("name", TRAINING)
def test_checkpoint_and_report_must_be_different_files(scripts, capsys, tmp_path, name):
    same = str(tmp_path / "out")
    with pytest.raises(SystemExit) as stop:
        scripts[name].parse_args(["--checkpoint", same, "--report", same])
    assert stop.value.code == 2
    assert "--checkpoint and --report are the same file" in capsys.readouterr().err


def test_a_read_only_output_is_refused(scripts, tmp_path, monkeypatch):
    # what os.access answers for the file (root may write any file, so here it is told no)
    kept = tmp_path / "kept.json"
    kept.write_text("{}")
    real = os.access
    monkeypatch.setattr(scripts["common"].os, "access",
                        lambda path, mode: False if Path(path) == kept else real(path, mode))
    with pytest.raises(argparse.ArgumentTypeError, match="kept.json is read-only"):
        scripts["common"].output_file(str(kept))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_folder_that_takes_no_files_is_refused_before_any_work(scripts):
    """/proc exists and os.access calls it writable for root, but no file can be made there: the
    try with a temporary file refuses it at once, not after training (sweep 2, E1 and E2)."""
    with pytest.raises(argparse.ArgumentTypeError, match="cannot write in /proc"):
        scripts["common"].output_file("/proc/x.pt")


def test_a_file_where_a_folder_should_be_is_named(scripts, tmp_path):
    """--report old.pt/r.json with old.pt a file said "the folder old.pt does not exist: create
    it first", which cannot be done (sweep 3, A5c)."""
    old = tmp_path / "old.pt"
    old.write_text("weights")
    for text in (f"{old}/r.json", f"{old}/deeper/r.json"):
        with pytest.raises(argparse.ArgumentTypeError, match=r"old.pt is a file, not a folder"):
            scripts["common"].output_file(text)
    assert old.read_text() == "weights"


def test_a_negative_seed_is_refused_by_argparse(scripts, capsys):
    """NumPy's generator takes seeds from 0 to 2**32 - 1: batch_scaling names --seeds at once
    instead of a worker's traceback (sweep 2, E3)."""
    with pytest.raises(SystemExit) as stop:
        scripts["batch_scaling"].parse_args(["--seeds", "-1"])
    assert stop.value.code == 2 and "a random seed is a whole number from 0" in \
        capsys.readouterr().err


def test_workers_stop_with_a_killed_torchrun_and_earlier_files_survive(tmp_path):
    """torchrun killed outright (SIGKILL: it cannot stop its workers) used to leave them training
    on, and they then wrote over the earlier checkpoint and report (sweep 2, O1 and O2). Each
    worker now has the parent-death signal (common.setup_ddp: exit_with_parent)."""
    import signal
    import time

    import psutil

    from support.processes import gone
    old_ckpt, old_report = tmp_path / "old.pt", tmp_path / "old.json"
    old_ckpt.write_bytes(b"earlier checkpoint")
    old_report.write_text('{"earlier": true}')
    torchrun = subprocess.Popen(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
         str(SCRIPTS / "train_ddp.py"), "--epochs", "50", "--num-train", "20000", "--width", "4",
         "--checkpoint", str(old_ckpt), "--report", str(old_report)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        end, workers = time.monotonic() + 120, []
        while len(workers) < 2 and time.monotonic() < end:   # the workers have started
            time.sleep(0.5)
            workers = [p.pid for p in psutil.Process(torchrun.pid).children(recursive=True)
                       if "train_ddp.py" in " ".join(p.cmdline())]
        assert len(workers) == 2, "torchrun's workers did not start"
        time.sleep(3)   # into set-up or training
        torchrun.send_signal(signal.SIGKILL)
        torchrun.wait()
        assert gone(workers, wait=20), [p for p in workers if psutil.pid_exists(p)]
    finally:
        if torchrun.poll() is None:
            torchrun.kill()
    assert old_ckpt.read_bytes() == b"earlier checkpoint"
    assert old_report.read_text() == '{"earlier": true}'


@pytest.mark.parametrize("argv, says", [
    (["--figure", "{d}/r.png", "--report", "{d}/r.png"], "--report and --figure are the same file"),
    (["--figure", "{d}/r.json", "--report", "{d}/s.json"], "give a file name ending in one of"),
    (["--seeds", "1", "1"], "--seeds names [1] more than once"),
    (["--configs", "one-256", "one-256"], "--configs names ['one-256'] more than once"),
    (["--plot-only", "--figure", "{d}/f.png"], "--plot-only redraws --figure from the runs in "
                                               "--report: give both"),
    (["--plot-only", "--report", "{d}/r.json"], "give both"),
    (["--epochs", "0"], "--epochs must be at least 1"),
])
def test_batch_scaling_refuses_arguments_that_would_lose_or_repeat_runs(
        scripts, capsys, tmp_path, argv, says):
    with pytest.raises(SystemExit) as stop:
        scripts["batch_scaling"].parse_args([a.format(d=tmp_path) for a in argv])
    assert stop.value.code == 2 and says in capsys.readouterr().err
