"""dltools.beyond.memory: measured bytes, the formulas, and the collective counter."""
import pytest
import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol
from torch import nn

from dltools.beyond.memory import (
    CollectiveBytes,
    bytes_per_param,
    per_rank_bytes,
    saved_activation_bytes,
    state_bytes,
)
from dltools.distributed import single_process_group


def test_state_bytes_counts_what_adam_keeps():
    net = nn.Linear(100, 10)
    opt = torch.optim.Adam(net.parameters())
    assert state_bytes(net, opt) == {"params": 4040, "grads": 0, "optimizer": 0}  # lazy state
    net(torch.ones(2, 100)).sum().backward()
    opt.step()
    # two moments of 1010 floats, plus one 4-byte step counter per parameter tensor
    assert state_bytes(net, opt) == {"params": 4040, "grads": 4040, "optimizer": 8080 + 8}
    sgd = torch.optim.SGD(net.parameters(), lr=0.1)
    sgd.step()
    assert state_bytes(net, sgd)["optimizer"] == 0


def test_bytes_per_param_and_sharding():
    assert sum(bytes_per_param("fp32").values()) == sum(bytes_per_param("bf16").values()) == 16
    assert bytes_per_param("fp32", "sgd") == {"params": 4, "grads": 4, "optimizer": 0}
    with pytest.raises(ValueError, match="precision"):
        bytes_per_param("fp16")
    full = per_rank_bytes(1000, 1)["total"]
    assert per_rank_bytes(1000, 4, stage=3)["total"] == full / 4
    assert per_rank_bytes(1000, 4, stage=2) == {"params": 4000, "grads": 1000.0,
                                                 "optimizer": 2000.0, "total": 7000.0}
    assert per_rank_bytes(1000, 4, stage=0) == per_rank_bytes(1000, 1, stage=0)


def test_saved_activation_bytes_grow_with_the_batch_and_skip_parameters():
    net = nn.Sequential(nn.Linear(10, 50), nn.Tanh(), nn.Linear(50, 1))
    _, small = saved_activation_bytes(net, torch.ones(4, 10))
    _, big = saved_activation_bytes(net, torch.ones(8, 10))
    # Linear saves its input, Tanh its output, the last Linear its input (the same tensor)
    assert small == 4 * (4 * 10 + 4 * 50) and big == 2 * small
    with torch.no_grad():
        assert saved_activation_bytes(net, torch.ones(4, 10))[1] == 0


def test_collective_bytes_counts_c10d_and_functional_collectives():
    with single_process_group(), CollectiveBytes() as c:
        t = torch.ones(6)
        dist.all_reduce(t)
        dist.broadcast(t, src=0)
        out = torch.empty(6)
        # torch 2.13 renamed these (..._single); the older names are what the floor, 2.12, has
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(out, t)
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(torch.empty(6), out)
        funcol.all_reduce(torch.ones(3), "sum", dist.group.WORLD).wait()
        getattr(funcol, "all_gather_single", funcol.all_gather_tensor)(
            torch.ones(5), 0, dist.group.WORLD).wait()
        torch.ones(3) + 1                                   # not a collective: not counted
    assert dict(c.counts) == {"all_reduce": 2, "broadcast": 1, "all_gather": 2,
                              "reduce_scatter": 1}
    assert dict(c.nbytes) == {"all_reduce": 24 + 12, "broadcast": 24, "all_gather": 24 + 20,
                              "reduce_scatter": 24}


def test_saved_activation_bytes_leaves_out_the_given_parameters():
    net = nn.Linear(10, 20)
    x = torch.ones(4, 10, requires_grad=True)
    # as a module, its parameters are known: only the input (4x10 floats) is an activation
    assert saved_activation_bytes(net, x)[1] == 4 * 4 * 10
    # as a plain function, Linear's saved weight counts unless the parameters are given
    assert saved_activation_bytes(lambda t: net(t), x)[1] == 4 * 4 * 10 + 4 * 10 * 20
    assert saved_activation_bytes(lambda t: net(t), x, params=net.parameters())[1] == 4 * 4 * 10


def count_gathers_and_scatters():
    """On every rank of a launch: the bytes CollectiveBytes counts for c10d's and the functional
    all-gather and reduce-scatter, with N ranks (the full tensor: N times a rank's piece)."""
    import torch.distributed._functional_collectives as fc
    n = dist.get_world_size()
    with CollectiveBytes() as c:
        piece = torch.ones(6)
        whole = torch.empty(6 * n)
        getattr(dist, "all_gather_single", dist.all_gather_into_tensor)(whole, piece)
        getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)(torch.empty(6), whole)
        getattr(fc, "all_gather_single", fc.all_gather_tensor)(
            torch.ones(5), 0, dist.group.WORLD).wait()
        fc.reduce_scatter_tensor(torch.ones(4 * n), "sum", 0, dist.group.WORLD).wait()
    return n, dict(c.counts), dict(c.nbytes)


def test_collective_bytes_counts_the_whole_tensor_on_two_ranks():
    from dltools.distributed import launch
    for n, counts, nbytes in launch(count_gathers_and_scatters, 2, timeout=60):
        assert n == 2 and counts == {"all_gather": 2, "reduce_scatter": 2}
        assert nbytes == {"all_gather": 4 * (6 * n + 5 * n), "reduce_scatter": 4 * (6 * n + 4 * n)}
