"""Train notebook 04's ResNet-18 on Fashion-MNIST with DDP: one process per device.

    torchrun --standalone --nproc_per_node=2 scripts/train_resnet_ddp.py --report /tmp/r.json \\
        --num-train 3072 --num-test 1000 --width 16 --epochs 2 --batch-size 128 --lr 0.2

Without the subset options it is study note 5's run (all data, width 64, 10 epochs, 512, lr 0.2).
It is train_resnet_single.py plus what DDP changes; notebook 04 runs it with run_torchrun.
``--batch-size`` is the *global* batch, split evenly over the processes (2 x 256 in study note 5).
Each process trains on its shard of the training set and scores its shard of the test set.
"""
import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from common import (
    build_resnet,
    count_correct,
    distinct_outputs,
    fingerprint,
    image_count,
    load_split,
    output_file,
    per_rank_batch_size,
    positive_float,
    positive_int,
    save_checkpoint,
    setup_ddp,
    shard_report,
    summary,
    teardown_ddp,
    to_input,
    write_report,
)
from dltools.timing import synchronize


class Trainer:
    def __init__(self, model, train_set, test_set, batch_size, lr, seed, device):
        self.device, self.train_set, self.test_set = device, train_set, test_set
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.batch_size = per_rank_batch_size(batch_size, self.world_size)  # global batch / N
        # DDP broadcasts rank 0's parameters and averages gradients across ranks during backward().
        device_ids = [device.index] if device.type == "cuda" else None
        self.model = DDP(model.to(device), device_ids=device_ids)
        # Every rank shuffles with seed + epoch, then keeps every world_size-th example.
        self.sampler = DistributedSampler(train_set, shuffle=True, seed=seed)
        self.loader = DataLoader(train_set, batch_size=self.batch_size, sampler=self.sampler)
        self.optimizer = torch.optim.SGD(self.model.parameters(), lr=lr)
        self.loss = nn.CrossEntropyLoss()
        self.orders = []  # this rank's order of examples in the first two epochs, for the report

    def _run_batch(self, X, y):
        self.optimizer.zero_grad()
        y_hat = self.model(X)
        loss = self.loss(y_hat, y)
        loss.backward()  # DDP averages the gradients over all processes here
        self.optimizer.step()
        return torch.stack([loss.detach() * len(y), (y_hat.argmax(dim=1) == y).sum(),
                            torch.full_like(loss.detach(), len(y))])  # no copy from the host

    def _run_epoch(self, epoch):
        self.sampler.set_epoch(epoch)  # without it, every epoch repeats the same order
        if epoch < 2:
            self.orders.append(list(self.sampler))
        self.model.train()
        totals = torch.zeros(3, dtype=torch.float64, device=self.device)  # loss sum, correct, seen
        for X, y in self.loader:
            totals += self._run_batch(to_input(X, self.device), y.to(self.device))
        dist.all_reduce(totals)  # each rank saw only its shard: the means are over all of them
        self.examples_per_epoch = int(totals[2].item())  # the images the means cover
        return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()

    def _test_accuracy(self):
        net = self.model.module
        # DDP broadcasts rank 0's buffers (BN running stats) each forward (forward_sync_buffers):
        # replicas normalise with their own batch statistics in training but share rank 0's running
        # statistics. The last forward changed each rank's copy: score with rank 0's, as saved.
        for buffer in net.buffers():
            dist.broadcast(buffer, src=0)
        images, labels = self.test_set.tensors
        shard = slice(self.rank, None, self.world_size)  # this rank's share of the test set
        counts = count_correct(net, images[shard], labels[shard], self.batch_size, self.device)
        dist.all_reduce(counts)
        return (counts[0] / counts[1]).item()

    def _save_checkpoint(self, path):
        # .module: the plain model, so the checkpoint loads without DDP (no 'module.' prefix).
        save_checkpoint(self.model.module.state_dict(), path)

    def train(self, num_epochs, checkpoint=None):
        history, seconds = [], []
        for epoch in range(num_epochs):
            dist.barrier()  # time the epoch from when every rank starts it to when all are done
            start = time.perf_counter()
            train_loss, train_acc = self._run_epoch(epoch)
            synchronize(self.device)
            dist.barrier()
            seconds.append(time.perf_counter() - start)
            history.append([epoch + 1, train_loss, train_acc, self._test_accuracy()])
            if self.rank == 0:
                print(f"epoch {epoch + 1}: loss {train_loss:.4f}, test acc {history[-1][3]:.3f}")
        if checkpoint and self.rank == 0:
            self._save_checkpoint(checkpoint)
        return history, seconds


def main(args):
    device = setup_ddp()
    world_size = dist.get_world_size()
    train_set = load_split(True, args.num_train, args.data_root)
    test_set = load_split(False, args.num_test, args.data_root)
    model = build_resnet(args.width, args.seed)  # DDP also broadcasts rank 0's weights
    trainer = Trainer(model, train_set, test_set, args.batch_size, args.lr, args.seed, device)
    history, seconds = trainer.train(args.epochs, args.checkpoint)
    fingerprints, shards = [None] * world_size, [None] * world_size
    dist.all_gather_object(fingerprints, fingerprint(model))  # to check the replicas agree
    dist.all_gather_object(shards, trainer.orders[0])
    if dist.get_rank() == 0:
        write_report(args.report, world_size=world_size, backend=dist.get_backend(),
                     **summary(args, trainer, history, seconds, device),
                     params_identical=len(set(fingerprints)) == 1, fingerprints=fingerprints,
                     **shard_report(shards, trainer.orders, len(train_set)))
    del trainer, model  # DDP holds the process group: free it before leaving the group
    teardown_ddp()


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
