"""Python ranks as real processes on loopback: collectives in place on the
caller's memory, every allreduce algorithm, gossip exchanges, a dead peer,
and the launchers' variables."""

import json
import os
import shutil
import subprocess
import sys

import pytest

HEADER = """
import json, os, sys
import numpy as np
import gossamer
CONFIG = {"transport": {"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 20}}
"""


def test_allreduce_changes_the_callers_numpy_and_torch_memory(run_ranks):
    job = run_ranks(4, HEADER + """
import torch
with gossamer.Agent.from_env(CONFIG) as a:
    r, n = a.rank, a.world_size
    x = np.arange(6, dtype=np.float32).reshape(2, 3) + r
    addr = x.ctypes.data
    a.allreduce(x, op="sum")
    d = np.full(5, r + 1.0)                      # float64
    a.allreduce(d, op="average")
    t = torch.full((1000,), float(r))
    ptr = t.data_ptr()
    a.allreduce(t, op="max")
    low = np.full(3, 10.0 - r, dtype=np.float32)
    a.allreduce(low, op="min")
    try:
        a.allreduce(low, op="product")
        bad = None
    except ValueError as e:
        bad = str(e)
    print(json.dumps({"x": x.tolist(), "same_x": x.ctypes.data == addr, "d": d.tolist(),
                      "t": [t.min().item(), t.max().item()], "same_t": t.data_ptr() == ptr,
                      "low": low.tolist(), "bad": bad}))
""")
    job.check()
    for res in job.results:
        assert res["x"] == [[6 + 4 * i for i in range(3)], [18 + 4 * i for i in range(3)]]
        assert res["same_x"] and res["same_t"]
        assert res["d"] == [2.5] * 5
        assert res["t"] == [3.0, 3.0]
        assert res["low"] == [7.0] * 3
        assert "'max' or 'min'; got 'product'" in res["bad"], res


def test_allreduce_async_overlaps_the_caller_and_gives_the_blocking_bits(run_ranks):
    job = run_ranks(3, HEADER + """
import torch
with gossamer.Agent.from_env(CONFIG) as a:
    r = a.rank
    rng = np.random.default_rng(r)
    buckets = [rng.standard_normal(n).astype(np.float32) for n in (5, 100003, 1, 4096)]
    blocking = [b.copy() for b in buckets]
    for b in blocking:
        a.allreduce(b)
    t = torch.arange(1000, dtype=torch.bfloat16) * (r + 1)
    t_blocking = t.clone()
    a.allreduce(t_blocking, op="sum")
    works = [a.allreduce_async(b) for b in buckets] + [a.allreduce_async(t, op="sum")]
    # Rank 1 starts its reduction only once rank 0 has looked at its own:
    # rank 0's call has returned before it could finish.
    checked = os.path.join(os.environ["GOSSAMER_RENDEZVOUS"], "rank-0-checked")
    if r == 1:
        import time
        deadline = time.monotonic() + 60
        while not os.path.exists(checked):
            assert time.monotonic() < deadline, "rank 0 never looked at its reduction"
            time.sleep(0.01)
    started = a.allreduce_async(np.ones(8, dtype=np.float32), op="sum")
    early = started.is_completed()
    if r == 0:
        open(checked, "w").close()
    started.wait()
    for w in works:
        w.wait()
    out = {"same": [bool(np.array_equal(x, y)) for x, y in zip(buckets, blocking)],
           "t": bool(torch.equal(t, t_blocking)), "early": early, "all_done": all(w.is_completed() for w in works)}
    try:
        a.allreduce_async(np.zeros(3, dtype=np.int32))
        out["int32"] = "accepted"
    except TypeError:
        out["int32"] = "TypeError"
print(json.dumps(out))
""")
    job.check()
    for res in job.results:
        assert res["same"] == [True] * 4 and res["t"] and res["all_done"]
        assert res["int32"] == "TypeError"
    # Rank 0 saw its reduction unfinished: rank 1 had not started its own.
    assert job.results[0]["early"] is False


def test_every_allreduce_algorithm_from_python(run_ranks):
    job = run_ranks(4, HEADER + """
out = {}
with gossamer.Agent.from_env(CONFIG) as a:
    for algo in gossamer.allreduce_algorithms():
        for n in (3, 1000, 70000):
            x = np.full(n, a.rank + 1, dtype=np.float32) * np.arange(n, dtype=np.float32)
            a.allreduce(x, op="sum", algorithm=algo)
            out[f"{algo}/{n}"] = bool(np.array_equal(x, 10 * np.arange(n, dtype=np.float32)))
print(json.dumps(out))
""")
    job.check()
    for res in job.results:
        assert res and all(res.values()), res


def test_16_bit_tensors_and_arrays_are_reduced_in_place_with_torchs_rounding(run_ranks):
    # torch.bfloat16 / torch.float16 tensors and NumPy float16 arrays: every
    # algorithm's sum equals torch's own 16-bit rounding of the exact sum for
    # values whose partial sums are exact, the caller's memory is the result,
    # and a broadcast carries the bits.
    job = run_ranks(4, HEADER + """
import torch
out = {}
with gossamer.Agent.from_env(CONFIG) as a:
    r = a.rank
    for dtype in (torch.bfloat16, torch.float16):
        for algo in gossamer.allreduce_algorithms():
            t = (torch.arange(1001, dtype=torch.float32) % 17 + r).to(dtype)
            ptr = t.data_ptr()
            a.allreduce(t, op="sum", algorithm=algo)
            want = (4 * (torch.arange(1001, dtype=torch.float32) % 17) + 6).to(dtype)
            out[f"{dtype}/{algo}"] = bool(torch.equal(t, want)) and t.data_ptr() == ptr and t.dtype == dtype
        m = torch.full((9,), 0.1 * (r + 1)).to(dtype)
        a.allreduce(m, op="average")
        out[f"{dtype}/average"] = abs(m[0].item() - 0.25) <= 0.25 * 2 ** -6 and bool((m == m[0]).all())
        b = torch.full((33,), float(r) + 0.5).to(dtype)
        a.broadcast(b, root=3)
        out[f"{dtype}/broadcast"] = bool((b == 3.5).all())
    x = np.full(70000, r + 1, dtype=np.float16)
    a.allreduce(x, op="max")
    out["numpy/float16"] = bool((x == 4).all()) and x.dtype == np.float16
print(json.dumps(out))
""")
    job.check()
    for res in job.results:
        assert res and all(res.values()), res


def test_broadcast_and_barrier(run_ranks):
    job = run_ranks(3, HEADER + """
import time
mark = os.environ["GOSSAMER_RENDEZVOUS"] + "-"  # beside the job's rendezvous directory
with gossamer.Agent.from_env(CONFIG) as a:
    x = np.full(10, float(a.rank), dtype=np.float64)
    a.broadcast(x, root=2)
    # Rank 0 comes to the barrier last: once the others are about to enter it.
    if a.rank == 0:
        deadline = time.monotonic() + 60
        while not all(os.path.exists(f"{mark}entering-{r}") for r in (1, 2)):
            assert time.monotonic() < deadline, "ranks 1 and 2 never came to the barrier"
            time.sleep(0.01)
        open(f"{mark}arriving-0", "w").close()
    else:
        open(f"{mark}entering-{a.rank}", "w").close()
    a.barrier()
    arrived = os.path.exists(f"{mark}arriving-0")
    print(json.dumps({"x": x.tolist(), "rank_0_arrived": arrived}))
""")
    job.check()
    for r, res in enumerate(job.results):
        assert res["x"] == [2.0] * 10
        assert res["rank_0_arrived"]  # the others were held until rank 0 arrived


@pytest.mark.parametrize("algorithm", ["crossover_sgd", "sgp"])
def test_gossip_exchange_mixes_towards_the_average(run_ranks, algorithm):
    job = run_ranks(4, HEADER + f"""
cfg = dict(CONFIG, algorithm={{"name": "{algorithm}"}})
with gossamer.Agent.from_env(cfg) as a:
    a.make_optimizer([64])
    x = np.full(64, float(a.rank), dtype=np.float32)
    for _ in range(12):
        a.exchange(x)
    total = x.astype(np.float64).copy()
    a.allreduce(total, op="sum")
    print(json.dumps({{"x0": float(x[0]), "total": float(total[0])}}))
""")
    job.check()
    xs = [res["x0"] for res in job.results]
    assert max(xs) - min(xs) < 0.3, xs          # started 3 apart
    if algorithm == "crossover_sgd":            # doubly stochastic: the sum is kept
        assert job.results[0]["total"] == pytest.approx(6.0, abs=1e-4)


def test_without_membership_a_dead_peer_is_a_peer_failure_on_the_others(run_ranks):
    job = run_ranks(3, HEADER + """
import time
cfg = dict(CONFIG, transport={"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 10},
           membership={"enabled": False})
a = gossamer.Agent.from_env(cfg)
x = np.ones(100000, dtype=np.float32)
a.allreduce(x)
# Rank 2 dies between two calls: once the others have all of the first
# (its last sends are asynchronous, and a process that exits at once may
# take them with it, whichever rank finishes the algorithm first).
mark = os.path.join(os.environ["GOSSAMER_RENDEZVOUS"], "first-done-%d" % a.rank)
open(mark, "w").close()
if a.rank == 2:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not all(
            os.path.exists(os.path.join(os.environ["GOSSAMER_RENDEZVOUS"], "first-done-%d" % r)) for r in (0, 1)):
        time.sleep(0.01)
    os._exit(3)                                 # dies without a goodbye
try:
    for _ in range(100):
        a.allreduce(x)
    print(json.dumps({"raised": None}))
except gossamer.PeerFailure as e:
    print(json.dumps({"raised": "PeerFailure", "peer": e.peer, "msg": str(e)}))
except gossamer.Error as e:
    print(json.dumps({"raised": type(e).__name__, "msg": str(e)}))
a.abort()
""")
    assert job.codes[2] == 3
    for r in (0, 1):
        assert job.codes[r] == 0, job.err[r]
        res = job.results[r]
        assert res["raised"] == "PeerFailure", res


def test_with_membership_the_survivors_recover_and_go_on(run_ranks):
    job = run_ranks(4, HEADER + """
cfg = dict(CONFIG, transport={"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 10},
           membership={"enabled": True, "heartbeat_seconds": 0.1, "suspect_seconds": 2})
a = gossamer.Agent.from_env(cfg)
assert a.has_membership and a.view["members"] == [0, 1, 2, 3]
x = np.ones(1000, dtype=np.float32)
a.allreduce(x)
# Rank 2 dies once the others have all of that allreduce (its last sends are
# asynchronous: a process that exits at once may take them with it).
here = os.environ["GOSSAMER_RENDEZVOUS"]
open(os.path.join(here, "first-done-%d" % a.rank), "w").close()
if a.rank == 2:
    import time
    deadline = time.monotonic() + 60
    while not all(os.path.exists(os.path.join(here, "first-done-%d" % r)) for r in (0, 1, 3)):
        assert time.monotonic() < deadline, "the others never finished the first allreduce"
        time.sleep(0.01)
    os._exit(3)                                 # dies without a goodbye
changes = []
for i in range(50):
    while True:
        x = np.full(1000, a.rank, dtype=np.float32)
        try:
            a.allreduce(x, op="sum")
            break
        except gossamer.PeerFailure as e:       # ViewChanged or the transport's verdict
            changes.append(a.recover())
# The root is a global rank: 3, the view's third member; 2 is gone.
y = np.full(4, a.rank, dtype=np.float32)
a.broadcast(y, root=3)
try:
    a.broadcast(y, root=2)
    refused = ""
except ValueError as e:
    refused = str(e)
print(json.dumps({"sum": float(x[0]), "view": a.view, "changes": changes, "broadcast": float(y[0]),
                  "refused": refused,
                  "viewchanged_is_peerfailure": issubclass(gossamer.ViewChanged, gossamer.PeerFailure)}))
a.close()
""")
    assert job.codes[2] == 3
    for r in (0, 1, 3):
        assert job.codes[r] == 0, job.err[r]
        res = job.results[r]
        assert res["sum"] == 4.0, res              # 0 + 1 + 3: the survivors
        assert res["view"]["members"] == [0, 1, 3]
        assert [c["lost"] for c in res["changes"]] == [[2]]
        assert res["broadcast"] == 3.0, res
        assert "root 2 is not a member of view" in res["refused"], res
        assert res["viewchanged_is_peerfailure"]


LAUNCHERS = {
    "torchrun": lambda r, n, p: {"RANK": str(r), "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                                 "MASTER_PORT": str(p - 1), "TORCHELASTIC_RUN_ID": "t",
                                 "TORCHELASTIC_USE_AGENT_STORE": "True"},
    "env": lambda r, n, p: {"RANK": str(r), "WORLD_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                            "MASTER_PORT": str(p)},
    "mpirun": lambda r, n, p: {"OMPI_COMM_WORLD_RANK": str(r), "OMPI_COMM_WORLD_SIZE": str(n),
                               "OMPI_COMM_WORLD_LOCAL_SIZE": str(n), "PMIX_NAMESPACE": f"pytest{p}"},
    "hydra": lambda r, n, p: {"PMI_RANK": str(r), "PMI_SIZE": str(n), "MASTER_ADDR": "127.0.0.1",
                              "MASTER_PORT": str(p)},
    "srun": lambda r, n, p: {"SLURM_PROCID": str(r), "SLURM_NTASKS": str(n), "SLURM_NNODES": "1",
                             "SLURM_JOB_ID": f"pytest{p}", "SLURM_STEP_ID": "0"},
}


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_from_env_under_each_launchers_variables(run_ranks, tmp_path, launcher, loopback_port):
    port = loopback_port  # rank 0's rendezvous server (MASTER_PORT + 1 under torchrun), or a job name
    job = run_ranks(3, HEADER + """
with gossamer.Agent.from_env(CONFIG) as a:
    x = np.array([a.rank], dtype=np.float32)
    a.allreduce(x, op="sum")
    print(json.dumps({"rank": a.rank, "n": a.world_size, "launcher": a.launcher, "sum": float(x[0]),
                      "rendezvous": gossamer.discover_launch()["rendezvous"]}))
""", launcher_vars=False, env={"TMPDIR": str(tmp_path)},
                   per_rank_env=lambda r: LAUNCHERS[launcher](r, 3, port))
    job.check()
    for r, res in enumerate(job.results):
        assert (res["rank"], res["n"], res["sum"]) == (r, 3, 3.0)
        assert res["launcher"] == launcher
        if launcher in ("torchrun", "env", "hydra"):
            assert res["rendezvous"] == f"tcp://127.0.0.1:{port}"
        else:
            assert res["rendezvous"].startswith(str(tmp_path) + "/gossamer-rendezvous-" + launcher)


@pytest.mark.parametrize("launcher", ["env", "mpirun"])
def test_agents_made_one_after_another_in_one_job_each_meet_their_own(run_ranks, tmp_path, launcher,
                                                                      loopback_port):
    # Three Agents in turn on every rank, over one rendezvous (rank 0's tcp
    # server, or one directory), the second with another transport. Rank 1
    # lingers 1.5 s after its first, so ranks 0 and 2 make their second while
    # it still holds its first: they must meet each other's second, never
    # the first's addresses.
    port = loopback_port
    job = run_ranks(3, HEADER + """
import time
rank = int(os.environ.get("RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "-1")))
sums = []
for turn, kind in enumerate(["zmq", "socket", "zmq"]):
    with gossamer.Agent.from_env({"transport": dict(CONFIG["transport"], kind=kind)}) as a:
        x = np.array([10.0 * turn + a.rank], dtype=np.float32)
        a.allreduce(x, op="sum")
        sums.append(float(x[0]))
    if rank == 1 and turn == 0:
        time.sleep(1.5)
print(json.dumps({"sums": sums}))
""", launcher_vars=False, env={"TMPDIR": str(tmp_path)},
                   per_rank_env=lambda r: LAUNCHERS[launcher](r, 3, port))
    job.check()
    for res in job.results:
        assert res["sums"] == [3.0, 33.0, 63.0]


def test_an_agent_that_timed_out_is_retried_and_meets_the_others(run_ranks):
    # Rank 1 asks for its Agent before rank 0 starts and times out; its retry
    # in the same process meets rank 0's first Agent, not a later one.
    job = run_ranks(2, HEADER + """
import time
rank = int(os.environ["RANK"])
timed_out = os.environ["GOSSAMER_RENDEZVOUS"] + "-rank-1-timed-out"
if rank == 0:
    deadline = time.monotonic() + 60
    while not os.path.exists(timed_out):
        assert time.monotonic() < deadline, "rank 1 never timed out"
        time.sleep(0.01)
else:
    try:
        gossamer.Agent.from_env({"transport": dict(CONFIG["transport"], timeout_seconds=0.5)})
        raise SystemExit("rank 0 was not expected yet")
    except gossamer.TimeoutError as e:
        assert "timed out" in str(e), e
    open(timed_out, "w").close()
with gossamer.Agent.from_env(CONFIG) as a:
    x = np.array([1.0 + a.rank], dtype=np.float32)
    a.allreduce(x, op="sum")
    print(json.dumps({"sum": float(x[0])}))
""")
    job.check()
    assert [res["sum"] for res in job.results] == [3.0, 3.0]


def test_under_mpirun(tmp_path):
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        pytest.fail("mpirun not found (Debian package openmpi-bin)")
    script = tmp_path / "s.py"
    script.write_text(HEADER + """
with gossamer.Agent.from_env(CONFIG) as a:
    x = np.array([1.0], dtype=np.float32)
    a.allreduce(x, op="sum")
    out = {"rank": a.rank, "launcher": a.launcher, "sum": float(x[0])}
    with open(os.path.join(os.path.dirname(__file__), f"out-{a.rank}.json"), "w") as f:
        json.dump(out, f)
""")
    env = dict(os.environ, TMPDIR=str(tmp_path), OMP_NUM_THREADS="1")
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "GOSSAMER_RENDEZVOUS"):
        env.pop(k, None)
    # In a network namespace of its own (tests/in_netns.sh): mpirun's daemon listens on every address.
    in_netns = os.path.join(os.environ["GOSSAMER_SOURCE_DIR"], "tests", "in_netns.sh")
    p = subprocess.run(["bash", in_netns, mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "3", sys.executable,
                        str(script)], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    # Each rank writes its own file: mpirun forwards the ranks' stdout in
    # chunks that may interleave within a line.
    outs = [json.loads((tmp_path / f"out-{r}.json").read_text()) for r in range(3)]
    assert [o["rank"] for o in outs] == [0, 1, 2]
    assert all(o["launcher"] == "mpirun" and o["sum"] == 3.0 for o in outs), outs


def test_torch_training_goes_on_over_the_survivors_of_a_kill_9(run_ranks):
    # 4 ranks train a linear model with the torch optimizer wrapper and
    # Crossover-SGD; rank 2 kills itself with SIGKILL at step 40. The
    # survivors' steps recover by themselves (the elastic agent), the final
    # average runs inside survive(), and every survivor ends with the same
    # model after 150 steps, over the view {0, 1, 3}.
    job = run_ranks(4, HEADER + """
import signal
import torch
import gossamer.torch as gt
cfg = dict(CONFIG, transport={"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 10},
           membership={"enabled": True, "heartbeat_seconds": 0.1, "suspect_seconds": 1.5},
           algorithm={"name": "crossover_sgd", "segments": 2}, topology={"kind": "fair_roulette"})
a = gossamer.Agent.from_env(cfg)
torch.manual_seed(0)
model = torch.nn.Linear(8, 1)
gt.broadcast_parameters(model, a)
opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.05), model, a)
g = torch.Generator().manual_seed(a.rank)
w = torch.arange(8, dtype=torch.float32) / 8
while opt.steps < 150:
    if a.rank == 2 and opt.steps == 40:
        os.kill(os.getpid(), signal.SIGKILL)
    x = torch.randn(16, 8, generator=g)
    loss = ((model(x).squeeze(1) - x @ w) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
opt.flush()
done = a.survive(lambda: gt.average_parameters(model, a))
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
print(json.dumps({"done": done, "steps": opt.steps, "view": a.view["members"],
                  "lost": [c["lost"] for c in a.view_changes], "model": flat.tolist()}))
a.close()
""")
    assert job.codes[2] == -9, job.err[2]
    models = []
    for r in (0, 1, 3):
        assert job.codes[r] == 0, job.err[r]
        res = job.results[r]
        assert res["done"] and res["steps"] == 150, res
        assert res["view"] == [0, 1, 3], res
        assert res["lost"] == [[2]], res
        models.append(res["model"])
    assert models[0] == models[1] == models[2]
    w = [i / 8 for i in range(8)]
    assert max(abs(m - t) for m, t in zip(models[0][:8], w)) < 0.1, models[0]


@pytest.mark.parametrize("overlap,momentum", [(True, 0.0), (False, 0.0), (True, 0.9)])
def test_torch_allreduce_sgd_buckets_survive_a_dead_peer(run_ranks, overlap, momentum):
    # AllReduce-SGD averages gradients bucket by bucket (Agent.allreduce_async);
    # rank 2 is killed at step 3. The survivors' step 3 is redone over the
    # view {0, 1}: every later step averages their two gradients, and both
    # end with the same model after 8 steps, equal to a reference trained on
    # their averaged gradients from step 3 on (with momentum, the wrapped
    # optimizer's state starts afresh at the view change, the reference's too).
    job = run_ranks(3, HEADER + f"""
import signal
import torch
import gossamer.torch as gt
cfg = dict(CONFIG, transport={{"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 10}},
           membership={{"enabled": True, "heartbeat_seconds": 0.1, "suspect_seconds": 1.5}},
           algorithm={{"name": "allreduce_sgd"}})
a = gossamer.Agent.from_env(cfg)
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
ref = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
ref.load_state_dict(model.state_dict())
opt = gt.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.1, momentum={momentum}), model, a,
                              overlap={overlap}, bucket_bytes=64)
ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum={momentum})
def batch(rank, step):
    g = torch.Generator().manual_seed(1000 * rank + step)
    return torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)
here = os.environ["GOSSAMER_RENDEZVOUS"]
while opt.steps < 8:
    step = opt.steps
    if a.rank == 2 and step == 3:
        # Once the others have all of step 2: its last sends are asynchronous, and a process killed at
        # once may take them with it (the others would then redo step 2 without it).
        import time
        deadline = time.monotonic() + 60
        while not all(os.path.exists(os.path.join(here, f"step2-done-{{r}}")) for r in (0, 1)):
            assert time.monotonic() < deadline, "the others never finished step 2"
            time.sleep(0.01)
        os.kill(os.getpid(), signal.SIGKILL)
    x, y = batch(a.rank, step)
    opt.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    opt.step()
    if step == 2:
        open(os.path.join(here, f"step2-done-{{a.rank}}"), "w").close()
    grads = []
    for r in (0, 1, 2) if step < 3 else (0, 1):
        ref.zero_grad()
        torch.nn.functional.mse_loss(ref(batch(r, step)[0]), batch(r, step)[1]).backward()
        grads.append([p.grad.clone() for p in ref.parameters()])
    for i, p in enumerate(ref.parameters()):
        p.grad = sum(g[i] for g in grads) / len(grads)
    if step == 3:
        ref_opt.state.clear()
    ref_opt.step()
diff = max(float((p - q).abs().max()) for p, q in zip(model.parameters(), ref.parameters()))
flat = torch.cat([p.detach().flatten() for p in model.parameters()])
print(json.dumps({{"steps": opt.steps, "view": a.view["members"], "lost": [c["lost"] for c in a.view_changes],
                  "diff": diff, "model": flat.tolist()}}))
a.close()
""")
    assert job.codes[2] == -9, job.err[2]
    for r in (0, 1):
        assert job.codes[r] == 0, job.err[r]
        res = job.results[r]
        assert res["steps"] == 8 and res["view"] == [0, 1], res
        assert res["lost"] == [[2]], res
        assert res["diff"] < 1e-5, res
    assert job.results[0]["model"] == job.results[1]["model"]


def test_survive_takes_a_timeout_that_a_view_change_follows_for_the_peer_failure_it_is(run_ranks, tmp_path):
    # Rank 2 stops itself (SIGSTOP) before an average. The survivors' waits
    # time out after 2 s, before the membership service suspects rank 2
    # (3 s): survive() takes that TimeoutError, once the view is revoked,
    # for the peer failure it is, and averages again over {0, 1}.
    job = run_ranks(3, HEADER + """
import signal, time
cfg = dict(CONFIG, transport={"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 2},
           membership={"enabled": True, "heartbeat_seconds": 0.1, "suspect_seconds": 3},
           algorithm={"name": "allreduce_sgd"})
pids = os.environ["PIDS"]
a = gossamer.Agent.from_env(cfg)
a.barrier()
if a.rank == 2:
    # Stopped only once the others are past the barrier: a message of its
    # still in the zmq I/O thread's hands would never leave a stopped process.
    deadline = time.monotonic() + 20
    while not all(os.path.exists(os.path.join(pids, f"passed{r}")) for r in (0, 1)):
        assert time.monotonic() < deadline, "the others never passed the barrier"
        time.sleep(0.01)
    with open(os.path.join(pids, "rank2.tmp"), "w") as f:
        f.write(str(os.getpid()))
    os.rename(os.path.join(pids, "rank2.tmp"), os.path.join(pids, "rank2"))
    os.kill(os.getpid(), signal.SIGSTOP)
open(os.path.join(pids, f"passed{a.rank}"), "w").close()
x = np.zeros(4, dtype=np.float32)
def average():
    x[:] = a.rank + 1.0
    a.allreduce(x, op="average")
start = time.monotonic()
done = a.survive(average)
took = time.monotonic() - start
if a.rank == 0:
    os.kill(int(open(os.path.join(pids, "rank2")).read()), signal.SIGKILL)
print(json.dumps({"done": done, "x": x.tolist(), "view": a.view["members"], "took": took}))
a.close()
""", env={"PIDS": str(tmp_path)}, timeout=60)
    assert job.codes[2] == -9, job.err[2]
    for r in (0, 1):
        assert job.codes[r] == 0, job.err[r]
    for r in (0, 1):
        res = job.results[r]
        assert res["done"] and res["view"] == [0, 1], (res, job.err[r])
        assert res["x"] == [1.5] * 4, res  # the average of 1 and 2


def test_gossip_exchanges_go_on_over_the_survivors_after_recover(run_ranks):
    # SGP exchanges with the membership service; rank 2 kills itself after 3.
    # A survivor whose exchange fails recovers and tries again: its failed
    # exchange takes no number, and the new view's exchanges are numbered
    # from 0 on every survivor (once each waited on a number of its own, and
    # every exchange timed out). Each makes ten exchanges in the new view.
    job = run_ranks(4, HEADER + """
import signal, time
cfg = dict(CONFIG, transport={"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 4},
           membership={"enabled": True, "heartbeat_seconds": 0.1, "suspect_seconds": 1.5},
           algorithm={"name": "sgp"})
a = gossamer.Agent.from_env(cfg)
a.make_optimizer([64])
x = np.full(64, float(a.rank), dtype=np.float32)
done, failures, timeouts = 0, 0, 0
deadline = time.monotonic() + 30
while done < 10 and time.monotonic() < deadline:
    if a.rank == 2 and done == 3:
        os.kill(os.getpid(), signal.SIGKILL)
    try:
        a.exchange(x)
        done += 1
    except gossamer.PeerFailure:
        failures += 1
        a.recover()
        done = 0  # ten exchanges in the new view, on every survivor
    except gossamer.TimeoutError:
        timeouts += 1
print(json.dumps({"done": done, "failures": failures, "timeouts": timeouts, "view": a.view["members"]}))
a.close()
""", timeout=90)
    assert job.codes[2] == -9, job.err[2]
    for r in (0, 1, 3):
        assert job.codes[r] == 0, job.err[r]
        res = job.results[r]
        assert res["done"] == 10 and res["timeouts"] == 0 and res["failures"] >= 1, res
        assert res["view"] == [0, 1, 3], res
