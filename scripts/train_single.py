"""Train a small CNN on Fashion-MNIST in one process: the baseline that train_ddp.py changes.

    python scripts/train_single.py --epochs 2 --batch-size 96 --num-train 1152
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

import dltools
from common import (
    build_model,
    distinct_outputs,
    fingerprint,
    full_float32,
    image_count,
    load_train_set,
    output_file,
    positive_float,
    positive_int,
    save_checkpoint,
    write_report,
)


class Trainer:
    def __init__(self, model, dataset, batch_size, lr, seed, device):
        self.device = device
        self.model = model.to(device)
        # Same shuffle as DistributedSampler: torch.randperm seeded with seed + epoch.
        self.generator = torch.Generator()
        self.seed = seed
        self.loader = DataLoader(dataset, batch_size=batch_size,
                                 sampler=RandomSampler(dataset, generator=self.generator))
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.loss = nn.CrossEntropyLoss()

    def _run_batch(self, X, y):
        self.optimizer.zero_grad()
        loss = self.loss(self.model(X), y)
        loss.backward()
        self.optimizer.step()
        return loss.detach()

    def _run_epoch(self, epoch):
        self.generator.manual_seed(self.seed + epoch)
        total = torch.zeros(2, device=self.device)  # sum of batch losses, number of batches
        for X, y in self.loader:
            loss = self._run_batch(X.to(self.device), y.to(self.device))
            total += torch.stack([loss, torch.ones_like(loss)])
        return (total[0] / total[1]).item()

    def _save_checkpoint(self, path):
        save_checkpoint(self.model.state_dict(), path)

    def train(self, num_epochs, checkpoint=None):
        losses, start = [], time.perf_counter()
        for epoch in range(num_epochs):
            losses.append(self._run_epoch(epoch))
            print(f"epoch {epoch}: loss {losses[-1]:.4f}")
        seconds = time.perf_counter() - start
        if checkpoint:
            self._save_checkpoint(checkpoint)
        return losses, seconds


def main(args):
    device = dltools.pick_device(args.device)
    full_float32()
    torch.manual_seed(args.seed)
    model = build_model(args.width)
    dataset = load_train_set(args.num_train)
    trainer = Trainer(model, dataset, args.batch_size, args.lr, args.seed, device)
    losses, seconds = trainer.train(args.epochs, args.checkpoint)
    steps = args.epochs * len(trainer.loader)
    write_report(args.report, world_size=1, losses=losses, fingerprints=[fingerprint(model)],
                 device_type=device.type,
                 seconds=seconds, sec_per_step=seconds / steps,
                 examples_per_sec=args.epochs * len(dataset) / seconds)


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
