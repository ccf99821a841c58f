"""Smoke runs of the benchmark scripts (``--smoke``: tiny sizes), so they never rot.

Only the shape of what they print is checked (the Markdown table's columns and rows, numbers where
numbers belong), never how fast anything was: timings are for ``benchmarks/README.md``, not tests.
"""
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

# benchmarks/ is on pytest's pythonpath (pyproject.toml), as it is on a benchmark script's sys.path.
import _common
import bench_allreduce

ROOT = Path(__file__).resolve().parent.parent
BENCH = ROOT / "benchmarks"


def run_script(name, tmp_path, *extra):
    proc = subprocess.run([sys.executable, str(BENCH / name), "--smoke",
                           "--plot-dir", str(tmp_path), *extra],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return proc.stdout


def tables(text):
    """Every Markdown table in ``text`` as (headers, rows); checks the separator line."""
    found, block = [], []
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            block.append([c.strip() for c in line.strip().strip("|").split("|")])
        elif block:
            headers, sep, *rows = block
            assert all(set(c) == {"-"} for c in sep) and len(sep) == len(headers), block
            assert all(len(r) == len(headers) for r in rows), block
            found.append((headers, rows))
            block = []
    return found


def number(cell):
    """The number in a cell such as '12.5', '3.1x', '+4.0%', '1,234'."""
    m = re.fullmatch(r"([+-]?[\d,]*\.?\d+(?:e[+-]?\d+)?)(x|%)?", cell)
    assert m, f"not a number: {cell!r}"
    value = float(m.group(1).replace(",", ""))
    assert math.isfinite(value), cell
    return value


def test_tables_parser_sees_a_bad_table():
    good = _common.markdown_table(["a", "b"], [[1, 2]])
    assert tables(good) == [(["a", "b"], [["1", "2"]])]
    with pytest.raises(AssertionError):
        tables("| a | b |\n| --- | --- |\n| 1 |")
    with pytest.raises(ValueError, match="2 cells"):
        _common.markdown_table(["a"], [[1, 2]])


def test_alpha_beta_fit_recovers_the_model():
    from dltools.distributed import alpha_beta_time
    sizes = bench_allreduce.FULL_SIZES
    for algorithm, world in (("ring", 2), ("ring", 4), ("naive", 4)):
        t = [alpha_beta_time(s, world, 5e-5, 1e-9, algorithm) for s in sizes]
        alpha, beta = bench_allreduce.fit_alpha_beta(sizes, t, world, algorithm)
        assert alpha == pytest.approx(5e-5, rel=1e-6) and beta == pytest.approx(1e-9, rel=1e-6)


def test_bench_data(tmp_path):
    out = run_script("bench_data.py", tmp_path)
    (headers, rows), = tables(out)
    assert headers == ["images", "count (d2l = dltools)", "value range", "mean pixel d2l / dltools",
                       "d2l s/epoch", "dltools s/epoch", "speed-up (d2l / dltools)"]
    assert [r[0] for r in rows] == ["28x28", "64x64 (resize=64)"]
    for r in rows:
        assert r[1] == "768" and r[2] == "[0, 1]"  # 3 batches of 256 from both loaders
        assert all(number(c) > 0 for c in r[4:])
    assert (tmp_path / "bench_data.png").stat().st_size > 0


def test_bench_training_overhead(tmp_path):
    out = run_script("bench_training_overhead.py", tmp_path)
    (headers, rows), = tables(out)
    assert headers == ["model", "batch x steps", "bare loop img/s", "train_ch13 img/s",
                       "train_ch13 / bare", "overhead"]
    assert [r[0].split()[0] for r in rows] == ["ResNet-18", "MLP"]
    for r in rows:
        assert number(r[2]) > 0 and number(r[3]) > 0 and number(r[4]) > 0
        number(r[5])
    assert (tmp_path / "bench_training_overhead.png").stat().st_size > 0


def test_bench_dp_ddp(tmp_path):
    out = run_script("bench_dp_ddp.py", tmp_path)
    (headers, rows), = tables(out)
    assert headers[:5] == ["model", "params", "steps", "1 process img/s",
                           "1 process, 1 thread img/s"]
    assert headers[5].startswith("DP (") and headers[6].startswith("DDP (")
    assert headers[7:] == ["DP / 1 process", "DDP / 1 process", "DDP / DP"]
    assert [r[0].split()[0] for r in rows] == ["MLP", "ResNet-18"]
    for r in rows:
        assert all(number(c) > 0 for c in r[1:])
    assert "DDP replicas ended identical" in out
    assert (tmp_path / "bench_dp_ddp.png").stat().st_size > 0


def test_bench_allreduce(tmp_path):
    out = run_script("bench_allreduce.py", tmp_path)
    (headers, rows), (fit_headers, fit_rows) = tables(out)
    assert headers == ["processes", "size", "gloo GB/s", "ring GB/s", "naive GB/s", "ring / gloo",
                       "naive / gloo"]
    assert [(r[0], r[1]) for r in rows] == [("2", "4 KB"), ("2", "64 KB")]
    for r in rows:
        assert all(number(c) >= 0 for c in r[2:])
    assert fit_headers == ["processes", "algorithm", "alpha (us)", "1/beta (GB/s)"]
    assert [r[1] for r in fit_rows] == ["gloo", "ring", "naive"]
    assert (tmp_path / "bench_allreduce.png").stat().st_size > 0


def test_bench_course_runtime(tmp_path):
    # --smoke times a generated one-cell notebook, never the course itself.
    out = run_script("bench_course_runtime.py", tmp_path)
    (headers, rows), = tables(out)
    assert headers == ["notebook", "code cells", "nbval result", "wall s", "budget s",
                       "wall / budget"]
    assert [r[0] for r in rows] == ["smoke_trivial.ipynb", "whole course (1 notebooks, one run)"]
    for r in rows:
        assert r[1] == "1" and r[2] == "1 passed"
        assert number(r[3]) > 0 and number(r[5]) > 0


def test_bench_dp_step(tmp_path):
    out = run_script("bench_dp_step.py", tmp_path)
    (headers, rows), = tables(out)
    assert headers == ["term", "ms", "how"]
    assert [r[0] for r in rows] == ["compute", "replicate", "transfers", "predicted step",
                                    "measured step", "residual", "1-device step"]
    ms = {r[0]: number(r[1]) for r in rows}
    assert all(ms[k] > 0 for k in ("compute", "replicate", "measured step", "1-device step"))
    assert ms["predicted step"] == pytest.approx(
        ms["compute"] + ms["replicate"] + ms["transfers"], abs=1.5)  # cells are rounded
    assert (tmp_path / "bench_dp_step.png").stat().st_size > 0


def test_dp_step_model_counts_each_term_once():
    import bench_dp_step
    m = {"part": 0.1, "replicate": 0.02, "bandwidth": 1e9,
         "bytes": {"scatter": 1e6, "broadcast": 5e6, "gather": 2e6, "output_grads": 2e6,
                   "reduce": 5e6}}
    gpus = bench_dp_step.predict(m, 2, parallel_devices=True)
    # The broadcast's bytes are inside the timed replicate; the rest go through device 0's link.
    assert gpus == pytest.approx({"compute": 0.1, "replicate": 0.02, "transfers": 0.01})
    cpus = bench_dp_step.predict(m, 4, parallel_devices=False)
    assert cpus["compute"] == pytest.approx(0.4)   # CPU replicas share the cores


def test_bench_float32_agreement(tmp_path):
    out = run_script("bench_float32_agreement.py", tmp_path)
    (headers, rows), = tables(out)
    assert headers[2] == "max abs parameter difference"
    assert rows[0][:2] == ["cpu, float32", "batch of 96 vs two halves"]
    assert all(number(r[2]) >= 0 and r[3] in ("yes", "no") for r in rows)
