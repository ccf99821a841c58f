"""Tests of the training scripts in scripts/: one device rule, DDP matches single-process training,
each DDP script is a small diff of its single-device twin, the SLURM file is sane."""
import ast
import difflib
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import dltools
from dltools import distributed as dd
from support.processes import assert_no_process_left

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
ARGS = ["--epochs", "2", "--batch-size", "96", "--num-train", "576", "--lr", "0.1"]

# (single-device script, its DDP twin, most changed lines allowed).
PAIRS = [("train_single.py", "train_ddp.py", 62),
         ("train_resnet_single.py", "train_resnet_ddp.py", 82)]
DDP_SCRIPTS = [ddp for _, ddp, _ in PAIRS]
# Notebook 04's experiment script: one file for every configuration, single-process and DDP
# (under torchrun). It has no twin to diff against, but it has the family's shape.
FAMILY = ["train_single.py", "train_resnet_single.py", *DDP_SCRIPTS, "batch_scaling.py"]
USES_DDP = [*DDP_SCRIPTS, "batch_scaling.py"]
COLLECTIVES = {"all_reduce", "broadcast", "reduce", "all_gather", "all_gather_into_tensor",
               "reduce_scatter", "reduce_scatter_tensor", "scatter", "gather"}
CONSTRUCTORS = {"tensor", "zeros", "ones", "empty", "full", "stack", "cat", "as_tensor"}


@pytest.fixture(scope="module")
def common():
    sys.path.insert(0, str(SCRIPTS))
    try:
        yield importlib.import_module("common")
    finally:
        sys.path.remove(str(SCRIPTS))


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
    report = dd.run_torchrun(SCRIPTS / "train_ddp.py", nproc, *ARGS,
                             "--checkpoint", tmp_path / "ddp.pt")
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


def test_ddp_script_prepares_the_data_on_one_rank(tmp_path):
    """A fresh data folder (DLTOOLS_DATA) with a corrupt archive: under torchrun rank 0 alone
    checks and extracts it (dltools.data.load_fashion_mnist_distributed, through common.py) and
    names the file; the other ranks, which wait for it, say that rank 0 failed and why. (When
    every rank loaded by itself, each found the corrupt file on its own.)"""
    raw = tmp_path / "FashionMNIST" / "raw"
    raw.mkdir(parents=True)
    shared = dltools.data.data_root() / "FashionMNIST" / "raw"
    for name in dltools.data.FASHION_MNIST_ARCHIVES:
        shutil.copy(shared / name, raw / name)
    bad = raw / "train-labels-idx1-ubyte.gz"
    bad.write_bytes(bad.read_bytes()[:1000])
    with pytest.raises(dd.TorchrunError) as info:
        dd.run_torchrun(SCRIPTS / "train_ddp.py", 3, *ARGS, report=False, timeout=300,
                        env={"DLTOOLS_DATA": str(tmp_path)})
    log = info.value.output
    cause = f"{bad} is corrupt"
    assert log.count(f"rank 0 failed with DatasetUnavailableError: {cause}") == 2, log[-3000:]
    assert sorted(p.name for p in raw.iterdir()) == sorted(dltools.data.FASHION_MNIST_ARCHIVES)
    assert_no_process_left()


@pytest.mark.parametrize("script", FAMILY + ["common.py"])
def test_scripts_load_the_data_set_through_the_distributed_loader(script):
    """Only load_fashion_mnist_distributed, through common.py, which under DDP lets one rank per
    node prepare the files: a direct load_fashion_mnist under torchrun runs on every rank."""
    called = [getattr(node.func, "attr", getattr(node.func, "id", None))
              for node in ast.walk(ast.parse((SCRIPTS / script).read_text()))
              if isinstance(node, ast.Call)]
    assert not {"load_fashion_mnist", "load_data_fashion_mnist"} & set(called)
    if script == "common.py":
        assert called.count("load_fashion_mnist_distributed") == 2   # load_train_set, load_split


def changed_lines(single, ddp):
    a = (SCRIPTS / single).read_text().splitlines()
    b = (SCRIPTS / ddp).read_text().splitlines()
    return [line for line in difflib.unified_diff(a, b, lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("single, ddp, most", PAIRS)
def test_ddp_script_is_a_small_diff_of_its_single_device_twin(single, ddp, most):
    changed = changed_lines(single, ddp)
    assert 0 < len(changed) < most, len(changed)
    # The lines that change are DDP's, and the training loop's shape is shared.
    added = "\n".join(line for line in changed if line.startswith("+"))
    for needed in ("setup_ddp(", "DistributedSampler(", "set_epoch(", "DDP(",
                   "module.state_dict()", "teardown_ddp()"):
        assert needed in added, needed
    for text in ((SCRIPTS / single).read_text(), (SCRIPTS / ddp).read_text()):
        for shape in ("class Trainer:", "def _run_batch(", "def _run_epoch(",
                      "def _save_checkpoint(", "def train(", "def main(args):", '"--report"'):
            assert shape in text, shape
        assert "--out" not in text and "sys.path" not in text


@pytest.mark.parametrize("script", FAMILY)
def test_every_script_has_the_family_shape(script):
    """A Trainer with _run_batch and _run_epoch, one report flag (--report), no path hacks."""
    tree = ast.parse((SCRIPTS / script).read_text())
    classes = {node.name: node for node in tree.body if isinstance(node, ast.ClassDef)}
    assert "Trainer" in classes, "no Trainer class"
    methods = {node.name for node in classes["Trainer"].body if isinstance(node, ast.FunctionDef)}
    assert {"_run_batch", "_run_epoch"} <= methods, methods
    flags = [node.args[0].value for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "attr", None) == "add_argument" and node.args
             and isinstance(node.args[0], ast.Constant)]
    assert "--report" in flags and "--out" not in flags, flags
    text = (SCRIPTS / script).read_text()
    assert "sys.path" not in text and "--local_rank" not in text


@pytest.mark.parametrize("script", FAMILY)
def test_a_training_step_adds_no_wait_for_the_gpu(script):
    """_run_batch keeps its numbers on the device: a float(), .item(), .tolist() or a
    torch.tensor() built from Python numbers would add a wait for the GPU to every step. (The
    input batch's copy to the GPU, from unpinned memory, waits for it too: that one is the
    data's, and the same for every script.)"""
    text = (SCRIPTS / script).read_text()
    tree = ast.parse(text)
    (step,) = [node for node in ast.walk(tree)
               if isinstance(node, ast.FunctionDef) and node.name == "_run_batch"]
    source = ast.get_source_segment(text, step)
    for sync in ("float(", ".item()", ".tolist()", "torch.tensor(", ".cpu()", "int("):
        assert sync not in source, (script, sync)


@pytest.mark.parametrize("script", USES_DDP)
def test_teardown_only_after_success(script):
    """teardown_ddp() waits in a barrier: in a finally block, a rank that raised would wait there
    for peers blocked in training's collectives until the group's timeout (30 min), and torchrun
    would never see the failure."""
    tree = ast.parse((SCRIPTS / script).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Try):
            for part in node.finalbody + [h for handler in node.handlers for h in handler.body]:
                names = {getattr(n.func, "id", None) for n in ast.walk(part)
                         if isinstance(n, ast.Call)}
                assert "teardown_ddp" not in names, script


@pytest.mark.parametrize("script", USES_DDP)
def test_ddp_scripts_set_up_through_common(script):
    """setup_ddp()/teardown_ddp() from scripts/common.py; no group or device rule of their own."""
    tree = ast.parse((SCRIPTS / script).read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                and node.module == "common" for alias in node.names}
    assert {"setup_ddp", "teardown_ddp"} <= imported, imported
    called = {node.func.id for node in ast.walk(tree)
              if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)}
    assert {"setup_ddp", "teardown_ddp"} <= called
    text = (SCRIPTS / script).read_text()
    for own in ("init_process_group", "set_device", "nccl", "try_gpu", "destroy_process_group"):
        assert own not in text, own
    assert collective_tensors_off_device(text) == []


def collective_tensors_off_device(source):
    """Names passed to a collective that the same function builds with torch.* without device=."""
    bad = []
    for function in ast.walk(ast.parse(source)):
        if not isinstance(function, ast.FunctionDef):
            continue
        built = {}
        for node in ast.walk(function):
            if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Attribute)
                    and getattr(node.value.func.value, "id", None) == "torch"
                    and node.value.func.attr in CONSTRUCTORS):
                for target in node.targets:
                    if isinstance(target, ast.Name):
                        built[target.id] = any(k.arg == "device" for k in node.value.keywords)
        for node in ast.walk(function):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and getattr(node.func.value, "id", None) == "dist"
                    and node.func.attr in COLLECTIVES and node.args
                    and isinstance(node.args[0], ast.Name)
                    and built.get(node.args[0].id) is False):
                bad.append(node.args[0].id)
    return bad


def test_the_device_check_notices_a_cpu_tensor_in_a_collective():
    """The check above can fail: the old train_ddp.py's CPU loss total in an NCCL group."""
    source = "def f(device):\n    total = torch.zeros(2)\n    dist.all_reduce(total)\n"
    assert collective_tensors_off_device(source) == ["total"]
    fixed = source.replace("zeros(2)", "zeros(2, device=device)")
    assert collective_tensors_off_device(fixed) == []


def test_the_diff_test_notices_a_big_change():
    """The size check above can fail: a script with one method rewritten is no small diff."""
    assert len(changed_lines("train_single.py", "train_resnet_ddp.py")) > 80


@pytest.mark.parametrize("ddp", DDP_SCRIPTS)
def test_ddp_scripts_use_the_shared_set_up_only(ddp):
    text = (SCRIPTS / ddp).read_text()
    assert "--local_rank" not in text  # torchrun passes LOCAL_RANK in the environment
    # The device rule lives in one place (setup_ddp): no script picks a device or backend itself.
    for own in ("init_process_group", "set_device", "os.environ", "nccl", "try_gpu",
                "destroy_process_group"):
        assert own not in text, own
    # Every tensor built for a collective is made on the rank's device.
    for line in text.splitlines():
        if re.search(r"torch\.(zeros|ones|tensor|empty)\(", line):
            assert "device" in line, line


@pytest.mark.parametrize("gpus, local_rank, local_world_size, expected, backend", [
    (2, 1, 2, torch.device("cuda", 1), "cpu:gloo,cuda:nccl"),
    (1, 1, 2, torch.device("cpu"), "gloo"),    # 1 GPU, nproc 2: both ranks on the CPU
    (0, 0, 2, torch.device("cpu"), "gloo"),
])
def test_setup_ddp_follows_the_device_rule(common, monkeypatch, gpus, local_rank,
                                           local_world_size, expected, backend):
    current = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: gpus > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: gpus)
    monkeypatch.setattr(torch.cuda, "set_device", current.append)
    monkeypatch.setattr(dist, "is_nccl_available", lambda: True)
    joined = []
    monkeypatch.setattr(dist, "init_process_group", lambda b, **kw: joined.append((b, kw)))
    for name, value in (("RANK", local_rank), ("WORLD_SIZE", local_world_size),
                        ("LOCAL_RANK", local_rank), ("LOCAL_WORLD_SIZE", local_world_size)):
        monkeypatch.setenv(name, str(value))
    unused_gpus = 0 < gpus < local_world_size
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert common.setup_ddp() == expected
    assert any("every rank runs on the CPU" in str(w.message) for w in caught) == unused_gpus
    assert joined == [(backend, {"device_id": expected if gpus > 1 else None})]
    assert current == ([expected] if expected.type == "cuda" else [])


def test_ddp_scripts_refuse_to_run_without_torchrun(tmp_path):
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    proc = subprocess.run([sys.executable, str(SCRIPTS / "train_ddp.py"), "--report",
                           str(tmp_path / "r.json")], capture_output=True, text=True, env=env)
    assert proc.returncode != 0
    assert "launch it with torchrun" in proc.stderr and "train_ddp.py" in proc.stderr
    assert not (tmp_path / "r.json").exists()


def test_slurm_script_is_valid_bash_and_calls_torchrun_per_node():
    path = SCRIPTS / "slurm_ddp.sbatch"
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: cannot syntax-check the SLURM script")
    subprocess.run(["bash", "-n", str(path)], check=True)
    text = path.read_text()
    assert text.startswith("#!/bin/bash")
    assert re.search(r"^#SBATCH --nodes=\d+", text, re.M)
    assert re.search(r"^#SBATCH --ntasks-per-node=1$", text, re.M)  # one torchrun per node
    start = re.search(r"^srun ", text, re.M).start()  # the command, not a comment about srun
    launch = " ".join(text[start:].replace("\\\n", " ").split())
    assert launch.startswith('srun --cpus-per-task="$SLURM_CPUS_PER_TASK" python -m '
                             'torch.distributed.run ')
    for flag in ('--nnodes="$SLURM_NNODES"', "--nproc_per_node=", '--rdzv_id="$SLURM_JOB_ID"',
                 "--rdzv_backend=c10d", "--rdzv_endpoint="):
        assert flag in launch, flag
    assert "scripts/train_ddp.py" in launch
    assert "--standalone" not in launch  # several nodes meet at the rendezvous endpoint instead
    # The course's environment is activated, from the submit folder, before srun runs.
    lines = [line.strip() for line in text.splitlines()]
    srun_line = next(i for i, line in enumerate(lines) if line.startswith("srun "))
    activate = lines.index("source .venv/bin/activate")
    assert lines.index('cd "$SLURM_SUBMIT_DIR"') < activate < srun_line


def dry_run_slurm(tmp_path, nodes, gpus, env=None, getent="10.0.0.5 node1"):
    """Run scripts/slurm_ddp.sbatch with DRY_RUN=1 as Slurm would on the first of ``nodes`` nodes
    with ``gpus`` GPUs each (scontrol and getent faked); return the finished process."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed: cannot run the SLURM script")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "scontrol").write_text("#!/bin/sh\necho node1; echo node2\n")
    (fake / "getent").write_text(f"#!/bin/sh\necho '{getent}'\n")
    for tool in fake.iterdir():
        tool.chmod(0o755)
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "activate").write_text("")
    slurm = {"SLURM_SUBMIT_DIR": str(tmp_path), "SLURM_JOB_NODELIST": "node[1-2]",
             "SLURM_NNODES": str(nodes), "SLURM_GPUS_ON_NODE": str(gpus),
             "SLURM_CPUS_PER_TASK": str(4 * gpus), "SLURM_JOB_ID": "42", "DRY_RUN": "1"}
    environ = {k: v for k, v in os.environ.items() if k != "GLOO_SOCKET_IFNAME"}
    return subprocess.run(["bash", str(SCRIPTS / "slurm_ddp.sbatch")], capture_output=True,
                          text=True, env={**environ, **slurm, **(env or {}),
                                          "PATH": f"{fake}:{os.environ['PATH']}"})


@pytest.mark.parametrize("nodes, gpus", [(2, 4), (2, 3), (3, 1)])
def test_slurm_batch_and_learning_rate_follow_the_job(tmp_path, nodes, gpus):
    """The global batch splits evenly over any job's GPUs, and the lr follows the linear-scaling
    rule from train_ddp.py's reference (lr 0.1 at 96)."""
    done = dry_run_slurm(tmp_path, nodes, gpus)
    assert done.returncode == 0, done.stderr
    launch = done.stdout.strip()
    batch = int(re.search(r"--batch-size (\d+)", launch).group(1))
    lr = float(re.search(r"--lr (\S+)", launch).group(1))
    assert batch % (nodes * gpus) == 0 and batch // (nodes * gpus) == 48
    assert lr == pytest.approx(0.1 * batch / 96)
    assert f"--nproc_per_node={gpus}" in launch and f"--nnodes={nodes}" in launch


def test_slurm_script_stops_when_gloo_would_bind_to_loopback(tmp_path):
    done = dry_run_slurm(tmp_path, 2, 4, getent="127.0.1.1 node1")
    assert done.returncode == 1 and "GLOO_SOCKET_IFNAME" in done.stderr
    assert not done.stdout.strip()  # nothing launched
    (tmp_path / "again").mkdir()
    done = dry_run_slurm(tmp_path / "again", 2, 4, env={"GLOO_SOCKET_IFNAME": "eth0"},
                         getent="127.0.1.1 node1")
    assert done.returncode == 0 and done.stdout.startswith("srun ")


def test_bash_n_catches_a_broken_script(tmp_path):
    """The syntax check above can fail: a script with an unclosed quote does not pass."""
    if shutil.which("bash") is None:
        pytest.skip("bash is not installed")
    broken = tmp_path / "broken.sbatch"
    broken.write_text('#!/bin/bash\nsrun python -m torch.distributed.run --nnodes="2\n')
    assert subprocess.run(["bash", "-n", str(broken)], capture_output=True).returncode != 0
