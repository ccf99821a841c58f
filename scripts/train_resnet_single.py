"""Train notebook 04's ResNet-18 on Fashion-MNIST in one process: train_resnet_ddp.py's baseline.

    python scripts/train_resnet_single.py --report /tmp/r.json \\
        --num-train 3072 --num-test 1000 --width 16 --epochs 2 --batch-size 128 --lr 0.2

Without the subset options it is study note 5's setting on one device (all data, width 64,
10 epochs, 512, lr 0.2). It uses one GPU if there is one, else the CPU. The report has the same
keys as train_resnet_ddp.py's where they mean the same thing.
"""
import argparse
import time

import torch
from torch import nn
from torch.utils.data import DataLoader, RandomSampler

import dltools
from common import (
    build_resnet,
    count_correct,
    distinct_outputs,
    fingerprint,
    image_count,
    load_split,
    output_file,
    positive_float,
    positive_int,
    save_checkpoint,
    summary,
    to_input,
    write_report,
)
from dltools.timing import synchronize


class Trainer:
    def __init__(self, model, train_set, test_set, batch_size, lr, seed, device):
        self.device, self.train_set, self.test_set = device, train_set, test_set
        self.batch_size = batch_size
        self.model = model.to(device)
        # Same shuffle as DistributedSampler: torch.randperm seeded with seed + epoch.
        self.generator = torch.Generator()
        self.seed = seed
        self.sampler = RandomSampler(train_set, generator=self.generator)
        self.loader = DataLoader(train_set, batch_size=self.batch_size, sampler=self.sampler)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.loss = nn.CrossEntropyLoss()

    def _run_batch(self, X, y):
        self.optimizer.zero_grad()
        y_hat = self.model(X)
        loss = self.loss(y_hat, y)
        loss.backward()
        self.optimizer.step()
        return torch.stack([loss.detach() * len(y), (y_hat.argmax(dim=1) == y).sum(),
                            torch.full_like(loss.detach(), len(y))])  # no copy from the host

    def _run_epoch(self, epoch):
        self.generator.manual_seed(self.seed + epoch)
        self.model.train()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, seen
        for X, y in self.loader:
            totals += self._run_batch(to_input(X, self.device), y.to(self.device))
        self.examples_per_epoch = int(totals[2].item())  # the images the means cover
        return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()

    def _test_accuracy(self):
        net = self.model
        images, labels = self.test_set.tensors
        counts = count_correct(net, images, labels, self.batch_size, self.device)
        return (counts[0] / counts[1]).item()

    def _save_checkpoint(self, path):
        save_checkpoint(self.model.state_dict(), path)

    def train(self, num_epochs, checkpoint=None):
        history, seconds = [], []
        for epoch in range(num_epochs):
            start = time.perf_counter()
            train_loss, train_acc = self._run_epoch(epoch)
            synchronize(self.device)
            seconds.append(time.perf_counter() - start)
            history.append([epoch + 1, train_loss, train_acc, self._test_accuracy()])
            print(f"epoch {epoch + 1}: loss {train_loss:.4f}, test acc {history[-1][3]:.3f}")
        if checkpoint:
            self._save_checkpoint(checkpoint)
        return history, seconds


def main(args):
    device = dltools.try_gpu()
    train_set = load_split(True, args.num_train, args.data_root)
    test_set = load_split(False, args.num_test, args.data_root)
    model = build_resnet(args.width, args.seed)
    trainer = Trainer(model, train_set, test_set, args.batch_size, args.lr, args.seed, device)
    history, seconds = trainer.train(args.epochs, args.checkpoint)
    write_report(args.report, world_size=1, **summary(args, trainer, history, seconds, device),
                 fingerprints=[fingerprint(model)])

def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=positive_int, default=10)
    parser.add_argument("--batch-size", type=positive_int, default=512, help="global batch size")
    parser.add_argument("--num-train", type=image_count("train"), default=None,
                        help="first N images (default all)")
    parser.add_argument("--num-test", type=image_count("test"), default=None,
                        help="first N images (default all)")
    parser.add_argument("--lr", type=positive_float, default=0.2)
    parser.add_argument("--width", type=positive_int, default=64,
                        help="channels of the first stage")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-root", default=None, help="folder holding FashionMNIST/raw/")
    parser.add_argument("--checkpoint", type=output_file, default=None,
                        help="where to save the trained weights (its folder must exist)")
    parser.add_argument("--report", type=output_file, default=None,
                        help="where to write results as JSON (its folder must exist)")
    args = parser.parse_args(argv)
    distinct_outputs(parser, args, "checkpoint", "report")
    return args


if __name__ == "__main__":
    main(parse_args())
