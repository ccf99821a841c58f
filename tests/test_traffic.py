"""dltools.traffic: collective byte counts checked against step-by-step simulations, and
DataParallel's per-step bytes checked against counts made by hand and by running the real steps."""
import math

import pytest
import torch
from torch import nn

from dltools import parallel, traffic
from dltools.traffic import OPS, collective_bytes, dp_step_bytes, tensor_bytes


def _links(n):
    return {(i, j): 0 for i in range(n) for j in range(n) if i != j}


def simulate(op, s, n):
    """Move pieces between ranks one message at a time, as the algorithm does; count per link."""
    links = _links(n)
    piece = s / n
    if op in ("all_reduce", "reduce_scatter", "all_gather"):
        rounds = {"all_reduce": 2 * (n - 1), "reduce_scatter": n - 1, "all_gather": n - 1}[op]
        for _ in range(rounds):  # in every ring round, each rank sends one piece to its neighbour
            for r in range(n):
                links[(r, (r + 1) % n)] += piece
    elif op in ("broadcast", "reduce"):
        for r in range(n - 1):  # chain 0 -> 1 -> ... -> n-1, every piece travels every link
            src, dst = (r, r + 1) if op == "broadcast" else (r + 1, r)
            for _ in range(n):
                links[(src, dst)] += piece
    elif op == "naive_all_reduce":
        for r in range(1, n):
            links[(r, 0)] += s
            links[(0, r)] += s
    sent = [sum(v for (a, _), v in links.items() if a == r) for r in range(n)]
    received = [sum(v for (_, b), v in links.items() if b == r) for r in range(n)]
    return dict(sent_per_rank=max(sent), received_per_rank=max(received), root_sent=sent[0],
                root_received=received[0], total=sum(links.values()))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("n", [2, 3, 4, 8])
def test_collective_bytes_match_a_simulation(op, n):
    got = collective_bytes(op, 1200, n)
    want = simulate(op, 1200, n)
    assert got == pytest.approx(want), (op, n)


def test_collective_bytes_known_values():
    assert collective_bytes("all_reduce", 100, 2)["sent_per_rank"] == 100
    assert collective_bytes("all_reduce", 100, 4)["total"] == 600
    assert collective_bytes("reduce_scatter", 100, 4)["received_per_rank"] == 75
    b = collective_bytes("broadcast", 100, 8)
    assert (b["root_sent"], b["root_received"], b["total"]) == (100, 0, 700)
    r = collective_bytes("reduce", 100, 8)
    assert (r["root_sent"], r["root_received"], r["total"]) == (0, 100, 700)
    assert collective_bytes("naive_all_reduce", 100, 8)["root_received"] == 700
    assert collective_bytes("all_reduce", 100, 3)["sent_per_rank"] == pytest.approx(400 / 3)
    assert set(collective_bytes("broadcast", 5, 1).values()) == {0}


@pytest.mark.parametrize("bad", [("ring", 10, 2), ("broadcast", 10, 0), ("broadcast", -1, 2),
                                 ("broadcast", 10, 2.0), ("broadcast", 10, True)])
def test_collective_bytes_rejects_bad_arguments(bad):
    with pytest.raises(ValueError):
        collective_bytes(*bad)


def test_dp_step_bytes_by_hand():
    net = nn.Linear(10, 2)  # 22 parameters = 88 bytes
    t = dp_step_bytes(net, torch.zeros(12, 10), num_devices=3)  # chunks of 4 rows
    assert t["replicas"] == 3
    assert t["scatter"] == {"master_sent": 8 * 40, "master_received": 0, "total": 8 * 40}
    assert t["broadcast"] == {"master_sent": 88, "master_received": 0, "total": 2 * 88}
    assert t["gather"] == {"master_sent": 0, "master_received": 8 * 8, "total": 8 * 8}
    assert t["output_grads"] == {"master_sent": 8 * 8, "master_received": 0, "total": 8 * 8}
    assert t["reduce"] == {"master_sent": 0, "master_received": 88, "total": 2 * 88}
    assert t["step"] == {"master_sent": 320 + 88 + 64, "master_received": 64 + 88,
                         "total": 320 + 176 + 64 + 64 + 176}


def test_dp_step_bytes_master_link_stays_one_model_while_total_grows():
    net = nn.Sequential(nn.Linear(32, 64), nn.BatchNorm1d(64), nn.Linear(64, 3))
    X = torch.zeros(64, 32)
    model = tensor_bytes(list(net.parameters()) + list(net.buffers()))
    grads = tensor_bytes(list(net.parameters()))
    for k in (2, 4, 8):
        t = dp_step_bytes(net, X, k)
        assert t["broadcast"]["master_sent"] == model
        assert t["broadcast"]["total"] == (k - 1) * model
        assert t["reduce"]["master_received"] == grads
        assert t["reduce"]["total"] == (k - 1) * grads


def test_dp_step_bytes_frozen_params_small_batch_and_one_device():
    net = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
    net[0].weight.requires_grad_(False)
    t = dp_step_bytes(net, torch.zeros(8, 4), 2)
    # The frozen 4x4 weight is reduced too: its zero gradient goes through the same Broadcast node.
    assert t["reduce"]["master_received"] == (16 + 4 + 8 + 2) * 4
    assert t["broadcast"]["master_sent"] == (16 + 4 + 8 + 2) * 4
    small = dp_step_bytes(net, torch.zeros(2, 4), 8)  # two rows: only two replicas run
    assert small["replicas"] == 2 and small["broadcast"]["total"] == (16 + 4 + 8 + 2) * 4
    one = dp_step_bytes(net, torch.zeros(8, 4), 1)
    assert one["replicas"] == 1 and one["step"] == {"master_sent": 0, "master_received": 0,
                                                    "total": 0}
    with pytest.raises(ValueError, match="num_devices"):
        dp_step_bytes(net, torch.zeros(8, 4), 0)


def test_dp_step_bytes_match_the_real_steps():
    """Compare with the chunks and outputs dltools.parallel really produces (not the meta run)."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Flatten(), nn.Linear(3 * 6 * 6, 5))
    X = torch.randn(10, 1, 8, 8)
    devices = ["cpu"] * 3
    chunks = parallel.scatter((X,), devices)
    outs = parallel.parallel_apply(parallel.replicate(net, devices[:len(chunks)]), chunks)
    t = dp_step_bytes(net, X, 3)
    assert t["scatter"]["master_sent"] == sum(c[0].numel() * 4 for c in chunks[1:])
    assert t["gather"]["master_received"] == sum(o.numel() * 4 for o in outs[1:])


def test_dp_step_bytes_falls_back_when_meta_fails():
    class NeedsData(nn.Module):  # .item() cannot run on the meta device
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)

        def forward(self, x):
            return self.lin(x) * (x.sum().item() * 0 + 1)

    net = NeedsData().train()
    t = dp_step_bytes(net, torch.ones(4, 3), 2)
    assert t["gather"]["master_received"] == 2 * 2 * 4
    assert net.training


def test_dp_step_bytes_fallback_leaves_batchnorm_statistics_alone():
    class NeedsValues(nn.Module):  # .item() cannot run on the meta device
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            return self.bn(x) * (1.0 + 0.0 * x.sum().item())

    net = NeedsValues().train()
    assert dp_step_bytes(net, torch.randn(8, 3), 2)["gather"]["master_received"] == 4 * 3 * 4
    assert net.training and net.bn.training
    assert net.bn.num_batches_tracked.item() == 0


# ------------------------------------------------------------------ message-by-message simulation


@pytest.mark.parametrize("k", [1, 2, 3, 5])
@pytest.mark.parametrize("num_pieces", [1, 3, 8])
def test_pipelined_broadcast_delivers_and_matches_the_formula(k, num_pieces):
    torch.manual_seed(k)
    tensors = [torch.randn(7, 3), torch.arange(5), torch.randn(2, dtype=torch.float64)]
    copies, links = traffic.pipelined_broadcast(tensors, k, num_pieces)
    assert all(torch.equal(a, b) for c in copies for a, b in zip(c, tensors))
    size = traffic.tensor_bytes(tensors)
    formula = traffic.collective_bytes("broadcast", size, k)
    assert sum(links.values()) == formula["total"]
    assert links[(0, 1)] == formula["root_sent"]
    assert all(v == size for v in links.values())  # every link carries the tensors once


@pytest.mark.parametrize("k", [1, 2, 4, 6])
def test_pipelined_reduce_sums_and_matches_the_formula(k):
    torch.manual_seed(k)
    per_device = [[torch.randn(4, 5, dtype=torch.float64), torch.randn(3, dtype=torch.float64)]
                  for _ in range(k)]
    sums, links = traffic.pipelined_reduce(per_device, num_pieces=3)
    for i, s in enumerate(sums):
        assert torch.allclose(s, sum(d[i] for d in per_device))
    size = traffic.tensor_bytes(per_device[0])
    formula = traffic.collective_bytes("reduce", size, k)
    assert sum(links.values()) == formula["total"]
    assert links[(1, 0)] == formula["root_received"]


def test_a_master_that_sends_every_copy_itself_is_not_what_is_simulated():
    # The naive scheme (master sends k - 1 copies) would put (k-1)S on the master's link.
    _, links = traffic.pipelined_broadcast([torch.zeros(10)], 4)
    assert links[(0, 1)] == 40 and (0, 2) not in links and (0, 3) not in links


def test_dp_step_bytes_reduces_frozen_parameters_too():
    # PyTorch's Broadcast backward reduce-adds a (zero) gradient for every parameter, frozen or not;
    # so does dltools' Broadcast, whose backward this runs for real.
    from torch import nn

    from dltools import parallel
    net = nn.Linear(3, 2)
    net.weight.requires_grad_(False)
    t = traffic.dp_step_bytes(net, torch.zeros(4, 3), num_devices=2)
    assert t["reduce"]["master_received"] == 4 * (6 + 2)
    seen = []
    original = parallel.Broadcast.backward

    def recording(ctx, *grads):
        seen.extend(g.shape for g in grads)
        return original(ctx, *grads)

    parallel.Broadcast.backward = staticmethod(recording)
    try:
        r0, r1 = parallel.replicate(net, ["cpu", "cpu"])
        (r0(torch.ones(1, 3)) + r1(torch.ones(1, 3))).sum().backward()
    finally:
        parallel.Broadcast.backward = staticmethod(original)
    assert sum(math.prod(s) for s in seen) * 4 == 2 * t["reduce"]["master_received"]
