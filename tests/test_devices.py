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


def test_backend_follows_devices():
    assert dltools.distributed_backend([torch.device("cpu")]) == "gloo"
    assert dltools.distributed_backend(["cpu", "cpu"]) == "gloo"
    # A mix of CPU and GPU cannot use nccl for the CPU ranks.
    assert dltools.distributed_backend(["cuda:0", "cpu"]) == "gloo"
    expected = "nccl" if torch.distributed.is_nccl_available() else "gloo"
    assert dltools.distributed_backend(["cuda:0", "cuda:1"]) == expected
    with pytest.raises(ValueError, match="at least one device"):
        dltools.distributed_backend([])


def test_device_report_is_consistent():
    r = dltools.device_report()
    assert r["num_gpus"] == dltools.num_gpus()
    assert r["devices"] == [str(d) for d in dltools.try_all_gpus()]
    assert r["backend"] == dltools.distributed_backend()
    text = str(r)
    assert "torch" in text and "backend" in text


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
