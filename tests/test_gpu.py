"""What a CPU-only CI cannot run: notebooks 01-04 and every training script, on the GPUs present.

The notebooks' GPU cells (``if dltools.num_gpus() >= 2: ...``) and the scripts' CUDA paths are
skipped on a machine without CUDA. On a GPU machine, run them all with::

    python3 course.py test -m gpu

Each notebook runs top to bottom with nbval on one GPU (``CUDA_VISIBLE_DEVICES`` set to the first
one) and on all GPUs present (skipped with fewer than 2), in a subprocess ``python -m pytest
notebooks/NAME.ipynb --nbval-lax``: every cell runs with its asserts, which is where the notebooks
check their claims (in the instructor versions the exercise checks raise on a wrong solution, as
while grading), but the printed outputs are not compared with the saved ones, which come from a
CPU (device names, timings and float rounding differ on GPUs). The scripts run with small sizes:
the single-device ones directly, the DDP ones with ``dltools.distributed.run_torchrun`` on one GPU
and on all GPUs present, and notebook 04's ``batch_scaling.py`` in its one-device, two-device
(``nn.DataParallel``) and DDP configurations.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dltools.exercises import GRADING_ENV
from notebook_versions import executed_notebooks

ROOT = Path(__file__).resolve().parent.parent
NUM_GPUS = torch.cuda.device_count()
RUN_THEM = "python3 course.py test -m gpu"

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(NUM_GPUS == 0, reason=f"no CUDA GPU here; on a GPU machine run: {RUN_THEM}"),
]

# instructor/NN_*.ipynb where it exists (solutions filled in), else notebooks/NN_*.ipynb.
NOTEBOOKS = [str(p.relative_to(ROOT)) for p in executed_notebooks() if p.name[:2] in
             ("01", "02", "03", "04")]
NPROCS = [
    pytest.param(1, id="1-gpu"),
    pytest.param(max(NUM_GPUS, 2), id="all-gpus", marks=pytest.mark.skipif(
        NUM_GPUS < 2, reason=f"needs 2 or more GPUs (this machine has {NUM_GPUS})")),
]


def _run(cmd, timeout=3600, env=None):
    done = subprocess.run([str(c) for c in cmd], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env=None if env is None else {**os.environ, **env})
    assert done.returncode == 0, (f"{' '.join(map(str, cmd))} failed:\n{done.stdout[-6000:]}\n"
                                  f"{done.stderr[-3000:]}")
    return done


def _visible(nproc):
    """The environment that shows ``nproc`` GPUs: the first one only, or all of them."""
    return {"CUDA_VISIBLE_DEVICES": "0"} if nproc == 1 else None


def test_the_notebooks_are_found():
    assert len(NOTEBOOKS) == 4, NOTEBOOKS


@pytest.mark.parametrize("nproc", NPROCS)
@pytest.mark.parametrize("name", NOTEBOOKS)
def test_notebook_runs_with_its_asserts_on_the_gpus(name, nproc):
    # An instructor notebook holds the solutions: there, as while grading, a check that finds one
    # wrong raises (nbval-lax compares no output, so a printed "Not yet" would pass unseen).
    grading = {GRADING_ENV: "1"} if name.startswith("instructor/") else {}
    _run([sys.executable, "-m", "pytest", name, "-q", "--nbval-lax"],
         env={**(_visible(nproc) or {}), **grading})


def test_train_single_on_a_gpu(tmp_path):
    report = tmp_path / "single.json"
    _run([sys.executable, "scripts/train_single.py", "--epochs", "1", "--num-train", "256",
          "--batch-size", "64", "--report", report])
    assert json.loads(report.read_text())["world_size"] == 1


def test_train_resnet_single_on_a_gpu(tmp_path):
    report = tmp_path / "resnet_single.json"
    _run([sys.executable, "scripts/train_resnet_single.py", "--epochs", "1", "--num-train", "512",
          "--num-test", "256", "--width", "16", "--batch-size", "64", "--report", report])
    assert json.loads(report.read_text())["world_size"] == 1


BATCH_SCALING = ["--seeds", "0", "--width", "4", "--num-train", "512", "--num-test", "256",
                 "--epochs", "1", "--batch-divisor", "8", "--warmup-epochs", "1"]


def test_batch_scaling_one_device_and_dataparallel(tmp_path):
    report = tmp_path / "bs.json"
    configs = ["one-256", "one-512-warmup"]
    if NUM_GPUS >= 2:
        configs += ["dp-512", "dp-512-after-256"]
    _run([sys.executable, "scripts/batch_scaling.py", "--configs", *configs, *BATCH_SCALING,
          "--report", report])
    assert sorted(r["config"] for r in json.loads(report.read_text())["runs"]) == sorted(configs)


@pytest.mark.skipif(NUM_GPUS < 2, reason=f"needs 2 or more GPUs (this machine has {NUM_GPUS})")
def test_batch_scaling_ddp_with_torchrun():
    from dltools.distributed import run_torchrun

    report = run_torchrun(ROOT / "scripts" / "batch_scaling.py", 2, "--configs", "ddp-512",
                          *BATCH_SCALING, timeout=1800)
    assert [r["config"] for r in report["runs"]] == ["ddp-512"]


@pytest.mark.parametrize("nproc", NPROCS)
def test_train_ddp_with_torchrun(nproc):
    from dltools.distributed import run_torchrun

    report = run_torchrun(ROOT / "scripts" / "train_ddp.py", nproc, "--epochs", "1",
                          "--num-train", "256", "--batch-size", "64", timeout=1800)
    assert report["world_size"] == nproc


@pytest.mark.parametrize("nproc", NPROCS)
def test_train_resnet_ddp_with_torchrun(nproc):
    from dltools.distributed import run_torchrun

    report = run_torchrun(ROOT / "scripts" / "train_resnet_ddp.py", nproc, "--epochs", "1",
                          "--num-train", "512", "--num-test", "256", "--width", "16",
                          "--batch-size", "64", timeout=1800)
    assert report["world_size"] == nproc
    assert "nccl" in report["backend"]
    assert report["params_identical"] is True


def test_parallel_apply_runs_the_replicas_on_the_callers_stream():
    # The current CUDA stream is per thread: dltools' replica threads must take the caller's, as
    # PyTorch's parallel_apply does, or they race the copies queued on it.
    from torch import nn

    from dltools import parallel

    class RecordStream(nn.Module):
        def forward(self, x):
            self.seen = torch.cuda.current_stream(x.device)
            return x * 2

    devices = [torch.device("cuda", 0)] * 2  # two replica threads on one GPU
    modules = [RecordStream(), RecordStream()]
    side = torch.cuda.Stream(devices[0])
    with torch.cuda.stream(side):
        outs = parallel.parallel_apply(modules, [(torch.ones(4, device="cuda"),)] * 2,
                                       devices=devices)
    assert all(m.seen == side for m in modules)
    assert all(torch.equal(o.cpu(), torch.full((4,), 2.0)) for o in outs)


def test_float32_training_on_a_gpu_agrees_across_batch_splits():
    # What notebook 03 asks of DDP on 2 or more GPUs against one GPU: scripts/common.full_float32
    # makes cuDNN's convolutions full float32, and one batch and two halves end within 1e-5.
    out = _run([sys.executable, "benchmarks/bench_float32_agreement.py", "--no-plot"]).stdout
    print(out)
    rows = {line.split("|")[1].strip() + " / " + line.split("|")[2].strip(): line
            for line in out.splitlines() if line.startswith("| cuda:0")}
    assert rows["cuda:0, ieee / batch of 96 vs two halves"].rstrip().endswith("| yes |"), out


def test_notebook_01_checks_simulate_more_gpus_than_the_machine_has(capsys):
    # checks_01 runs exercises 5 and 6 on 2 and 3 simulated GPUs (FakeTensorMode). On a machine
    # with fewer real GPUs (Colab's one) a fake cuda:1 used to raise "invalid device ordinal".
    import checks_01
    from support.checks import assert_right, assert_wrong
    from test_checks_01 import allreduce_no_to, allreduce_right, split_no_to, split_right

    assert_right(capsys, checks_01.check_split_batch, split_right)
    assert_wrong(capsys, checks_01.check_split_batch, split_no_to, "must be on devices[i]")
    assert_right(capsys, checks_01.check_allreduce, allreduce_right)
    assert_wrong(capsys, checks_01.check_allreduce, allreduce_no_to, "same device")
