"""How closely notebook 03's twin trainings agree: one batch of 96 against two halves of 48.

DDP on N processes computes each step's gradient as the mean of N per-shard means, where one
process computes one mean over the whole batch: the same number, summed in another order. Notebook
03 checks that the two runs end within 1e-5 of each other. This script trains the notebook's CNN
with train_single.py's own trainer (2 epochs of 1152 images, batch 96, lr 0.1) both ways on each
device here, the batch split into halves standing in for two ranks, and prints the largest
parameter difference at the end:

- on the CPU, which is what the notebook runs on a machine with fewer than 2 GPUs;
- on GPU 0 with float32 convolutions in full float32 (``fp32_precision = "ieee"``, which
  ``scripts/common.full_float32`` sets), and with cuDNN's default, TF32;
- a GPU run against a CPU run, for both precisions.

No timing: the numbers are differences, the same on every run of one machine and software.

    python benchmarks/bench_float32_agreement.py            # writes a table; on a GPU, its rows too
"""
import contextlib
import io
import sys

import torch

import _common

sys.path.insert(0, str(_common.ROOT / "scripts"))
import common  # noqa: E402  (scripts/common.py: the notebook's model and data)
import train_single  # noqa: E402  (its Trainer: the scripts' loop and shuffle)

LIMIT = 1e-5  # what notebook 03 asks of its twins


class HalvesTrainer(train_single.Trainer):
    """train_single.py's trainer, but each step's loss is the mean of the two half-batches' mean
    losses: the gradient DDP's averaging computes on 2 ranks."""

    def _run_batch(self, X, y):
        self.optimizer.zero_grad()
        loss = sum(self.loss(self.model(Xh), yh) for Xh, yh in zip(X.chunk(2), y.chunk(2))) / 2
        loss.backward()
        self.optimizer.step()
        return loss.detach()


def train(device, precision, halves, num_train, epochs):
    """The parameters after training as train_single.py does (seed 0, batch 96, lr 0.1) on
    ``device``, with whole batches or (``halves``) two halves per step."""
    if device.type == "cuda":
        torch.backends.cudnn.conv.fp32_precision = precision
    torch.manual_seed(0)
    model = common.build_model()
    trainer = (HalvesTrainer if halves else train_single.Trainer)(
        model, common.load_train_set(num_train), 96, 0.1, 0, device)
    with contextlib.redirect_stdout(io.StringIO()):   # the trainer prints each epoch's loss
        trainer.train(epochs)
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def max_diff(a, b):
    return max((a[k] - b[k]).abs().max().item() for k in a)


def main(argv=None):
    p = _common.parser(__doc__.splitlines()[0])
    args = _common.parse(p, argv)
    num_train, epochs = (192, 1) if args.smoke else (1152, 2)
    runs = {}
    cpu = torch.device("cpu")
    runs["cpu", "float32"] = [train(cpu, None, h, num_train, epochs) for h in (False, True)]
    if torch.cuda.is_available():
        gpu = torch.device("cuda", 0)
        for precision in ("ieee", "tf32"):
            runs["cuda:0", precision] = [train(gpu, precision, h, num_train, epochs)
                                         for h in (False, True)]
        torch.backends.cudnn.conv.fp32_precision = "tf32"  # back to cuDNN's default
    rows = []
    for (device, precision), (full, split) in runs.items():
        d = max_diff(full, split)
        rows.append([f"{device}, {precision}", "batch of 96 vs two halves", f"{d:.1e}",
                     "yes" if d < LIMIT else "no"])
    for precision in ("ieee", "tf32"):
        if ("cuda:0", precision) in runs:
            d = max_diff(runs["cuda:0", precision][0], runs["cpu", "float32"][0])
            rows.append([f"cuda:0, {precision}", "GPU vs CPU, batch of 96", f"{d:.1e}",
                         "yes" if d < LIMIT else "no"])
    _common.print_report(
        f"Twin trainings' agreement ({epochs} epochs of {num_train} images, batch 96)",
        ["device, float32 convolutions", "compared", "max abs parameter difference",
         f"within {LIMIT:g}"], rows,
        notes=["ieee: full float32 (scripts/common.full_float32); tf32: cuDNN's default for "
               "float32 convolutions, inputs rounded to 10 mantissa bits."])


if __name__ == "__main__":
    main()
