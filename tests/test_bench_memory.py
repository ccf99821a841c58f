"""Smoke run of benchmarks/bench_memory.py (``--smoke``: a tiny model, 1 and 2 ranks).

Checks the printed table's shape and that the target line is there; the memory numbers are
deterministic (bytes of tensors), so the smoke run must also meet the 1% target, part by part.
"""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_memory_smoke():
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_memory.py"),
                           "--smoke"], cwd=ROOT, capture_output=True, text=True, timeout=600,
                          check=False)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr[-3000:]}"
    lines = [line for line in proc.stdout.splitlines() if line.startswith("|")]
    header, sep, *rows = [[c.strip() for c in line.strip("|").split("|")] for line in lines]
    assert header[0] == "technique" and header[-1].startswith("measured vs predicted")
    assert all(set(c) == {"-"} for c in sep)
    assert [(r[0].split()[0], r[1].split()[0], r[2]) for r in rows] == [
        (name, model, n) for n in ("1", "2") for model in ("even", "uneven")
        for name in ("DDP", "ZeRO-1", "FSDP2", "TP")]
    for r in rows:
        assert all(abs(float(e.rstrip("%"))) <= 1 for e in r[-1].split(" / ")), r
        assert r[-2] == "n/a (CPU)"
    by = {(r[0].split()[0], r[1].split()[0], r[2]): int(r[4].replace(",", "")) for r in rows}
    # sharding really happens at 2 ranks: FSDP2's parameters are half of DDP's (even model) ...
    assert by[("FSDP2", "even", "2")] * 2 == by[("DDP", "even", "2")]
    # ... and more than half with 31-row layers: rank 0 holds 16 of their 31 rows
    uneven_ddp, uneven_fsdp = by[("DDP", "uneven", "2")], by[("FSDP2", "uneven", "2")]
    assert uneven_fsdp * 2 > uneven_ddp
    assert uneven_fsdp * 2 - uneven_ddp == 4 * 4 * (31 * 4 + 1)   # 4 blocks: down.weight, bias
    assert "target within 1%: met" in proc.stdout
