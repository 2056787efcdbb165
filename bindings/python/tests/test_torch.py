"""gossamer.torch: a torch.optim optimizer wrapped by the configured
algorithm, trained across processes; the model helpers."""

HEADER = """
import json, os
import numpy as np
import torch
import gossamer, gossamer.torch as gt
torch.manual_seed(0)
torch.set_num_threads(1)
CONFIG = {"transport": {"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 20}}

def data(rank, n=256):
    # A linear regression whose data differ by rank: the ranks must agree on one model.
    g = torch.Generator().manual_seed(100 + rank)
    x = torch.randn(n, 8, generator=g) + 0.3 * rank
    w = torch.arange(8, dtype=torch.float32) / 8
    y = x @ w + 0.5 + 0.05 * torch.randn(n, generator=g)
    return x, y.unsqueeze(1)

class Wide(torch.nn.Linear):
    # A Linear computed in float32 whatever its parameters' dtype (torch 1.13's
    # CPU kernels have no float16 matmul or tanh); the gradients reach the
    # parameters in their own dtype.
    def forward(self, x):
        return torch.nn.functional.linear(x.float(), self.weight.float(), self.bias.float())

def mse(model, rank):
    x, y = data(rank)
    dt = next(model.parameters()).dtype
    with torch.no_grad():
        return float(torch.nn.functional.mse_loss(model(x.to(dt)).float(), y))
"""


def test_wrapped_sgd_under_allreduce_sgd_steps_with_the_mean_gradient(run_ranks):
    job = run_ranks(3, HEADER + """
cfg = dict(CONFIG, algorithm={"name": "allreduce_sgd"})
with gossamer.Agent.from_env(cfg) as a:
    model = torch.nn.Linear(8, 1)
    gt.broadcast_parameters(model, a)
    ref = torch.nn.Linear(8, 1)
    ref.load_state_dict(model.state_dict())
    opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model, a)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.05, momentum=0.9)
    for step in range(10):
        x, y = data(a.rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        # The reference: every rank's gradient, averaged here.
        ref_opt.zero_grad()
        grads = []
        for r in range(a.world_size):
            ref.zero_grad()
            xr, yr = data(r)
            torch.nn.functional.mse_loss(ref(xr), yr).backward()
            grads.append([p.grad.clone() for p in ref.parameters()])
        for i, p in enumerate(ref.parameters()):
            p.grad = sum(g[i] for g in grads) / a.world_size
        ref_opt.step()
    diff = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))
    print(json.dumps({"diff": diff, "w": model.weight.detach().reshape(-1).tolist(), "steps": opt.steps,
                      "consensus": gt.consensus_distance(model, a)}))
""")
    job.check()
    for res in job.results:
        assert res["diff"] < 1e-5, res
        assert res["steps"] == 10
        assert res["consensus"] < 1e-12  # the average of equal models, up to its rounding
        assert res["w"] == job.results[0]["w"]  # identical models on every rank


def test_bucketed_allreduce_overlaps_backward_and_gives_the_same_bits(run_ranks):
    job = run_ranks(3, HEADER + """
cfg = dict(CONFIG, algorithm={"name": "allreduce_sgd"})
with gossamer.Agent.from_env(cfg) as a:
    def make():
        torch.manual_seed(1)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 16),
                                   torch.nn.Tanh(), torch.nn.Linear(16, 1))
    def train(overlap):
        # An agent keeps one optimizer: each run builds its own, one after the other.
        model = make()
        opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model, a,
                                      overlap=overlap, bucket_bytes=128)
        started = []
        for step in range(6):
            x, y = data(a.rank)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            started.append(len(opt._works))  # buckets already started when backward returns
            opt.step()
        return model, opt, started
    m1, o1, started1 = train(True)
    w1 = [p.detach().clone() for p in m1.parameters()]
    # One backward too many with overlap=True: refused at step().
    o1.zero_grad()
    x, y = data(a.rank)
    torch.nn.functional.mse_loss(m1(x), y).backward()
    torch.nn.functional.mse_loss(m1(x), y).backward()
    try:
        o1.step()
        twice = "accepted"
    except RuntimeError as e:
        twice = "gradient was accumulated twice" in str(e)
    m2, o2, started2 = train(False)
    same = all(torch.equal(p, q) for p, q in zip(w1, m2.parameters()))
    try:
        o1.step()
        replaced = "accepted"
    except gossamer.InvalidArgument as e:
        replaced = "replaced by a later" in str(e)
    print(json.dumps({"same": same, "buckets": len(o1._buckets), "started1": started1, "started2": started2,
                      "w": w1[0].reshape(-1).tolist(), "twice": twice, "replaced": replaced}))
""")
    job.check()
    for res in job.results:
        assert res["same"], res
        # 128-byte buckets (32 elements) over 833 parameters, closed once full:
        # [b3 W3 b2] [W2] [b1] [W1].
        assert res["buckets"] == 4
        # When backward returned, the overlap run had started buckets; the other none.
        assert all(n > 0 for n in res["started1"]), res["started1"]
        assert res["started2"] == [0] * 6
        assert res["twice"] is True and res["replaced"] is True
        assert res["w"] == job.results[0]["w"]


def _staged_same_bits(run_ranks, algorithm):
    # The path a model off the CPU (CUDA, ...) takes: the C++ optimizer works
    # on float32 host copies of the flat buffers, filled and read back with
    # torch's copies each step (per bucket under AllReduce-SGD with overlap).
    # Forced here on a CPU float32 model, it must give the bits of the direct
    # path, where the C++ optimizer works on the buffers themselves. The copy
    # across a real device boundary is the device machine's to run.
    job = run_ranks(3, HEADER + f"""
cfg = dict(CONFIG, algorithm={{"name": "{algorithm}"}})
with gossamer.Agent.from_env(cfg) as a:
    def train(staged):
        gt._needs_host_copy = lambda device, dtype: staged or dtype != torch.float32
        torch.manual_seed(1)
        model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
        start = model[0].weight.detach().clone()
        opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), model, a,
                                      bucket_bytes=256)
        for step in range(8):
            x, y = data(a.rank)
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
        opt.flush()
        moved = not torch.equal(start, model[0].weight)
        return [p.detach().clone() for p in model.parameters()], opt._wide is not opt._flat, moved
    direct, copied, moved = train(False)
    staged, copied_staged, _ = train(True)
    print(json.dumps({{"same": all(torch.equal(p, q) for p, q in zip(direct, staged)),
                      "paths": [copied, copied_staged], "moved": moved}}))
""", timeout=180)
    job.check()
    for res in job.results:
        assert res["paths"] == [False, True], res  # the direct path, then the staged one
        assert res["moved"] and res["same"], res


def test_a_model_staged_through_host_copies_trains_to_the_same_bits_allreduce_sgd(run_ranks):
    _staged_same_bits(run_ranks, "allreduce_sgd")


def test_a_model_staged_through_host_copies_trains_to_the_same_bits_crossover_sgd(run_ranks):
    _staged_same_bits(run_ranks, "crossover_sgd")


def _train(run_ranks, n, algorithm, optimizer, extra="", top="", dtype="float32", autocast=False):
    job = run_ranks(n, HEADER + f"""
cfg = dict(CONFIG, algorithm={{"name": "{algorithm}"{extra}}}{top})
dt = torch.{dtype}
with gossamer.Agent.from_env(cfg) as a:
    model = torch.nn.Sequential(Wide(8, 16), torch.nn.Tanh(), Wide(16, 1)).to(dt)
    gt.broadcast_parameters(model, a)
    before = mse(model, a.rank)
    opt = gt.DistributedOptimizer({optimizer}, model, a)
    for step in range(60):
        x, y = data(a.rank)
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled={autocast}):
            out = model(x.to(dt))
        torch.nn.functional.mse_loss(out.float(), y).backward()
        opt.step()
    dtypes = sorted({{str(p.dtype) for p in model.parameters()}})
    opt.flush()
    consensus = gt.consensus_distance(model, a)
    gt.average_parameters(model, a)
    after = mse(model, a.rank)
    print(json.dumps({{"before": before, "after": after, "consensus": consensus, "dtypes": dtypes,
                      "final_consensus": gt.consensus_distance(model, a)}}))
""", timeout=180)
    job.check()
    return job.results


def test_wrapped_adam_under_crossover_sgd_trains_4_ranks_to_consensus(run_ranks):
    for res in _train(run_ranks, 4, "crossover_sgd", "torch.optim.Adam(model.parameters(), lr=0.01)"):
        assert res["after"] < 0.2 * res["before"], res
        assert res["consensus"] < 1e-2, res
        assert res["final_consensus"] < 1e-12


def test_wrapped_sgd_under_sgp_overlap_trains(run_ranks):
    for res in _train(run_ranks, 3, "sgp", "torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)",
                      ', "mode": "overlap"'):
        assert res["after"] < 0.2 * res["before"], res
        assert res["consensus"] < 1e-2, res


def test_heterogeneity_corrected_gossip_trains_a_torch_model(run_ranks):
    # Gradient tracking (the wrapped SGD steps along the tracker), D² on the
    # ring (Adam: the correction is the last mix's displacement) and
    # quasi-global momentum (plain SGD at training.learning_rate: the
    # algorithm brings the momentum), on data that differ by rank.
    cases = [
        ("gradient_tracking", "torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)", "", ""),
        ("d2", "torch.optim.Adam(model.parameters(), lr=0.01)", "",
         ', topology={"kind": "ring", "self_weight": 0.5}'),
        ("quasi_global_momentum", "torch.optim.SGD(model.parameters(), lr=0.02)", "",
         ', training={"learning_rate": 0.02, "momentum": 0.9}'),
    ]
    for algorithm, optimizer, extra, top in cases:
        for res in _train(run_ranks, 4, algorithm, optimizer, extra, top):
            assert res["after"] < 0.2 * res["before"], (algorithm, res)
            assert res["consensus"] < 1e-2, (algorithm, res)


def test_wrapped_adamw_under_topk_compression_trains(run_ranks):
    for res in _train(run_ranks, 2, "allreduce_sgd", "torch.optim.AdamW(model.parameters(), lr=0.01)",
                      top=', compression={"kind": "topk", "topk_ratio": 0.25}'):
        assert res["after"] < 0.2 * res["before"], res
        assert res["consensus"] < 1e-10, res  # every rank decodes the same gradient


def test_bfloat16_and_float16_models_train_under_gossip_and_allreduce(run_ranks):
    # A 16-bit model: parameters and gradients stay views of 16-bit flat
    # buffers; the exchanges run on float32 copies rounded back once.
    for res in _train(run_ranks, 3, "crossover_sgd", "torch.optim.Adam(model.parameters(), lr=0.01)",
                      dtype="bfloat16"):
        assert res["dtypes"] == ["torch.bfloat16"], res
        assert res["after"] < 0.25 * res["before"], res
        assert res["final_consensus"] == 0.0, res  # a 16-bit average: the same bits everywhere
    results = _train(run_ranks, 2, "allreduce_sgd", "torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9)",
                     dtype="float16")
    for res in results:
        assert res["dtypes"] == ["torch.float16"], res
        assert res["after"] < 0.25 * res["before"], res
        assert res["consensus"] == 0.0, res  # averaged gradients, rounded alike: identical models


def test_training_under_autocast_keeps_float32_master_weights(run_ranks):
    for res in _train(run_ranks, 2, "allreduce_sgd", "torch.optim.Adam(model.parameters(), lr=0.01)",
                      autocast=True):
        assert res["dtypes"] == ["torch.float32"], res
        assert res["after"] < 0.2 * res["before"], res
        assert res["consensus"] < 1e-12, res


def test_the_model_becomes_views_of_one_flat_buffer(run_ranks):
    job = run_ranks(2, HEADER + """
with gossamer.Agent.from_env(CONFIG) as a:
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    values = [p.detach().clone() for p in model.parameters()]
    opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1), model, a)
    flat = opt.flat_parameters
    kept = all(torch.equal(p, v) for p, v in zip(model.parameters(), values))
    base = flat.data_ptr()
    offsets = [(p.data_ptr() - base) // 4 for p in model.parameters()]
    x = torch.randn(5, 4)
    opt.zero_grad()
    model(x).sum().backward()
    grads_fused = all(p.grad.data_ptr() == opt._flat_grad.data_ptr() + 4 * o
                      for p, o in zip(model.parameters(), offsets))
    opt.step()
    opt.optimizer.zero_grad(set_to_none=True)   # .grad replaced by autograd next time
    model(x).sum().backward()
    opt.step()
    rebound = all(p.grad.data_ptr() == opt._flat_grad.data_ptr() + 4 * o
                  for p, o in zip(model.parameters(), offsets))
    print(json.dumps({"kept": kept, "offsets": offsets, "grads_fused": grads_fused, "rebound": rebound,
                      "same_flat": flat.data_ptr() == base, "steps": opt.steps}))
""")
    job.check()
    for res in job.results:
        assert res["kept"] and res["grads_fused"] and res["rebound"] and res["same_flat"]
        assert res["offsets"] == [0, 12, 15, 21]
        assert res["steps"] == 2


def test_wrapper_refuses_what_it_cannot_train(run_ranks):
    job = run_ranks(1, HEADER + """
out = []
with gossamer.Agent.from_env(CONFIG) as a:
    m = torch.nn.Linear(2, 2).double()
    try:
        gt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), m, a)
    except TypeError as e:
        out.append(str(e))
    m = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Linear(2, 2).to(torch.bfloat16))
    try:
        gt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), m, a)
    except TypeError as e:
        out.append(str(e))
    m = torch.nn.Linear(2, 2)
    other = torch.nn.Linear(2, 2)
    try:
        gt.DistributedOptimizer(torch.optim.SGD(other.parameters(), lr=0.1), m, a)
    except ValueError as e:
        out.append(str(e))
    try:  # the optimizer trains the model and a parameter of another one
        gt.DistributedOptimizer(torch.optim.SGD(list(m.parameters()) + [other.bias], lr=0.1), m, a)
    except ValueError as e:
        out.append(str(e))
print(json.dumps(out))
""")
    job.check()
    msgs = job.results[0]
    assert "is torch.float64 on cpu; Gossamer trains parameters of one dtype (float32, bfloat16 or float16) on one device" in msgs[0]
    assert "parameter 2 (shape (2, 2)) is torch.bfloat16 on cpu" in msgs[1]
    assert "(parameter 0 is torch.float32 on cpu)" in msgs[1]
    assert "is not in the optimizer" in msgs[2]
    assert "param group 0 holds a parameter (shape (2,)) that is not in the model" in msgs[3]


def test_closures_skipped_steps_no_grad_and_buffers_keep_the_replicas_equal(run_ranks):
    # AllReduce-SGD on 2 ranks whose losses differ, with and without overlap:
    # steps taken with a closure (its gradients are the averaged ones), a
    # backward whose step is skipped (zero_grad completes its allreduces), a
    # wrapper built under torch.no_grad() or inference_mode(); the replicas
    # stay equal. A
    # BatchNorm's running statistics are broadcast and averaged with the
    # parameters.
    job = run_ranks(2, HEADER + """
cfg = dict(CONFIG, algorithm={"name": "allreduce_sgd"})
out = {}
with gossamer.Agent.from_env(cfg) as a:
    for overlap in (False, True):
        model = torch.nn.Linear(8, 1)
        gt.broadcast_parameters(model, a)
        with (torch.inference_mode() if overlap else torch.no_grad()):
            opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model, a, overlap=overlap)
        x, y = data(a.rank)
        def closure():
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            return loss
        losses = [float(opt.step(closure)) for _ in range(3)]
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()  # a step skipped
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        out[str(overlap)] = {"w": model.weight.detach().reshape(-1).tolist(), "losses": losses,
                             "steps": opt.steps}
    bn = torch.nn.BatchNorm1d(3)
    with torch.no_grad():
        bn.running_mean.fill_(5.0 * a.rank)
        bn.num_batches_tracked.fill_(7 + a.rank)
    gt.average_parameters(bn, a)
    out["averaged_mean"] = bn.running_mean.tolist()
    out["averaged_count"] = int(bn.num_batches_tracked)
    with torch.no_grad():
        bn.running_mean.fill_(5.0 * a.rank)
    gt.broadcast_parameters(bn, a, root=1)
    out["broadcast_mean"] = bn.running_mean.tolist()
    out["broadcast_count"] = int(bn.num_batches_tracked)
print(json.dumps(out))
""")
    job.check()
    r0, r1 = job.results
    for overlap in ("False", "True"):
        assert r0[overlap]["w"] == r1[overlap]["w"], overlap  # one model
        assert r0[overlap]["steps"] == 4
        assert r0[overlap]["losses"] != r1[overlap]["losses"]  # each rank's own loss returned
    assert r0["averaged_mean"] == r1["averaged_mean"] == [2.5, 2.5, 2.5]
    assert (r0["averaged_count"], r1["averaged_count"]) == (7, 8)  # integer buffers stay each rank's
    assert r0["broadcast_mean"] == r1["broadcast_mean"] == [5.0, 5.0, 5.0]
    assert r0["broadcast_count"] == r1["broadcast_count"] == 8


def test_parameters_move_exactly_float64_and_complex(run_ranks):
    job = run_ranks(2, HEADER + """
out = {}
with gossamer.Agent.from_env(CONFIG) as a:
    r = a.rank
    # float64 beyond float32's precision, and complex parameters, as broadcast from rank 1.
    p64 = torch.nn.Parameter(torch.full((2, 3), 0.1 + 1e-12 * (r + 1), dtype=torch.float64))
    c = torch.nn.Parameter(torch.tensor([complex(1 + r, 2 + r), complex(-r, 0.5)], dtype=torch.complex64))
    p32 = torch.nn.Parameter(torch.full((2,), 1.0 + r))
    gt.broadcast_parameters([p64, c, p32], a, root=1)
    out["b64"] = bool(torch.equal(p64.detach(), torch.full((2, 3), 0.1 + 2e-12, dtype=torch.float64)))
    out["bc"] = [[z.real, z.imag] for z in c.detach().tolist()]
    out["dtypes"] = [str(p64.dtype), str(c.dtype)]
    # Averages: float64 kept beside float32, complex part by part.
    q64 = torch.nn.Parameter(torch.full((3,), 1.0 + r + 1e-10, dtype=torch.float64))
    q32 = torch.nn.Parameter(torch.full((2,), 1.0 + r))
    z = torch.nn.Parameter(torch.tensor([complex(1 + r, 2 - r)], dtype=torch.complex128))
    gt.average_parameters([q32, q64, z], a)
    out["a64"] = q64.detach().tolist()
    out["a32"] = q32.detach().tolist()
    out["az"] = [z.detach()[0].real.item(), z.detach()[0].imag.item()]
    out["consensus"] = gt.consensus_distance([q64, z], a)
    try:
        gt.broadcast_parameters([torch.zeros(3, dtype=torch.int64)], a)
    except TypeError as e:
        out["int"] = str(e)
    try:
        gt.average_parameters([], a)
    except ValueError as e:
        out["empty"] = str(e)
print(json.dumps(out))
""")
    job.check()
    for res in job.results:
        assert res["b64"], res
        assert res["bc"] == [[2.0, 3.0], [-1.0, 0.5]], res
        assert res["dtypes"] == ["torch.float64", "torch.complex64"]
        assert res["a64"] == [1.5 + 1e-10] * 3, res
        assert res["a32"] == [1.5, 1.5]
        assert res["az"] == [1.5, 1.5], res
        assert res["consensus"] == 0.0
        assert "parameter 0 (shape (3,)) is torch.int64" in res["int"]
        assert "average_parameters: model has no parameters" in res["empty"]


def test_frozen_parameters_are_left_out_as_ddp_does(run_ranks):
    job = run_ranks(2, HEADER + """
cfg = dict(CONFIG, algorithm={"name": "allreduce_sgd"})
out = {}
with gossamer.Agent.from_env(cfg) as a:
    torch.manual_seed(a.rank)  # different frozen values on each rank until the broadcast
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    model[0].weight.requires_grad_(False)
    gt.broadcast_parameters(model, a)
    frozen = model[0].weight.detach().clone()
    opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05, weight_decay=0.1), model, a)
    for step in range(3):
        x, y = data(a.rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    out["frozen_kept"] = bool(torch.equal(model[0].weight, frozen))
    out["frozen_grad_none"] = model[0].weight.grad is None
    out["trained"] = torch.cat([p.detach().reshape(-1) for p in model.parameters() if p.requires_grad]).tolist()
    out["flat"] = opt.flat_parameters.numel()
    out["steps"] = opt.steps
    model[0].weight.requires_grad_(True)
    try:
        opt.step()
    except RuntimeError as e:
        out["unfrozen"] = str(e)
    model[0].weight.requires_grad_(False)
    model[1].weight.requires_grad_(False)
    try:
        opt.step()
    except RuntimeError as e:
        out["refrozen"] = str(e)
    m = torch.nn.Linear(2, 2).requires_grad_(False)
    try:
        gt.DistributedOptimizer(torch.optim.SGD(m.parameters(), lr=0.1), m, a)
    except ValueError as e:
        out["none"] = str(e)
print(json.dumps(out))
""")
    job.check()
    for res in job.results:
        assert res["frozen_kept"] and res["frozen_grad_none"], res
        assert res["flat"] == 4 + 4 + 1 and res["steps"] == 3
        assert res["trained"] == job.results[0]["trained"]  # averaged gradients: one model
        assert "parameter 0 (shape (4, 8)) was unfrozen" in res["unfrozen"]
        assert "parameter 2 (shape (1, 4)) was frozen" in res["refrozen"]
        assert "no trainable parameter" in res["none"]


def test_a_replaced_wrapper_neither_stays_alive_nor_averages_through_its_hooks(run_ranks):
    # Wrapping the same model again (after freezing a parameter, say): the
    # first wrapper's hooks hold it weakly, and once the agent's optimizer is
    # another one they remove themselves instead of starting allreduces of the
    # old buffers; a wrapper that is freed removes its hooks.
    job = run_ranks(2, HEADER + """
import gc, weakref
cfg = dict(CONFIG, algorithm={"name": "allreduce_sgd"})
out = {}
with gossamer.Agent.from_env(cfg) as a:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Linear(4, 1))
    first = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model, a)
    second = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model, a)
    hooks = second._hooks[0][1].hooks_dict_ref()  # the hooks on parameter 0's accumulator
    out["hooks_both"] = len(hooks)
    for step in range(2):
        x, y = data(a.rank)
        second.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        if step == 0:
            out["first_started"] = len(first._works)
            out["first_hooks"] = len(first._hooks)
        second.step()
    out["steps"] = second.steps
    out["model"] = torch.cat([p.detach().reshape(-1) for p in model.parameters()]).tolist()
    gone = weakref.ref(first)
    del first
    gc.collect()
    out["first_freed"] = gone() is None
    out["hooks_left"] = len(hooks)
    del second
    gc.collect()
    out["hooks_none"] = len(hooks)
print(json.dumps(out))
""")
    job.check()
    for res in job.results:
        assert res["first_started"] == 0 and res["first_hooks"] == 0, res
        assert res["steps"] == 2 and res["first_freed"], res
        assert res["model"] == job.results[0]["model"]
        # A freed wrapper removes its hooks: none is left behind per rebuild.
        assert (res["hooks_both"], res["hooks_left"], res["hooks_none"]) == (2, 1, 0), res


def test_optimizer_state_restarts_as_made_even_when_the_constructor_made_it():
    # After a view change the wrapped optimizer's state starts afresh; Adagrad
    # makes its sums in its constructor, so clearing its state alone would
    # make its next step fail (KeyError 'sum'). Learning rates stay as set.
    import torch
    import gossamer.torch as gt

    w = torch.nn.Parameter(torch.ones(3))
    opt = torch.optim.Adagrad([w], lr=0.5, initial_accumulator_value=0.25)
    initial = gt._state_snapshot(opt)
    for _ in range(2):
        w.grad = torch.full((3,), 2.0)
        opt.step()
    assert torch.equal(opt.state[w]["sum"], torch.full((3,), 8.25))
    opt.param_groups[0]["lr"] = 0.1
    gt._restore_state(opt, initial)
    assert torch.equal(opt.state[w]["sum"], torch.full((3,), 0.25))
    w.grad = torch.full((3,), 2.0)
    opt.step()  # the sums are there again
    assert torch.equal(opt.state[w]["sum"], torch.full((3,), 4.25))
    assert opt.param_groups[0]["lr"] == 0.1
    gt._restore_state(opt, initial)  # a second restart starts from the same copy
    assert torch.equal(opt.state[w]["sum"], torch.full((3,), 0.25))


def test_flush_keeps_what_was_written_to_the_parameters_after_the_last_step(run_ranks):
    # A model that is not float32 on the CPU is exchanged through a float32
    # host copy: flush() must start from the parameters as they are now
    # (here loaded from a state dict), not from the copy the last step left.
    job = run_ranks(2, HEADER + """
cfg = dict(CONFIG, algorithm={"name": "allreduce_sgd"})
out = {}
with gossamer.Agent.from_env(cfg) as a:
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        model = Wide(8, 1).to(dtype)
        gt.broadcast_parameters(model, a)
        opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model, a)
        x, y = data(a.rank)
        opt.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        opt.step()
        state = {k: torch.full_like(v, 0.25) for k, v in model.state_dict().items()}
        model.load_state_dict(state)
        opt.flush()
        out[str(dtype)] = sorted({float(v) for p in model.parameters() for v in p.detach().float().reshape(-1)})
print(json.dumps(out))
""")
    job.check()
    for rank in range(2):
        assert job.results[rank] == {t: [0.25] for t in ("torch.float32", "torch.bfloat16", "torch.float16")}, job.results
