"""DP vs DDP on this hardware: training images/second for one process, DataParallel replicas and
DDP, for a small MLP (Python-overhead bound) and the narrow ResNet-18 (compute bound), with the
same global batch and the same number of steps.

    .venv/bin/python benchmarks/bench_dp_ddp.py            # full run (about 2 minutes on 2 cores)
    .venv/bin/python benchmarks/bench_dp_ddp.py --smoke    # tiny sizes, one DDP launch

Without GPUs: DataParallel is dltools' thread replicas on ``['cpu'] * N`` and DDP is ``gloo`` with
N processes (N = 2 by default; each rank gets ``cores / N`` torch threads so the processes do not
fight over the cores). With 2 or more GPUs the same script uses ``nn.DataParallel`` over all GPUs
and DDP with ``nccl``, one process per GPU.

Images/second count training steps only (after one warm-up step); the DDP processes' launch and
set-up time is reported separately. The DDP processes are started with
``dltools.distributed.launch``. The batches are synthetic Fashion-MNIST-shaped tensors
(seeded), so no process reads files; throughput does not depend on pixel values.
"""
import os
import time

import _common


def make_mlp():
    from torch import nn
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(),
                         nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def make_resnet(width):
    import dltools
    return dltools.resnet18(10, width=width)


def configs(smoke):
    """(name, builder, builder args, steps) for each model; the same list in every process."""
    width = 4 if smoke else 16
    return [("MLP 784-256-256-10", "mlp", (), 2 if smoke else 60),
            (f"ResNet-18 width={width}", "resnet", (width,), 2 if smoke else 5)]


def build(kind, args):
    return make_mlp() if kind == "mlp" else make_resnet(*args)


def synthetic_batches(global_batch, steps, seed=0):
    import torch
    g = torch.Generator().manual_seed(seed)
    X = torch.rand(steps, global_batch, 1, 28, 28, generator=g)
    y = torch.randint(0, 10, (steps, global_batch), generator=g)
    return X, y


def train_steps(net, X, y, device):
    """One warm-up step then ``len(X) - 1`` timed steps; returns the timed seconds."""
    import torch
    from torch import nn

    import dltools
    loss = nn.CrossEntropyLoss()
    trainer = torch.optim.SGD(net.parameters(), lr=0.01)
    timer = None
    for i in range(len(X)):
        if i == 1:
            timer = dltools.Timer()  # after the warm-up step; syncs CUDA before reading
        trainer.zero_grad()
        loss(net(X[i].to(device)), y[i].to(device)).backward()
        trainer.step()
    return timer.stop()


# ------------------------------------------------------------------ DDP worker (one per process)


def ddp_worker(global_batch, smoke, threads):
    """Inside a process group (``dltools.distributed.launch``): every model's timed steps under DDP.

    Module-level so that the spawned worker processes can import it by name.
    """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    import dltools
    rank, world_size = dist.get_rank(), dist.get_world_size()
    # The device launch's process group was made for ("cpu:gloo,cuda:nccl" on GPUs, a string that
    # is not "nccl": the device follows the rule, not the backend's name).
    device = dltools.devices.rank_device()
    if device.type == "cpu":
        # The ranks share the cores: ``threads`` each (cores / ranks), not a thread per core each.
        torch.set_num_threads(threads)
    results = []
    local = global_batch // world_size
    for name, kind, args, steps in configs(smoke):
        dltools.seed_everything(0)
        net = build(kind, args).to(device)
        model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
        X, y = synthetic_batches(global_batch, steps + 1)
        # Each rank trains on its own slice of every global batch, as a DistributedSampler would.
        X, y = X[:, rank * local:(rank + 1) * local], y[:, rank * local:(rank + 1) * local]
        dist.barrier()
        seconds = torch.tensor([train_steps(model, X, y, device)], dtype=torch.float64,
                               device=device)
        dist.all_reduce(seconds, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        # The replicas must end identical (DDP's promise): compare a checksum across ranks.
        checksum = torch.tensor([sum(float(p.detach().double().sum()) for p in net.parameters())],
                                dtype=torch.float64, device=device)
        sums = [torch.zeros_like(checksum) for _ in range(world_size)]
        dist.all_gather(sums, checksum)
        same = all(abs(float(s) - float(sums[0])) <= 1e-6 * (1 + abs(float(sums[0]))) for s in sums)
        results.append({"name": name, "seconds": float(seconds), "steps": steps,
                        "replicas_identical": same})
    return results


def run_ddp(world_size, global_batch, smoke, threads):
    """Launch ``world_size`` processes; return (rank 0's results, launch-to-exit seconds)."""
    from dltools.distributed import launch
    t = time.perf_counter()
    results = launch(ddp_worker, world_size, global_batch, smoke, threads, timeout=600,
                     deadline=None)
    return results[0], time.perf_counter() - t


# ------------------------------------------------------------------ main


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    p.add_argument("--world-size", type=int, default=None,
                   help="replicas and DDP processes (default: number of GPUs if >= 2, else 2)")
    p.add_argument("--global-batch", type=int, default=None, help="default 256 (16 with --smoke)")
    args = _common.parse(p, argv)
    import torch

    import dltools
    gpus = dltools.num_gpus()
    n = args.world_size or (gpus if gpus >= 2 else 2)
    if 2 <= gpus < n:
        raise SystemExit(f"--world-size {n} but only {gpus} GPUs")
    dp_devices = dltools.replica_devices(n)
    device = dp_devices[0]
    backend = dltools.distributed.backend_for(device)
    global_batch = args.global_batch or (16 if args.smoke else 256)
    if global_batch % n:
        raise SystemExit(f"--global-batch {global_batch} must be divisible by {n} replicas")

    rows = []
    for name, kind, margs, steps in configs(args.smoke):
        X, y = synthetic_batches(global_batch, steps + 1)
        dltools.seed_everything(0)
        net = build(kind, margs)
        single = train_steps(net.to(device), X, y, device)
        # The same with one torch thread: on a busy machine a 2-thread process can be much slower
        # than 1 thread, and this column shows how much of DDP's lead comes from that.
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        dltools.seed_everything(0)
        single_1t = train_steps(build(kind, margs).to(device), X, y, device)
        torch.set_num_threads(threads)
        dltools.seed_everything(0)
        dp = train_steps(dltools.wrap_data_parallel(build(kind, margs), dp_devices), X, y, device)
        rows.append({"name": name, "params": dltools.num_params(net), "steps": steps,
                     "single": steps * global_batch / single,
                     "single_1t": steps * global_batch / single_1t,
                     "dp": steps * global_batch / dp})
    rank_threads = max(1, (args.threads or os.cpu_count() or 1) // n)
    ddp_results, ddp_wall = run_ddp(n, global_batch, args.smoke, rank_threads)
    for row, r in zip(rows, ddp_results):
        assert r["name"] == row["name"]
        if not r["replicas_identical"]:
            raise SystemExit(f"DDP replicas of {r['name']} ended different: this is a bug")
        row["ddp"] = r["steps"] * global_batch / r["seconds"]

    where = f"{n} GPUs" if gpus >= 2 else f"{n} x CPU"
    dp_name = "nn.DataParallel" if gpus >= 2 else "thread replicas"
    headers = ["model", "params", "steps", "1 process img/s", "1 process, 1 thread img/s",
               f"DP ({dp_name}, {where}) img/s", f"DDP ({backend}, {n} processes) img/s",
               "DP / 1 process", "DDP / 1 process", "DDP / DP"]
    table = [[r["name"], f"{r['params']:,}", r["steps"], _common.fmt(r["single"], 0),
              _common.fmt(r["single_1t"], 0),
              _common.fmt(r["dp"], 0), _common.fmt(r["ddp"], 0), f"{r['dp'] / r['single']:.2f}",
              f"{r['ddp'] / r['single']:.2f}", f"{r['ddp'] / r['dp']:.2f}"] for r in rows]
    threads = torch.get_num_threads()
    notes = [f"Global batch {global_batch} (each replica/rank gets {global_batch // n}); "
             f"images/s over the timed steps after one warm-up step. 1 process and DP use "
             f"{threads} torch threads; each DDP rank uses "
             f"{rank_threads if backend == 'gloo' else 'its own GPU'}.",
             f"The DDP launch (spawn {n} processes, import torch, join the group, run both models, "
             f"exit) took {ddp_wall:.1f} s of wall time, not counted above. DDP replicas ended "
             "identical (parameter checksums compared across ranks)."]
    _common.print_report("DP vs DDP: training throughput on this machine", headers, table, notes)
    path = _common.plot_path(args, "bench_dp_ddp.png")
    if path:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(6, 3))
        labels = ["1 process", f"DP ({n})", f"DDP ({n})"]
        for i, r in enumerate(rows):
            vals = [1.0, r["dp"] / r["single"], r["ddp"] / r["single"]]
            ax.bar([j + 0.4 * i - 0.2 for j in range(3)], vals, 0.4, label=r["name"])
        ax.set_xticks(range(3), labels)
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_ylabel("images/s relative to 1 process")
        ax.set_title(f"same global batch, {where}")
        ax.legend(fontsize=8)
        _common.save_figure(fig, path)
    return rows


if __name__ == "__main__":
    main()
