"""The model every technique of notebook 05 trains: a stack of residual MLP blocks.

A transformer's MLP block (``x + down(gelu(up(x)))``, hidden width ``4 * width``) holds two thirds
of its parameters and is the block tensor parallelism splits. Widths divisible by the world size
let FSDP2 shard without padding, so measured bytes can be compared with the formulas exactly.
"""
import copy

import torch
from torch import nn

__all__ = [
    "UPDATE_TOLERANCE",
    "Block",
    "make_batch",
    "make_model",
    "max_rel_diff",
    "reference_steps",
    "update_diff",
]


#: how far (:func:`update_diff`) a technique's update may be from one process's: notebook 05's
#: optional section "the update's tolerance" says why, and the tests use the same number
UPDATE_TOLERANCE = 1e-2


class Block(nn.Module):
    """``x + down(gelu(up(x)))``, the MLP half of a transformer layer."""

    def __init__(self, width):
        super().__init__()
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(nn.functional.gelu(self.up(x)))


def make_model(width=64, depth=4, seed=0):
    """``depth`` blocks of ``width``, the same weights on every rank for the same ``seed``.

    >>> sum(p.numel() for p in make_model(8, 2).parameters())   # 2 * (8*32 + 32 + 32*8 + 8)
    1104
    """
    gen_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    model = nn.Sequential(*[Block(width) for _ in range(depth)])
    torch.random.set_rng_state(gen_state)
    return model


def make_batch(batch=32, width=64, seed=1):
    """Inputs and regression targets, identical on every rank for the same ``seed``."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, width, generator=gen)
    return x, torch.randn(batch, width, generator=gen)


def max_rel_diff(a, b):
    """``max|a - b| / max|b|`` over two lists of tensors (0 when equal).

    >>> max_rel_diff([torch.tensor([1.0, 2.0])], [torch.tensor([1.0, 2.5])])
    0.2
    """
    num = max(float((x.detach().cpu().double() - y.detach().cpu().double()).abs().max())
              for x, y in zip(a, b, strict=True))
    den = max(float(y.detach().cpu().double().abs().max()) for y in b)
    return num / den if den else num


def reference_steps(model, x, y, steps, lr):
    """Train a copy of ``model`` in this process with Adam on the full batch; the baseline.

    Returns ``(losses, params after the last step, grads of the first step)``, on the CPU. The
    first step's gradients are compared before the runs' weights can drift apart; parameters
    after the last step are compared with :func:`update_diff`.
    """
    ref = copy.deepcopy(model)
    opt = torch.optim.Adam(ref.parameters(), lr=lr)
    losses, grads = [], None
    for _ in range(steps):
        opt.zero_grad()
        loss = nn.functional.mse_loss(ref(x), y)
        loss.backward()
        grads = grads or [p.grad.detach().cpu().clone() for p in ref.parameters()]
        opt.step()
        losses.append(loss.item())
    return losses, [p.detach().cpu().clone() for p in ref.parameters()], grads


def update_diff(params, ref_params, initial):
    """How far the training run's total update is from the reference's, relative to its size:
    ``||(params - initial) - (ref_params - initial)|| / ||ref_params - initial||``.

    Adam's first step moves each weight by ``lr`` times the sign of its gradient (when the
    gradient is well above ``eps``), whatever the gradient's size, so if rounding flips the sign
    of a near-zero gradient, that weight ends ``2 * lr`` away from the reference after one step;
    measured against the whole update such flips are tiny, while a rank that skipped its update,
    or a missing gather, is not.

    >>> p0 = [torch.zeros(4)]
    >>> update_diff([torch.tensor([1.0, 1, 1, 1.5])], [torch.ones(4)], p0)
    0.25
    """
    def flat(ts):
        return torch.cat([t.detach().cpu().double().flatten() for t in ts])
    ref_update = flat(ref_params) - flat(initial)
    diff = flat(params) - flat(ref_params)
    return round(float(diff.norm() / ref_update.norm()), 12)
