"""dltools.parallel: DataParallel's four steps must give what one device computes, and its
replicas must be what torch.nn.parallel.replicate makes."""
import collections
import functools
import warnings

import pytest
import torch
from torch import nn

from dltools import parallel as P

DEVICE_COUNTS = [1, 2, 3, 4, 5]


def mlp(dtype=torch.float64, bn=False):
    torch.manual_seed(0)
    layers = [nn.Linear(6, 8)] + ([nn.BatchNorm1d(8)] if bn else []) + [nn.ReLU(), nn.Linear(8, 3)]
    return nn.Sequential(*layers).to(dtype)


def cpus(n):
    return ["cpu"] * n


# ------------------------------------------------------------------ chunking and scatter


@pytest.mark.parametrize("batch", [1, 2, 6, 7, 8, 30, 31])
@pytest.mark.parametrize("n", [1, 2, 3, 8])
def test_chunk_sizes_follow_torch_chunk(batch, n):
    sizes = P.chunk_sizes(batch, n)
    assert sizes == [c.shape[0] for c in torch.zeros(batch).chunk(n)]
    assert sum(sizes) == batch and len(sizes) <= n


@pytest.mark.parametrize("args", [(-1, 2), (4, 0), (0, 3)])
def test_chunk_sizes_rejects_bad_input(args):
    with pytest.raises(ValueError, match="batch_size >= 1 and num_devices >= 1"):
        P.chunk_sizes(*args)


def test_chunk_sizes_and_scatter_agree_on_an_empty_batch():
    # torch.chunk gives one empty chunk; DataParallel's scatter refuses it, and so does the rule
    with pytest.raises(ValueError):
        P.scatter(torch.zeros(0, 4), ["cpu"] * 3)
    with pytest.raises(ValueError):
        P.chunk_sizes(0, 3)


def test_scatter_uneven_and_small_batches():
    parts = P.scatter(torch.arange(10), cpus(3))
    assert [p.tolist() for p in parts] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    # fewer rows than devices: fewer pieces, none empty
    assert [p.tolist() for p in P.scatter(torch.arange(2), cpus(4))] == [[0], [1]]


def test_scatter_nested_structures():
    Pair = collections.namedtuple("Pair", "a b")
    x = {"img": torch.arange(12).view(6, 2), "meta": (torch.arange(6), "tag"),
         "p": Pair(torch.zeros(6), 3)}
    parts = P.scatter(x, cpus(2))
    assert len(parts) == 2
    assert parts[1]["img"].tolist() == [[6, 7], [8, 9], [10, 11]]
    assert parts[0]["meta"][0].tolist() == [0, 1, 2] and parts[0]["meta"][1] == "tag"
    assert isinstance(parts[1]["p"], Pair) and parts[1]["p"].b == 3


def test_scatter_along_dim_1():
    parts = P.scatter(torch.arange(12).view(2, 6), cpus(3), dim=1)
    assert [tuple(p.shape) for p in parts] == [(2, 2)] * 3
    assert torch.equal(torch.cat(parts, dim=1), torch.arange(12).view(2, 6))


def test_scatter_kwargs_pads_to_the_same_length():
    ins, kws = P.scatter_kwargs((torch.zeros(4, 1),), {"w": torch.ones(2)}, cpus(4))
    assert len(ins) == len(kws) == 4
    assert kws[3] == {} and ins[3][0].shape == (1, 1)


@pytest.mark.parametrize("bad, message", [
    (torch.tensor(3.0), "0-dim"),
    (torch.zeros(0, 4), "empty batch"),
])
def test_scatter_rejects_batches_that_cannot_be_split(bad, message):
    with pytest.raises(ValueError, match=message):
        P.scatter(bad, cpus(2))


def test_scatter_rejects_a_dim_the_tensor_does_not_have():
    with pytest.raises(ValueError, match="along dim 2"):
        P.scatter(torch.zeros(4, 3), cpus(2), dim=2)


@pytest.mark.parametrize("call", [
    lambda: P.scatter(torch.zeros(4), []),
    lambda: P.replicate(nn.Linear(1, 1), []),
    lambda: P.data_parallel(nn.Linear(1, 1), torch.zeros(2, 1), []),
    lambda: P.DataParallel(nn.Linear(1, 1), device_ids=[]),
    lambda: P.wrap_data_parallel(nn.Linear(1, 1), []),
    lambda: P.parallel_apply([nn.Identity()], [(torch.zeros(1),)], devices=[]),
])
def test_empty_device_list_is_a_clear_error(call):
    with pytest.raises(ValueError, match="empty"):
        call()


@pytest.mark.parametrize("bad", [True, -1, 1.5, None])
def test_as_device_rejects_non_devices(bad):
    with pytest.raises((TypeError, ValueError)):
        P.as_device(bad)


# ------------------------------------------------------------------ forward


@pytest.mark.parametrize("n", DEVICE_COUNTS)
@pytest.mark.parametrize("batch", [1, 3, 10, 16])
def test_forward_matches_single_device(n, batch):
    net = mlp()
    X = torch.randn(batch, 6, dtype=torch.float64)
    out = P.DataParallel(net, device_ids=cpus(n))(X)
    assert out.shape == (batch, 3)
    assert torch.allclose(out, net(X), rtol=0, atol=1e-12)


def test_forward_float32_within_summation_order_tolerance():
    net = mlp(torch.float32)
    X = torch.randn(64, 6)
    assert torch.allclose(P.data_parallel(net, X, cpus(4)), net(X), atol=1e-5)


def test_split_along_dim_1():
    class SeqFirst(nn.Module):  # input (time, batch, features), batch along dim 1
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 2).double()

        def forward(self, x):
            return self.lin(x)

    net = SeqFirst()
    X = torch.randn(5, 9, 4, dtype=torch.float64)
    out = P.DataParallel(net, device_ids=cpus(3), dim=1)(X)
    assert out.shape == (5, 9, 2)
    assert torch.allclose(out, net(X), atol=1e-12)


class NestedNet(nn.Module):
    """Takes a tuple and a keyword dict, returns a dict holding a tuple: every container gather
    knows."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 2).double()
        self.b = nn.Linear(3, 2).double()

    def forward(self, pair, extra=None, scale=1.0):
        x, (y, _label) = pair
        out = self.a(x) + self.b(y)
        if extra is not None:
            out = out + extra["bias"]
        return {"out": out * scale, "parts": (self.a(x), [self.b(y)]), "none": None}


@pytest.mark.parametrize("n", [2, 3, 4])
def test_nested_tuple_and_dict_inputs_and_outputs(n):
    net = NestedNet()
    x, y = torch.randn(7, 3, dtype=torch.float64), torch.randn(7, 3, dtype=torch.float64)
    extra = {"bias": torch.randn(7, 2, dtype=torch.float64)}
    got = P.DataParallel(net, device_ids=cpus(n))((x, (y, "label")), extra=extra, scale=2.0)
    want = net((x, (y, "label")), extra=extra, scale=2.0)
    assert set(got) == {"out", "parts", "none"} and got["none"] is None
    assert torch.allclose(got["out"], want["out"], atol=1e-12)
    assert torch.allclose(got["parts"][0], want["parts"][0], atol=1e-12)
    assert isinstance(got["parts"][1], list)
    assert torch.allclose(got["parts"][1][0], want["parts"][1][0], atol=1e-12)


def test_output_device_is_honoured():
    out = P.data_parallel(mlp(), torch.randn(4, 6, dtype=torch.float64), cpus(2),
                          output_device="cpu")
    assert out.device == torch.device("cpu")


def test_module_must_live_on_device_ids_0():
    net = nn.Linear(2, 2, device="meta")
    with pytest.raises(RuntimeError, match="device_ids\\[0\\]"):
        P.DataParallel(net, device_ids=cpus(2))(torch.zeros(4, 2))


def test_replica_index_tells_each_replica_its_rows():
    seen = {}

    class Spy(nn.Module):
        def forward(self, x):
            seen[P.replica_index()] = x[:, 0].tolist()
            return x

    P.data_parallel(Spy(), torch.arange(5.0).view(5, 1), cpus(3))
    assert seen == {0: [0.0, 1.0], 1: [2.0, 3.0], 2: [4.0]}
    assert P.replica_index() is None


def test_no_grad_forward_gives_no_graph():
    net = mlp()
    with torch.no_grad():
        out = P.data_parallel(net, torch.randn(6, 6, dtype=torch.float64), cpus(3))
    assert not out.requires_grad


def test_replicate_copies_are_independent_but_equal():
    net = mlp(bn=True)
    reps = P.replicate(net, cpus(3))
    for r in reps:
        # replica parameters are plain tensors (differentiable copies), so look them up by path
        for name, t in list(net.named_parameters()) + list(net.named_buffers()):
            assert torch.equal(functools.reduce(getattr, name.split("."), r), t), name
    # replica 0 shares the master's buffers (its BatchNorm statistics are kept); others are copies
    assert reps[0][1].running_mean.data_ptr() == net[1].running_mean.data_ptr()
    assert reps[1][1].running_mean.data_ptr() != net[1].running_mean.data_ptr()


# ------------------------------------------------------------------ backward


@pytest.mark.parametrize("n", [2, 3, 4, 5])
@pytest.mark.parametrize("batch", [10, 12])
def test_gradients_and_sgd_step_match_single_device(n, batch):
    X = torch.randn(batch, 6, dtype=torch.float64)
    y = torch.randint(0, 3, (batch,))
    loss = nn.CrossEntropyLoss()  # mean over the gathered batch = the full-batch mean
    single, parallel = mlp(), mlp()
    dp = P.DataParallel(parallel, device_ids=cpus(n))
    for net, model in [(single, single), (parallel, dp)]:
        opt = torch.optim.SGD(net.parameters(), lr=0.5)
        loss(model(X), y).backward()
        if net is single:
            grads = [p.grad.clone() for p in net.parameters()]
        else:
            for p, g in zip(net.parameters(), grads):
                assert torch.allclose(p.grad, g, atol=1e-12)
        opt.step()
    for p, q in zip(single.parameters(), parallel.parameters()):
        assert torch.allclose(p, q, atol=1e-12)


def test_mean_of_per_replica_means_is_not_the_full_batch_mean():
    # A loss averaged inside each replica, then averaged over replicas, weighs the rows of a small
    # last chunk more: with 10 rows on 3 devices (4, 4, 2) it is not the full-batch loss.
    class LossInside(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 1).double()

        def forward(self, x, y):
            return ((self.lin(x).squeeze(1) - y) ** 2).mean()

    net = LossInside()
    X, y = torch.randn(10, 2, dtype=torch.float64), torch.randn(10, dtype=torch.float64)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        per_replica = P.data_parallel(net, (X, y), cpus(3))
    assert per_replica.shape == (3,)
    assert any("scalars" in str(m.message) for m in w)
    assert not torch.allclose(per_replica.mean(), net(X, y))
    # weighting each replica's mean by its row count gives the full-batch mean back
    weights = torch.tensor(P.chunk_sizes(10, 3), dtype=torch.float64) / 10
    assert torch.allclose((per_replica * weights).sum(), net(X, y), atol=1e-12)


def test_batchnorm_differs_but_no_batchnorm_matches():
    X = torch.randn(12, 6, dtype=torch.float64)
    for bn in (False, True):
        net = mlp(bn=bn).train()
        diff = (P.data_parallel(net, X, cpus(3)) - net(X)).abs().max().item()
        assert (diff > 1e-6) if bn else (diff < 1e-12), (bn, diff)


# ------------------------------------------------------------------ errors and warnings


def test_exception_in_a_replica_reaches_the_caller():
    class FailsInReplica1(nn.Module):
        def forward(self, x):
            if P.replica_index() == 1:
                raise KeyError("boom")
            return x

    with pytest.raises(KeyError, match="replica 1") as info:
        P.data_parallel(FailsInReplica1(), torch.zeros(4, 1), cpus(2))
    assert isinstance(info.value.__cause__, KeyError)


def test_gather_of_scalars_warns_and_returns_a_vector():
    with pytest.warns(UserWarning, match="all input tensors were scalars"):
        v = P.gather([torch.tensor(1.0), torch.tensor(2.0)], "cpu")
    assert v.tolist() == [1.0, 2.0]


def test_gather_and_parallel_apply_reject_mismatches():
    with pytest.raises(ValueError, match="at least one output"):
        P.gather([], "cpu")
    with pytest.raises(ValueError, match="2 modules but 1 inputs"):
        P.parallel_apply([nn.Identity(), nn.Identity()], [(torch.zeros(1),)])


# ------------------------------------------------------------------ wrapping, timelines, traffic


def test_state_dict_prefix_and_wrap():
    dp = P.wrap_data_parallel(nn.Linear(2, 2), cpus(2))
    assert isinstance(dp, P.DataParallel)
    assert list(dp.state_dict()) == ["module.weight", "module.bias"]
    single = nn.Linear(2, 2)
    assert P.wrap_data_parallel(single, cpus(1)) is single


def test_timeline_records_every_step():
    dp = P.DataParallel(mlp(), device_ids=cpus(3))
    dp.timeline = []
    dp(torch.randn(9, 6, dtype=torch.float64))
    lanes = [(e["lane"], e["what"]) for e in dp.timeline]
    assert lanes == [("master", "scatter"), ("master", "replicate"), ("replica 0", "forward"),
                     ("replica 1", "forward"), ("replica 2", "forward"), ("master", "gather")]
    assert all(e["end"] >= e["start"] for e in dp.timeline)
    dp.timeline = None
    dp(torch.randn(9, 6, dtype=torch.float64))  # recording off: nothing breaks


def test_replica_parameters_come_from_one_broadcast_node():
    net = mlp()
    reps = P.replicate(net, cpus(3))
    node = reps[0][0].weight.grad_fn
    assert all(getattr(r[k], name).grad_fn is node for r in reps for k in (0, 2)
               for name in ("weight", "bias"))
    assert type(reps[0][0].weight.grad_fn).__name__ == "BroadcastBackward"
    assert reps[0][0].weight.data_ptr() == net[0].weight.data_ptr()
    assert all(r[0].weight.data_ptr() != net[0].weight.data_ptr() for r in reps[1:])
    # no graph when detached (no_grad forward)
    assert all(r[0].weight.grad_fn is None for r in P.replicate(net, cpus(2), detach=True))


def test_gradients_reach_the_master_only_after_every_replica_is_done():
    """As PyTorch's Broadcast/ReduceAddCoalesced: one reduce at the end of backward, not a copy
    back per tensor as soon as that tensor's gradient is ready in each replica."""
    net = mlp()
    order = []

    def watch_first_layer(module, inputs, output):  # runs in every replica (shared hooks)
        module.weight.register_hook(lambda g: order.append("replica"))

    net[0].register_forward_hook(watch_first_layer)
    net[2].weight.register_post_accumulate_grad_hook(lambda p: order.append("master"))
    dp = P.DataParallel(net, device_ids=cpus(3))
    dp.timeline = []
    dp(torch.randn(9, 6, dtype=torch.float64)).sum().backward()
    assert order == ["replica"] * 3 + ["master"], order
    reduces = [e for e in dp.timeline if e["what"] == "reduce gradients"]
    assert len(reduces) == 1 and reduces[0]["lane"] == "master"
    assert reduces[0]["start"] >= max(e["end"] for e in dp.timeline if e["what"] == "gather")


def test_broadcast_skips_gradients_of_tensors_that_need_none():
    w = torch.ones(2, requires_grad=True)
    frozen = torch.ones(2)
    outs = P.Broadcast.apply(cpus(2), None, w, frozen)
    assert [o.requires_grad for o in outs] == [True, False, True, False]
    (outs[0] + outs[2]).sum().backward()
    assert w.grad.tolist() == [2.0, 2.0]


# ------------------------------------------------------------------ shallow replicas, as PyTorch's


class Tagged(nn.Module):
    """A module with a plain attribute, a forward that sets state, a buffer and a hookable child."""

    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.lin = nn.Linear(3, 2)
        self.register_buffer("count", torch.zeros(1))
        self.calls = []

    def forward(self, x):
        self.last_rows = x.shape[0]  # set on the replica: lost with it
        self.calls.append(x.shape[0])  # mutates a shared list: seen by the original
        return self.lin(x) * self.scale


def _torch_replicas(net, n):
    """What torch.nn.parallel.replicate builds before it broadcasts: one shallow copy per module."""
    modules = list(net.modules())
    return [[m._replicate_for_data_parallel() for m in modules] for _ in range(n)]


def test_replicate_is_shallow_like_torch():
    net = Tagged()
    handle = net.lin.register_forward_hook(lambda m, i, o: None)
    ours = [list(r.modules()) for r in P.replicate(net, cpus(3))]
    theirs = _torch_replicas(net, 3)
    for our_mods, torch_mods in zip(ours, theirs):
        assert len(our_mods) == len(torch_mods)
        for orig, a, b in zip(net.modules(), our_mods, torch_mods):
            assert a is not orig
            # the same dicts are shared in both: hooks, plain attributes
            for attr in ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks"):
                assert getattr(a, attr) is getattr(b, attr) is getattr(orig, attr), attr
            plain = {k for k in b.__dict__ if k not in ("_parameters", "_buffers", "_modules")}
            assert plain <= set(a.__dict__)
            for k in plain - {"_is_replica"}:
                assert a.__dict__[k] is b.__dict__[k] is orig.__dict__[k], k
            assert a._is_replica and b._is_replica
            assert a._parameters == {} or all(v is None for v in a._parameters.values())
            assert set(a._buffers) == set(b._buffers) == set(orig._buffers)
    handle.remove()
    assert all(len(mods[1]._forward_hooks) == 0 for mods in ours)  # removed from replicas too


def test_replicate_buffers_like_torch():
    net = mlp(bn=True)
    reps = P.replicate(net, cpus(3))
    for j, r in enumerate(reps):
        for name, b in net.named_buffers():
            got = functools.reduce(getattr, name.split("."), r)
            assert torch.equal(got, b), name
            # replica 0 on the source device shares the original's buffers; the others own copies
            assert (got.data_ptr() == b.data_ptr()) == (j == 0), (j, name)
            assert name in dict(r.named_buffers())  # buffers stay buffers (parameters do not)
    assert list(reps[1].parameters()) == []  # as in torch: replica parameters are not Parameters


def test_replica_state_set_in_forward_is_lost_and_hooks_fire_on_every_replica():
    net = Tagged()
    fired = []
    net.lin.register_forward_hook(lambda m, i, o: fired.append(o.shape[0]))
    P.data_parallel(net, torch.randn(5, 3), cpus(2))
    assert not hasattr(net, "last_rows")  # set on the replicas only
    assert sorted(net.calls) == [2, 3]  # a shared list is mutated through the replicas
    assert sorted(fired) == [2, 3]  # the original's hook ran on each replica


def test_replicate_keeps_tied_parameters_tied():
    lin = nn.Linear(3, 3)
    net = nn.Sequential(lin, nn.ReLU(), lin)
    r = P.replicate(net, cpus(2))[1]
    assert r[0].weight is r[2].weight and r[0] is r[2]


def test_cpu_replicas_share_the_intra_op_threads():
    """k replicas on the CPU run with torch's threads split between them, then the count is back."""
    class Threads(nn.Module):
        def forward(self, x):
            return torch.tensor([float(torch.get_num_threads())])

    before = torch.get_num_threads()
    torch.set_num_threads(4)
    try:
        outs = P.parallel_apply([Threads(), Threads()], [(torch.zeros(1),)] * 2,
                                       devices=["cpu", "cpu"])
        assert [o.item() for o in outs] == [2.0, 2.0]
        outs = P.parallel_apply([Threads()] * 4, [(torch.zeros(1),)] * 4,
                                       devices=["cpu"] * 4)
        assert [o.item() for o in outs] == [1.0] * 4
        assert torch.get_num_threads() == 4
    finally:
        torch.set_num_threads(before)


def test_a_recorded_timeline_waits_for_the_gpus(monkeypatch):
    """GPUs run asynchronously: each recorded span must synchronise first (faked CUDA here)."""
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: calls.append(device))
    net = nn.Linear(3, 2)
    P.data_parallel(net, torch.ones(4, 3), ["cpu", "cpu"])
    assert calls == []                                  # nothing recorded, nothing waited for
    events = []
    out = P.data_parallel(net, torch.ones(4, 3), ["cpu", "cpu"], timeline=events)
    spans = sum(e["lane"] == "master" for e in events)  # scatter, replicate, gather
    assert spans == 3 and calls.count(0) == calls.count(1) == 2 * spans
    out.sum().backward()                                # the gradient reduce is timed too
    assert calls.count(0) == 2 * spans + 2


def test_parallel_apply_takes_each_replicas_device_from_its_input_as_pytorch_does():
    # replicas keep their parameter copies as attributes: the module alone says "cpu"
    reps = P.replicate(nn.Linear(2, 2).to("meta"), ["meta", "meta"])
    assert [P._module_device(r) for r in reps] == [torch.device("cpu")] * 2
    devices = []

    class Spy(nn.Module):
        def forward(self, X):
            devices.append(P._input_device((X,), self))
            return X

    P.parallel_apply([Spy(), Spy()], [(torch.zeros(1, device="meta"),), ({"x": 1},)])
    assert sorted(map(str, devices)) == ["cpu", "meta"]   # the tensor's device; none: the CPU
    assert P._input_device((torch.zeros(1, device="meta"),), None) == torch.device("meta")
    assert P._input_device(({"a": [torch.zeros(1, device="meta")]},), None) == torch.device("meta")
