"""Tests of the training scripts in scripts/: DDP matches single-process training, the SLURM file is sane."""
import difflib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dltools import distributed as dd
from test_distributed import assert_no_process_left

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
ARGS = ["--epochs", "2", "--batch-size", "96", "--num-train", "576", "--lr", "0.1"]


@pytest.fixture(autouse=True, scope="module")
def no_process_left_after_module():
    yield
    assert_no_process_left()


@pytest.fixture(scope="module")
def single_run(tmp_path_factory):
    """Train once with scripts/train_single.py, in this process (its main is importable)."""
    tmp = tmp_path_factory.mktemp("single")
    sys.path.insert(0, str(SCRIPTS))
    try:
        import train_single
        train_single.main(train_single.parse_args(
            ARGS + ["--checkpoint", str(tmp / "single.pt"), "--report", str(tmp / "single.json")]))
    finally:
        sys.path.remove(str(SCRIPTS))
    return json.loads((tmp / "single.json").read_text()), torch.load(tmp / "single.pt")


def test_ddp_replicas_agree_and_match_single_process(single_run, tmp_path):
    single_report, single_params = single_run
    nproc = 3  # the notebook runs 2; 3 also checks the sampler's every-N-th split
    report = dd.run_torchrun(SCRIPTS / "train_ddp.py", nproc, *ARGS, "--checkpoint", tmp_path / "ddp.pt")
    assert report["world_size"] == nproc
    assert len(report["fingerprints"]) == nproc and len(set(report["fingerprints"])) == 1
    ddp_params = torch.load(tmp_path / "ddp.pt")
    assert list(ddp_params) == list(single_params)  # saved from model.module: no 'module.' prefix
    for name in single_params:
        torch.testing.assert_close(ddp_params[name], single_params[name], rtol=0, atol=1e-5)
    assert report["losses"] == pytest.approx(single_report["losses"], abs=1e-5)
    assert single_report["losses"][1] < single_report["losses"][0]
    assert report["log"].count("epoch 0:") == 1  # only rank 0 prints
    assert_no_process_left()


def test_ddp_script_refuses_a_batch_the_processes_cannot_share():
    with pytest.raises(dd.TorchrunError, match="must be divisible"):
        dd.run_torchrun(SCRIPTS / "train_ddp.py", 2, "--batch-size", "95", "--num-train", "190",
                        "--epochs", "1", report=False)
    assert_no_process_left()


def test_ddp_script_is_a_small_diff_of_the_single_one():
    single = (SCRIPTS / "train_single.py").read_text().splitlines()
    ddp = (SCRIPTS / "train_ddp.py").read_text().splitlines()
    changed = [line for line in difflib.unified_diff(single, ddp, lineterm="", n=0)
               if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) < 60, len(changed)
    text = "\n".join(ddp)
    assert "--local_rank" not in text  # torchrun passes LOCAL_RANK in the environment
    for needed in ("init_process_group", "LOCAL_RANK", "DistributedSampler", "set_epoch",
                   "module.state_dict()", "destroy_process_group"):
        assert needed in text, needed


def test_slurm_script_is_valid_bash_and_calls_torchrun_per_node():
    path = SCRIPTS / "slurm_ddp.sbatch"
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: cannot syntax-check the SLURM script")
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    assert text.startswith("#!/bin/bash")
    assert re.search(r"^#SBATCH --nodes=\d+", text, re.M)
    assert re.search(r"^#SBATCH --ntasks-per-node=1$", text, re.M)  # one torchrun per node
    launch = " ".join(text[text.index("srun "):].replace("\\\n", " ").split())
    assert launch.startswith("srun python -m torch.distributed.run ")
    for flag in ('--nnodes="$SLURM_NNODES"', "--nproc_per_node=", '--rdzv_id="$SLURM_JOB_ID"',
                 "--rdzv_backend=c10d", "--rdzv_endpoint="):
        assert flag in launch, flag
    assert "scripts/train_ddp.py" in launch
    assert "--standalone" not in launch  # several nodes meet at the rendezvous endpoint instead


def test_bash_n_catches_a_broken_script(tmp_path):
    """The syntax check above can fail: a script with an unclosed quote does not pass."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    broken = tmp_path / "broken.sbatch"
    broken.write_text('#!/bin/bash\nsrun python -m torch.distributed.run --nnodes="2\n')
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True).returncode != 0
