import subprocess
import sys

import pytest
import torch

import dltools


def test_try_all_gpus_is_never_empty():
    devices = dltools.try_all_gpus()
    assert devices, "try_all_gpus() must never return []"
    assert len(devices) == max(dltools.num_gpus(), 1)
    assert all(isinstance(d, torch.device) for d in devices)


def test_try_gpu_falls_back_to_cpu_for_missing_index():
    assert dltools.try_gpu(dltools.num_gpus()) == torch.device("cpu")


@pytest.mark.parametrize("bad", [-1, -5])
def test_try_gpu_rejects_negative_index(bad):
    with pytest.raises(ValueError, match="0 or more"):
        dltools.try_gpu(bad)


@pytest.mark.parametrize("bad", ["0", 1.0, None, True])
def test_try_gpu_rejects_non_int(bad):
    with pytest.raises(TypeError, match="must be an int"):
        dltools.try_gpu(bad)


def fake_gpus(monkeypatch, count, nccl=True):
    """Pretend the machine has ``count`` GPUs (named, not usable)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: count > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: count)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: f"Fake GPU {i}")
    monkeypatch.setattr(torch.distributed, "is_nccl_available", lambda: nccl)


CPU, G = torch.device("cpu"), [torch.device("cuda", i) for i in range(4)]


@pytest.mark.parametrize("gpus, k, expected", [
    (0, 2, [CPU, CPU]),
    (1, 2, [CPU, CPU]),              # one GPU cannot hold two replicas: the CPU twice, not a mix
    (2, 2, G[:2]),
    (4, 2, G[:2]),                   # the first k GPUs
    (2, 3, [CPU] * 3),
    (4, 1, G[:1]),
    (0, None, [CPU] * dltools.devices.CPU_REPLICAS),
    (1, None, [CPU] * dltools.devices.CPU_REPLICAS),
    (2, None, G[:2]),
    (4, None, G),                    # every GPU
])
def test_replica_devices_follows_the_rule(monkeypatch, gpus, k, expected):
    fake_gpus(monkeypatch, gpus)
    assert dltools.replica_devices(k) == expected


@pytest.mark.parametrize("bad, error", [(0, ValueError), (-2, ValueError), (2.0, TypeError),
                                        ("2", TypeError), (True, TypeError)])
def test_replica_devices_refuses_a_bad_count(bad, error):
    with pytest.raises(error, match="number of replicas"):
        dltools.replica_devices(bad)


@pytest.mark.parametrize("gpus, nccl, backend", [
    (0, True, "gloo"),
    (2, True, "cpu:gloo,cuda:nccl"),
    (2, False, "none for GPU ranks"),   # e.g. Windows: CUDA without NCCL; the report still prints
])
def test_device_report_names_the_backend_a_rank_gets(monkeypatch, gpus, nccl, backend):
    fake_gpus(monkeypatch, gpus, nccl)
    r = dltools.device_report()
    assert r["backend"].startswith(backend)
    assert r["gpu_names"] == [f"Fake GPU {i}" for i in range(gpus)]
    assert r["devices"] == [str(d) for d in (G[:gpus] or [CPU])]


def test_device_report_is_consistent():
    r = dltools.device_report()
    assert r["num_gpus"] == dltools.num_gpus()
    assert r["devices"] == [str(d) for d in dltools.try_all_gpus()]
    assert r["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
    assert r["cpu"] and r["cpu_cores"] >= 1 and r["torch_threads"] == torch.get_num_threads()
    text = str(r)
    assert "torch" in text and "backend" in text


def test_one_definition_of_each_device_decision():
    """The rule is written once: the other modules import it from dltools.devices."""
    import dltools.beyond.model
    import dltools.ddp_internals
    import dltools.distributed
    import dltools.launch
    for module in (dltools.distributed, dltools.launch, dltools.ddp_internals):
        assert module.rank_device is dltools.devices.rank_device
    assert dltools.distributed.backend_for is dltools.devices.backend_for
    assert not hasattr(dltools.devices, "distributed_backend")
    assert not hasattr(dltools.beyond.model, "rank_device")


def test_device_report_honours_cuda_visible_devices():
    # A fresh process: CUDA reads the variable once, when it initialises.
    code = ("import dltools; r = dltools.device_report(); "
            "print(repr(r['cuda_visible_devices']), r['num_gpus'])")

    def report(visible):
        env = {"CUDA_VISIBLE_DEVICES": visible, "PATH": ""}
        return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                              text=True, check=True).stdout.split()

    out = report("")
    assert out == ["''", "0"], "hiding every GPU must leave none visible"
    out = report("3,5")
    assert out[0] == "'3,5'" and int(out[1]) <= 2


@pytest.mark.parametrize("gpus, expected", [(0, (2, "cpu")), (1, (2, "cpu")), (2, (2, "cuda")),
                                            (4, (4, "cuda"))])
def test_ddp_world_is_one_process_per_gpu_or_two_on_the_cpu(monkeypatch, gpus, expected):
    fake_gpus(monkeypatch, gpus)
    assert dltools.ddp_world() == expected


@pytest.mark.parametrize("gpus, device_type, expected", [
    (0, "auto", "cpu"), (1, "auto", "cuda:0"), (3, "cpu", "cpu"), (2, "cuda", "cuda:0")])
def test_pick_device(monkeypatch, gpus, device_type, expected):
    fake_gpus(monkeypatch, gpus)
    assert dltools.pick_device(device_type) == torch.device(expected)


def test_pick_device_cuda_without_a_gpu_says_so(monkeypatch):
    fake_gpus(monkeypatch, 0)
    with pytest.raises(RuntimeError, match="sees no GPU"):
        dltools.pick_device("cuda")
    with pytest.raises(ValueError, match="auto, cpu, cuda"):
        dltools.pick_device("GPU")
