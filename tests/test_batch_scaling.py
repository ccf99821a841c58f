"""scripts/batch_scaling.py: the experiment behind notebook 04's accuracy puzzle, tiny scale."""
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from dltools import distributed as dd

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "batch_scaling.py"
TINY = ["--width", "2", "--epochs", "2", "--batch-divisor", "8", "--warmup-epochs", "1",
        "--num-train", "192", "--num-test", "100", "--seeds", "0", "1"]


def run(*args, check=True):
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)], capture_output=True,
                          text=True, check=check, cwd=ROOT)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    path = tmp_path_factory.mktemp("bs") / "report.json"
    run("--configs", "one-256", "one-512", "one-512-warmup", "dp-512", *TINY, "--jobs", "2",
        "--report", path)
    return path, json.loads(path.read_text())


@pytest.fixture(scope="module")
def script():
    """The script as a module (scripts/ on the path for its ``common``)."""
    sys.path.insert(0, str(SCRIPT.parent))
    try:
        spec = importlib.util.spec_from_file_location("batch_scaling", SCRIPT)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(SCRIPT.parent))


def test_report_has_every_run_and_epoch(report):
    _, r = report
    assert {(x["config"], x["seed"]) for x in r["runs"]} == {
        (c, s) for c in ("one-256", "one-512", "one-512-warmup", "dp-512") for s in (0, 1)}
    for x in r["runs"]:
        assert [h["epoch"] for h in x["history"]] == [1, 2]
        steps = x["steps_per_epoch"]
        assert [h["steps"] for h in x["history"]] == [steps, 2 * steps]
        for h in x["history"]:
            assert 0 <= h["test_acc"] <= 1 and 0 <= h["test_acc_recalibrated_bn"] <= 1
            assert h["train_examples"] == 192
        assert x["world_size"] == 1 and x["torch_threads"] >= 1
    by = {(x["config"], x["seed"]): x for x in r["runs"]}
    assert by["one-256", 0]["batch_size"] == 32 and by["one-512", 0]["batch_size"] == 64
    assert by["one-256", 0]["steps_per_epoch"] == 6 and by["one-512", 0]["steps_per_epoch"] == 3
    assert by["one-512-warmup", 0]["warmup_epochs"] == 1 and by["one-512", 0]["warmup_epochs"] == 0
    assert r["scale"]["num_train"] == 192 and r["machine"]["torch"]
    # the seed decides the run: two seeds, two different networks
    assert by["one-256", 0]["history"] != by["one-256", 1]["history"]


def test_runs_are_repeatable_and_resume_skips_done_runs(report, tmp_path):
    path, r = report
    again = tmp_path / "again.json"
    run("--configs", "one-256", *TINY[:-2], "0", "--report", again)
    first = json.loads(again.read_text())["runs"][0]
    same = next(x for x in r["runs"] if (x["config"], x["seed"]) == ("one-256", 0))
    assert [h["test_acc"] for h in first["history"]] == [h["test_acc"] for h in same["history"]]
    # resuming the full report: nothing left to train, so no run line is printed
    out = run("--configs", "one-256", "one-512", "one-512-warmup", "dp-512", *TINY,
              "--report", path).stdout
    assert "seed" not in out


def test_plot_only_redraws_the_figure(report, tmp_path):
    path, _ = report
    run("--report", path, "--figure", tmp_path / "f.png", "--plot-only")
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("content, says", [
    (None, "does not exist: run the script without --plot-only first"),
    ('{"losses": [0.5]}', "not a report of this script with runs to plot (no runs, scale"),
    ('{"runs": [], "scale": {}, "machine": {}}', "(no runs yet)"),
    ("{not json", "not a report of this script with runs to plot (JSONDecodeError"),
])
def test_plot_only_names_a_report_it_cannot_draw(script, tmp_path, content, says):
    """Sweep 3 (B6): these ended in tracebacks (FileNotFoundError, KeyError: 'runs', 'machine')."""
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(SystemExit) as stop:
        script.main(["--plot-only", "--report", str(path), "--figure", str(tmp_path / "f.png")])
    assert says in str(stop.value)
    assert not (tmp_path / "f.png").exists()


def test_jobs_beyond_what_the_machine_runs_are_capped_and_said(script, tmp_path, monkeypatch,
                                                                capsys):
    """Sweep 3 (B8b): --jobs 64 started a torch process per run at once; launch and run_torchrun
    refuse more than max_processes(), and batch_scaling uses at most that many."""
    monkeypatch.setattr(script, "max_processes", lambda: 1)
    monkeypatch.setitem(sys.modules, "batch_scaling", script)   # the pool pickles its function
    report = script.main(["--configs", "one-256", *TINY[:-2], "0", "1", "--jobs", "64",
                          "--report", str(tmp_path / "r.json")])
    assert "--jobs 64: this machine runs at most 1 processes at once" in capsys.readouterr().out
    assert report["jobs"] == 1 and len(report["runs"]) == 2


def test_ddp_needs_torchrun_and_runs_under_it(tmp_path):
    proc = run("--configs", "ddp-512", *TINY, check=False)
    assert proc.returncode != 0 and "torchrun" in proc.stderr
    r = dd.run_torchrun(SCRIPT, 2, "--configs", "ddp-512", *TINY)
    assert [(x["config"], x["seed"]) for x in r["runs"]] == [("ddp-512", 0), ("ddp-512", 1)]
    assert r["runs"][0]["batch_size"] == 64 and r["runs"][0]["steps_per_epoch"] == 3
    for x in r["runs"]:  # the train metrics cover both ranks' shards (their all-reduce)
        assert x["world_size"] == 2 and [h["train_examples"] for h in x["history"]] == [192, 192]


def test_ddp_trainer_reshuffles_each_epoch_and_shards_the_data(script):
    """The DDP trainer's order comes from its DistributedSampler, reseeded each epoch: run in a
    process group of one, epoch 1's order differs from epoch 0's, each is a permutation of the
    training set, and asking again for an epoch gives that epoch's order again."""
    args = script.parse_args(["--num-train", "64", "--num-test", "10", "--width", "2"])
    with dd.single_process_group("gloo"):
        trainer = script.Trainer("ddp", 16, 0.1, 0, 0, args, torch.device("cpu"))
        orders = [trainer._order(e) for e in (0, 1, 0)]
    assert not torch.equal(orders[0], orders[1]) and torch.equal(orders[0], orders[2])
    assert all(sorted(o.tolist()) == list(range(64)) for o in orders)


def test_ddp_runs_join_the_one_process_report(report, tmp_path):
    path, one_process = report
    shared = tmp_path / "shared.json"
    shared.write_text(path.read_text())
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
           str(SCRIPT), "--configs", "ddp-512", *TINY[:-1], "--report", str(shared)]
    subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=ROOT)
    runs = [(x["config"], x["seed"]) for x in json.loads(shared.read_text())["runs"]]
    assert runs == [(x["config"], x["seed"]) for x in one_process["runs"]] + [("ddp-512", 0)]


def test_bad_arguments_are_refused_with_a_message():
    proc = run("--batch-divisor", "3", check=False)
    assert proc.returncode == 2 and "--batch-divisor" in proc.stderr


@pytest.mark.parametrize("name", ["batch_scaling_cpu.json", "batch_scaling_after_cpu.json"])
def test_the_committed_results_match_the_committed_script(script, name):
    """The committed results (read by notebook 04) were written by this script: each file's command
    parses with today's options, and gives the scale the file records."""
    batch_scaling = script
    results = json.loads((ROOT / "results" / name).read_text())
    command = results["command"].split()
    assert command[0] == "scripts/batch_scaling.py"
    args = batch_scaling.parse_args(command[1:])
    assert batch_scaling.scale(args) == batch_scaling.report_scale(results)
    assert {r["config"] for r in results["runs"]} <= set(batch_scaling.CONFIGS)
    assert all(len(r["history"]) == results["scale"]["epochs"] for r in results["runs"])


def test_the_second_run_starts_from_the_first_runs_batchnorm_and_biases(script):
    """dp-512-after-256 is study note 5's order of cells: one-256 first, then dp-512 in the same
    network with only its Conv2d and Linear weights drawn again."""
    args = script.parse_args(TINY[:-2] + ["0"])
    device = script.dltools.replica_devices(1)[0]
    first = script.Trainer("one", 32, 0.1, 0, 0, args, device)
    first.train(1, score=False)
    trained = {k: v.clone() for k, v in first.net.state_dict().items()}
    fresh = script.Trainer("dp", 64, 0.2, 0, 0, args, device).net.state_dict()
    after = script.Trainer("dp", 64, 0.2, 0, 0, args, device, inherit=trained).net.state_dict()
    redrawn = script.redrawn_keys(first.net)
    batchnorm = {f"{n}.weight" for n, m in first.net.named_modules()
                 if isinstance(m, torch.nn.BatchNorm2d)}
    assert batchnorm and not redrawn & batchnorm and all(k.endswith(".weight") for k in redrawn)
    kinds = {"redrawn": 0, "kept": 0}
    for k, v in after.items():
        if k in redrawn:    # dp-512's own weights of the same seed
            assert torch.equal(v, fresh[k]) and not torch.equal(v, trained[k]), k
            kinds["redrawn"] += 1
        else:               # biases, BatchNorm's scale, shift and running statistics
            assert torch.equal(v, trained[k]), k
            kinds["kept"] += 1
    trained_bn = [k for k in trained if k.endswith("running_var")]
    assert trained_bn and all(not torch.equal(trained[k], fresh[k]) for k in trained_bn)
    assert kinds["redrawn"] > 10 and kinds["kept"] > kinds["redrawn"]


def test_the_after_configuration_records_its_first_run(script):
    args = script.parse_args(TINY[:-2] + ["0"])
    one = script.run_one("one-256", 0, args)
    dp = script.run_one("dp-512", 0, args)
    after = script.run_one("dp-512-after-256", 0, args)
    # its first run is one-256 of the same seed, scored at its end
    assert after["first_run"]["config"] == "one-256"
    assert after["first_run"]["test_acc"] == one["test_acc"]
    assert after["batch_size"] == dp["batch_size"] and after["devices"] == "dp"
    # the inherited state changes the training (same weights, same batches otherwise)
    assert after["history"][0]["train_loss"] != dp["history"][0]["train_loss"]
    assert "first_run" not in dp
