"""Train the course's ResNet-18 on Fashion-MNIST with DistributedDataParallel: one process per device.

Launch it with torchrun (notebook 04 does this with ``dltools.distributed.run_torchrun``), e.g. the
notebook's CPU configuration, two processes:

    OMP_NUM_THREADS=1 python -m torch.distributed.run --standalone --nproc_per_node=2 \\
        scripts/train_resnet_ddp.py --out /tmp/ddp.json --num-train 3072 --num-test 1000 \\
        --width 16 --epochs 2 --batch-size 128 --lr 0.2

Without the subset options it is the seed's two-GPU run (all data, width 64, 10 epochs, 512, 0.2).

With a GPU per process each uses ``cuda:LOCAL_RANK`` and NCCL; otherwise all use the CPU and gloo.
``--batch-size`` is the *global* batch, split evenly over the processes (the seed's 2-GPU run:
512 = 2 x 256). Each process sees its own shard of the training set (``DistributedSampler``, reshuffled
every epoch by ``set_epoch``) and of the test set; the counts are summed with ``all_reduce``.
Rank 0 writes the results as JSON to ``--out`` and, with ``--checkpoint``, the trained weights as a
plain ``state_dict`` (no ``module.`` prefix) that loads into a bare, DP- or DDP-wrapped model.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

# So the script also runs from a checkout where dltools is not pip-installed.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import dltools  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # --report is the name dltools.distributed.run_torchrun passes.
    p.add_argument("--out", "--report", dest="out", required=True,
                   help="where rank 0 writes the results (JSON)")
    p.add_argument("--checkpoint", help="where rank 0 saves the trained weights (torch.save)")
    p.add_argument("--num-train", type=int, default=None, help="first N training images (default all)")
    p.add_argument("--num-test", type=int, default=None, help="first N test images (default all)")
    p.add_argument("--width", type=int, default=64, help="channels of ResNet-18's first stage")
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--batch-size", type=int, default=512, help="global batch, over all processes")
    p.add_argument("--lr", type=float, default=0.2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--data-root", default=None, help="folder holding FashionMNIST/raw/")
    args = p.parse_args(argv)
    for name in ("epochs", "batch_size", "width"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    return args


def per_rank_batch_size(global_batch, world_size):
    """Split the global batch evenly; refuse a split that would change the optimisation."""
    if global_batch % world_size:
        raise ValueError(f"the global batch {global_batch} does not split evenly over "
                         f"{world_size} processes; use a multiple of {world_size}")
    return global_batch // world_size


def load_split(train, n, root):
    images, labels = dltools.data.load_fashion_mnist(train=train, root=root)
    if n is not None:
        if not 1 <= n <= len(labels):
            raise ValueError(f"--num-{'train' if train else 'test'} must be in 1..{len(labels)}, got {n}")
        images, labels = images[:n], labels[:n]
    return images, labels


def to_input(images, device):
    # The same conversion as dltools.load_data_fashion_mnist: uint8 (B, 28, 28) -> float (B, 1, 28, 28) in [0, 1].
    return images.to(device).unsqueeze(1).float().div_(255)


def all_sum(values, device):
    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return t.tolist()


def main(argv=None):
    args = parse_args(argv)
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("train_resnet_ddp.py runs one process per device: launch it with torchrun, e.g.\n"
                 "  python -m torch.distributed.run --standalone --nproc_per_node=2 "
                 "scripts/train_resnet_ddp.py --out results.json")
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    # One GPU per process, or the CPU for all (e.g. two processes on a one-GPU laptop).
    use_cuda = torch.cuda.device_count() >= int(os.environ.get("LOCAL_WORLD_SIZE", 1))
    device = torch.device("cuda", local_rank) if use_cuda else torch.device("cpu")
    if use_cuda:
        torch.cuda.set_device(device)
    dist.init_process_group(dltools.distributed_backend([device]))
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        batch = per_rank_batch_size(args.batch_size, world)
        train_images, train_labels = load_split(True, args.num_train, args.data_root)
        test_images, test_labels = load_split(False, args.num_test, args.data_root)
        train_set = TensorDataset(train_images, train_labels)
        sampler = DistributedSampler(train_set, num_replicas=world, rank=rank, shuffle=True,
                                     seed=args.seed)
        train_loader = DataLoader(train_set, batch_size=batch, sampler=sampler)

        dltools.seed_everything(args.seed)  # DDP also broadcasts rank 0's weights when wrapping
        net = dltools.resnet18(10, width=args.width)
        net.apply(dltools.init_weights_normal)
        net = net.to(device)
        model = DDP(net, device_ids=[local_rank] if use_cuda else None)
        trainer = torch.optim.SGD(model.parameters(), lr=args.lr)
        loss = nn.CrossEntropyLoss()

        first_orders, history, epoch_times = [], [], []
        for epoch in range(args.epochs):
            sampler.set_epoch(epoch)  # without it every epoch would repeat epoch 0's order
            if epoch < 2:
                first_orders.append(list(sampler))
            model.train()
            local = [0.0, 0.0, 0.0]  # loss sum, correct, examples
            dist.barrier()
            tik = time.perf_counter()
            for X, y in train_loader:
                X, y = to_input(X, device), y.to(device)
                trainer.zero_grad()
                y_hat = model(X)
                l = loss(y_hat, y)
                l.backward()  # DDP averages the gradients over all processes here
                trainer.step()
                local[0] += float(l.detach()) * len(y)
                local[1] += dltools.accuracy(y_hat.detach(), y)
                local[2] += len(y)
            if use_cuda:
                torch.cuda.synchronize(device)
            dist.barrier()
            epoch_times.append(time.perf_counter() - tik)
            # BatchNorm running statistics are buffers, not parameters: DDP copies rank 0's at the start
            # of each forward, so after the last step every process holds its own. Make them rank 0's
            # before evaluating, so all shards are scored by the same model (the one rank 0 saves).
            for b in net.buffers():
                dist.broadcast(b, src=0)
            net.eval()
            correct = 0.0
            with torch.no_grad():
                shard_X, shard_y = test_images[rank::world], test_labels[rank::world]
                for i in range(0, len(shard_y), batch):
                    correct += dltools.accuracy(net(to_input(shard_X[i:i + batch], device)),
                                                shard_y[i:i + batch].to(device))
            loss_sum, train_correct, seen, test_correct, test_seen = all_sum(
                local + [correct, len(shard_y)], device)
            history.append([epoch + 1, loss_sum / seen, train_correct / seen, test_correct / test_seen])

        # Replicas must be identical: every process applied the same averaged gradients.
        flat = torch.cat([p.detach().flatten() for p in net.parameters()])
        highest = flat.clone()
        dist.all_reduce(highest, op=dist.ReduceOp.MAX)
        same = all_sum([float(torch.equal(highest, flat))], device)[0] == world
        shards = [None] * world
        dist.all_gather_object(shards, first_orders[0])
        results = {
            "world_size": world, "backend": dist.get_backend(), "device_type": device.type,
            "global_batch_size": args.batch_size, "per_rank_batch_size": batch, "lr": args.lr,
            "epochs": args.epochs, "width": args.width, "num_train": len(train_set),
            "num_test": len(test_labels), "steps_per_epoch": len(train_loader),
            "history": history, "test_acc": history[-1][3],
            "sec_per_epoch": sum(epoch_times) / len(epoch_times),
            "examples_per_sec": args.epochs * len(train_set) / sum(epoch_times),
            "params_identical": same,
            "shard_sizes": [len(s) for s in shards],
            "shards_cover_train_set_once": sorted(i for s in shards for i in s) == list(range(len(train_set))),
            # None after a single epoch: nothing to compare.
            "set_epoch_reshuffles": first_orders[0] != first_orders[1] if len(first_orders) > 1 else None,
        }
        if rank == 0:
            if args.checkpoint:
                torch.save(net.state_dict(), args.checkpoint)
            Path(args.out).write_text(json.dumps(results, indent=1))
        dist.barrier()  # leave together: tearing gloo down while a peer still talks to it can abort
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
