"""Train a small CNN on Fashion-MNIST with DistributedDataParallel: one process per device.

    torchrun --standalone --nproc_per_node=2 scripts/train_ddp.py --epochs 2 --batch-size 96
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

import dltools
from common import (
    build_model,
    distinct_outputs,
    fingerprint,
    full_float32,
    image_count,
    load_train_set,
    output_file,
    per_rank_batch_size,
    positive_float,
    positive_int,
    save_checkpoint,
    setup_ddp,
    teardown_ddp,
    write_report,
)


class Trainer:
    def __init__(self, model, dataset, batch_size, lr, seed, device):
        self.device = device
        self.rank = dist.get_rank()
        # DDP broadcasts rank 0's parameters and averages gradients across ranks during backward().
        device_ids = [device.index] if device.type == "cuda" else None
        self.model = DDP(model.to(device), device_ids=device_ids)
        # Every rank shuffles with seed + epoch, then keeps every world_size-th example.
        self.sampler = DistributedSampler(dataset, shuffle=True, seed=seed)
        per_rank = per_rank_batch_size(batch_size, dist.get_world_size())  # global batch / N
        self.loader = DataLoader(dataset, batch_size=per_rank, sampler=self.sampler)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.loss = nn.CrossEntropyLoss()

    def _run_batch(self, X, y):
        self.optimizer.zero_grad()
        loss = self.loss(self.model(X), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        self.sampler.set_epoch(epoch)  # before each epoch (notebook 03, exercise 3)
        total = torch.zeros(2, device=self.device)  # sum of batch losses, number of batches
        for X, y in self.loader:
            loss = self._run_batch(X.to(self.device), y.to(self.device))
            total += torch.stack([loss, torch.ones_like(loss)])
        dist.all_reduce(total)  # each rank saw only its shard: the mean is over all of them
        return (total[0] / total[1]).item()

    def _save_checkpoint(self, path):
        # .module: the plain model, so the checkpoint loads without DDP (no 'module.' prefix).
        save_checkpoint(self.model.module.state_dict(), path)

    def train(self, num_epochs, checkpoint=None):
        losses, start = [], time.perf_counter()
        for epoch in range(num_epochs):
            losses.append(self._run_epoch(epoch))
            if self.rank == 0:
                print(f"epoch {epoch}: loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        if checkpoint and self.rank == 0:
            self._save_checkpoint(checkpoint)
        return losses, seconds


def main(args):
    # torchrun sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and LOCAL_RANK (index on this node).
    device = setup_ddp(args.device)
    full_float32()
    world_size = dist.get_world_size()
    torch.manual_seed(args.seed)
    model = build_model(args.width)
    dataset = load_train_set(args.num_train)
    trainer = Trainer(model, dataset, args.batch_size, args.lr, args.seed, device)
    losses, seconds = trainer.train(args.epochs, args.checkpoint)
    steps = args.epochs * len(trainer.loader)
    fingerprints = [None] * world_size
    dist.all_gather_object(fingerprints, fingerprint(model))  # to check the replicas agree
    if dist.get_rank() == 0:
        write_report(args.report, world_size=world_size, losses=losses, fingerprints=fingerprints,
                     backend=dist.get_backend(), device_type=device.type,
                     seconds=seconds, sec_per_step=seconds / steps,
                     examples_per_sec=args.epochs * len(dataset) / seconds)
    del trainer, model  # DDP holds the process group: free it before leaving the group
    teardown_ddp()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=positive_int, default=2)
    parser.add_argument("--batch-size", type=positive_int, default=96, help="global batch size")
    parser.add_argument("--num-train", type=image_count("train"), default=1152)
    parser.add_argument("--lr", type=positive_float, default=0.1)
    parser.add_argument("--width", type=positive_int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=dltools.DEVICE_TYPES, default="auto",
                        help="auto: the GPU(s) when there are enough, else the CPU")
    parser.add_argument("--checkpoint", type=output_file, default=None,
                        help="where to save the trained weights (its folder must exist)")
    parser.add_argument("--report", type=output_file, default=None,
                        help="where to write results as JSON (its folder must exist)")
    args = parser.parse_args(argv)
    distinct_outputs(parser, args, "checkpoint", "report")
    return args


if __name__ == "__main__":
    main(parse_args())
