"""The C ABI from another language: Python's ctypes (bindings/c/ctypes),
with no other door into Gossamer. Four processes train a linear model whose
data differ by rank under Crossover-SGD, and a bad key is an error naming it.
Run by ctest with GOSSAMER_C_LIBRARY set to the built libgossamer_c."""
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CTYPES_DIR = os.path.join(os.path.dirname(HERE), "ctypes")

RANK = textwrap.dedent("""
    import json, sys
    import numpy as np
    from gossamer_ctypes import CAgent
    rank, n, rendezvous = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    config = "transport:\\n  kind: socket\\n  host: 127.0.0.1\\n  timeout_seconds: 20\\n" \\
             "algorithm:\\n  name: crossover_sgd\\n  segments: 2\\ntraining:\\n  learning_rate: 0.05\\n" \\
             "  momentum: 0.5\\nrun:\\n  metrics: false\\n"
    rng = np.random.default_rng(100 + rank)
    x = (rng.standard_normal((256, 8)) + 0.3 * rank).astype(np.float32)
    w_true = np.arange(8, dtype=np.float32) / 8
    y = x @ w_true + 0.5
    def loss(p):
        return float(np.mean((x @ p[:8] + p[8] - y) ** 2))
    with CAgent(config, rank, rendezvous, world_size=n, is_text=True) as agent:
        assert (agent.rank, agent.world_size) == (rank, n)
        params = np.zeros(9, dtype=np.float32)
        agent.broadcast(params, 0)
        agent.make_optimizer([8, 1])
        before = loss(params)
        for step in range(200):
            batch = rng.integers(0, 256, 32)
            err = x[batch] @ params[:8] + params[8] - y[batch]
            grads = np.concatenate([2 * x[batch].T @ err / 32, [2 * err.mean()]]).astype(np.float32)
            agent.step(params, grads)
        agent.flush(params)
        mean = params.copy()
        agent.allreduce(mean, "average")
        distance = float(np.linalg.norm(params - mean))
        agent.barrier()
        print(json.dumps({"before": before, "after": loss(params), "steps": agent.steps, "distance": distance}))
""")


def run_ranks(tmp_path, n, script):
    path = tmp_path / "rank.py"
    path.write_text(script)
    env = dict(os.environ, PYTHONPATH=CTYPES_DIR + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = [subprocess.Popen([sys.executable, str(path), str(r), str(n), str(tmp_path / "rv")], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(n)]
    out = []
    try:
        for p in procs:
            stdout, stderr = p.communicate(timeout=120)
            assert p.returncode == 0, stderr
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    return out


def test_four_processes_train_through_the_c_abi_alone(tmp_path):
    if "GOSSAMER_C_LIBRARY" not in os.environ:
        pytest.fail("GOSSAMER_C_LIBRARY is not set (ctest sets it to the built libgossamer_c)")
    results = run_ranks(tmp_path, 4, RANK)
    for r in results:
        assert r["steps"] == 200
        assert r["after"] < 0.05 * r["before"], r
        assert r["distance"] < 0.05, r


def test_a_bad_key_is_an_error_naming_it(tmp_path):
    sys.path.insert(0, CTYPES_DIR)
    from gossamer_ctypes import CAgent, GossamerCError, library
    assert library().gossamer_c_api_version() == 1
    with pytest.raises(GossamerCError) as e:
        CAgent("world_size: 1\nalgorithm:\n  nmae: sgp\n", 0, str(tmp_path / "rv"), is_text=True)
    assert e.value.status == "GOSSAMER_E_CONFIG"
    assert e.value.key == "algorithm.nmae" and e.value.line == 3


ONE = "world_size: 1\ntransport:\n  kind: socket\n  host: 127.0.0.1\n  timeout_seconds: 10\nrun:\n  metrics: false\n"


def ctypes_module():
    """gossamer_ctypes over the built library (GOSSAMER_C_LIBRARY, as ctest sets it)."""
    if "GOSSAMER_C_LIBRARY" not in os.environ:
        pytest.fail("GOSSAMER_C_LIBRARY is not set (ctest sets it to the built libgossamer_c)")
    if CTYPES_DIR not in sys.path:
        sys.path.insert(0, CTYPES_DIR)
    import gossamer_ctypes
    return gossamer_ctypes


def test_read_only_outputs_and_non_arrays_are_refused_before_the_c_call(tmp_path):
    gc = ctypes_module()
    with gc.CAgent(ONE, 0, str(tmp_path / "rv"), is_text=True) as agent:
        # A read-only view of writable memory: the C call would write through it.
        base = np.arange(4, dtype=np.float32)
        ro = base.view()
        ro.setflags(write=False)
        for call in (agent.allreduce, agent.broadcast):
            with pytest.raises(ValueError, match="^data is read-only: the collective writes into it"):
                call(ro)
            with pytest.raises(TypeError, match="^data must be a C-contiguous float32 or float64 numpy array, "
                                                "not list"):
                call([1.0, 2.0])
        agent.make_optimizer([3, 1])
        grads = np.ones(4, dtype=np.float32)
        with pytest.raises(ValueError, match="^params is read-only: the call writes into it"):
            agent.step(ro, grads)  # SGD would have moved every element
        np.testing.assert_array_equal(base, np.arange(4, dtype=np.float32))
        for call in (agent.reduce_gradients, agent.mix_parameters, agent.flush):
            with pytest.raises(ValueError, match="is read-only: the call writes into it"):
                call(ro)
        np.testing.assert_array_equal(base, np.arange(4, dtype=np.float32))
        with pytest.raises(TypeError, match="^params must be a C-contiguous float32 numpy array, not tuple"):
            agent.step((0.0, 1.0, 2.0, 3.0), grads)
        # grads are only read: a read-only one is taken, and the step runs.
        ro_grads = np.full(4, 2.0, dtype=np.float32)
        ro_grads.setflags(write=False)
        agent.step(base, ro_grads)
        assert agent.steps == 1
        assert not np.array_equal(base, np.arange(4, dtype=np.float32))


RANK_MEAN = textwrap.dedent("""
    import json, sys
    import numpy as np
    from gossamer_ctypes import CAgent
    rank, n, rendezvous = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    config = "transport:\\n  kind: socket\\n  host: 127.0.0.1\\n  timeout_seconds: 20\\nrun:\\n  metrics: false\\n"
    with CAgent(config, rank, rendezvous, world_size=n, is_text=True) as agent:
        out = {}
        for op in ("mean", "average", "sum"):
            x = np.array([1.0, 2.0, 3.0], dtype=np.float32) * (rank + 1)
            agent.allreduce(x, op)
            out[op] = x.tolist()
        y = np.array([float(rank + 1)])
        agent.allreduce(y, op="mean")
        out["mean64"] = y.tolist()
        try:
            agent.allreduce(np.zeros(3, dtype=np.float32), "prod")
            out["bad_op"] = None
        except Exception as e:
            out["bad_op"] = f"{type(e).__name__}: {e}"
        agent.barrier()
        print(json.dumps(out))
""")


def test_mean_is_average_and_an_unknown_op_is_a_value_error(tmp_path):
    results = run_ranks(tmp_path, 2, RANK_MEAN)
    for r in results:
        assert r["mean"] == [1.5, 3.0, 4.5] and r["average"] == [1.5, 3.0, 4.5], r
        assert r["sum"] == [3.0, 6.0, 9.0] and r["mean64"] == [1.5], r
        assert r["bad_op"].startswith("ValueError: op must be one of 'sum', 'average', 'mean', 'max', 'min'"), r


def test_a_step_before_make_optimizer_is_the_c_abis_error(tmp_path):
    gc = ctypes_module()
    with gc.CAgent(ONE, 0, str(tmp_path / "rv"), is_text=True) as agent:
        params, grads = np.ones(3, dtype=np.float32), np.ones(3, dtype=np.float32)
        for call in (lambda: agent.step(params, grads), lambda: agent.reduce_gradients(grads),
                     lambda: agent.mix_parameters(params), lambda: agent.flush(params)):
            with pytest.raises(gc.GossamerCError,
                               match="^GOSSAMER_E_INVALID_ARGUMENT: .*no optimizer: call gossamer_make_optimizer "
                                     "first") as e:
                call()
            assert e.value.status == "GOSSAMER_E_INVALID_ARGUMENT"
        with pytest.raises(gc.GossamerCError, match="no optimizer: call gossamer_make_optimizer first"):
            agent.steps
        np.testing.assert_array_equal(params, np.ones(3, dtype=np.float32))
        agent.make_optimizer([3])
        agent.step(params, grads)
        assert agent.steps == 1
