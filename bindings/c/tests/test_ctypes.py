"""The C ABI from another language: Python's ctypes (bindings/c/ctypes),
with no other door into Gossamer. Four processes train a linear model whose
data differ by rank under Crossover-SGD, and a bad key is an error naming it.
Run by ctest with GOSSAMER_C_LIBRARY set to the built libgossamer_c."""
import gc as pygc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
import weakref

import numpy as np
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CTYPES_DIR = os.path.join(os.path.dirname(HERE), "ctypes")
HEADER = os.path.join(os.path.dirname(HERE), "include", "gossamer", "gossamer.h")

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
    assert library().gossamer_c_api_version() == 2
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


def test_the_agent_keeps_the_model_array_it_was_given_alive(tmp_path):
    # The C agent keeps the address of the model given to step,
    # mix_parameters and flush (a view change may write into it later): the
    # wrapper holds a reference, so that dropping the caller's does not free it.
    gc = ctypes_module()
    with gc.CAgent(ONE, 0, str(tmp_path / "rv"), is_text=True) as agent:
        agent.make_optimizer([3])
        for call in ("step", "mix_parameters", "flush"):
            params = np.ones(3, dtype=np.float32)
            if call == "step":
                agent.step(params, np.ones(3, dtype=np.float32))
            else:
                getattr(agent, call)(params)
            held = weakref.ref(params)
            del params
            pygc.collect()
            assert held() is not None, call


def test_misaligned_arrays_nul_characters_and_a_single_override_string_are_refused_before_the_c_call(tmp_path):
    gc = ctypes_module()
    with pytest.raises(ValueError, match="^config contains a NUL character"):
        gc.CAgent(ONE + "\0# cut here", 0, str(tmp_path / "rv"), is_text=True)
    with pytest.raises(ValueError, match="^rendezvous contains a NUL character"):
        gc.CAgent(ONE, 0, str(tmp_path / "rv") + "\0x", is_text=True)
    with pytest.raises(TypeError, match="^overrides must be a list"):
        gc.CAgent(ONE, 0, str(tmp_path / "rv"), overrides="world_size=1", is_text=True)
    with pytest.raises(ValueError, match=r"^overrides\[0\] contains a NUL character"):
        gc.CAgent(ONE, 0, str(tmp_path / "rv"), overrides=["run.metrics=false\0x"], is_text=True)
    with gc.CAgent(ONE, 0, str(tmp_path / "rv"), is_text=True) as agent:
        raw = np.zeros(4 * 4 + 1, dtype=np.uint8)
        odd = raw[1:].view(np.float32)  # C-contiguous, one byte off its elements' alignment
        assert odd.flags.c_contiguous and not odd.flags.aligned
        with pytest.raises(ValueError, match="^data is not aligned to its 4-byte elements"):
            agent.allreduce(odd)
        agent.make_optimizer([4])
        with pytest.raises(ValueError, match="^params is not aligned to its 4-byte elements"):
            agent.step(odd, np.ones(4, dtype=np.float32))


def test_an_agent_dropped_without_close_is_closed_when_collected(tmp_path):
    gc = ctypes_module()

    def threads():
        return len(os.listdir("/proc/self/task"))

    before = threads()
    for i in range(3):
        gc.CAgent(ONE, 0, str(tmp_path / f"rv{i}"), is_text=True)  # dropped at once
        pygc.collect()
    assert threads() <= before + 1, (before, threads())  # (an agent holds several threads while open)


def test_a_call_refused_as_busy_keeps_the_model_the_agent_had(tmp_path):
    # While rank 0's barrier waits for rank 1 on another thread, a step on
    # rank 0's agent is refused with GOSSAMER_E_BUSY before the optimizer
    # takes its arrays: the wrapper keeps holding the model it had, not the
    # refused call's array.
    gc = ctypes_module()
    two = ONE.replace("world_size: 1", "world_size: 2")
    rv = str(tmp_path / "rv")
    agents = [None, None]
    opened = [threading.Thread(target=lambda r=r: agents.__setitem__(r, gc.CAgent(two, r, rv, is_text=True)))
              for r in range(2)]
    for t in opened:
        t.start()
    for t in opened:
        t.join(timeout=30)
    assert all(a is not None for a in agents), "both agents are made"
    a0, a1 = agents
    try:
        built = [threading.Thread(target=a.make_optimizer, args=([3],)) for a in agents]
        for t in built:
            t.start()
        for t in built:
            t.join(timeout=30)
        model = np.ones(3, dtype=np.float32)
        a0.flush(model)
        waited = []

        def wait_in_barrier():  # (refused as busy while the probe below holds the agent: again)
            deadline = time.monotonic() + 20
            while True:
                try:
                    waited.append(a0.barrier())
                    return
                except gc.GossamerCError as e:
                    if e.status != "GOSSAMER_E_BUSY" or time.monotonic() > deadline:
                        waited.append(e)
                        return
                time.sleep(0.001)

        waiter = threading.Thread(target=wait_in_barrier)
        waiter.start()
        busy = None
        deadline = time.monotonic() + 20
        while busy is None and time.monotonic() < deadline:
            try:
                assert a0.steps == 0
                time.sleep(0.005)
            except gc.GossamerCError as e:
                busy = e
        assert busy is not None and busy.status == "GOSSAMER_E_BUSY", busy
        assert "gossamer_barrier" in str(busy)
        refused = np.zeros(3, dtype=np.float32)
        with pytest.raises(gc.GossamerCError) as e:
            a0.step(refused, np.ones(3, dtype=np.float32))
        assert e.value.status == "GOSSAMER_E_BUSY"
        assert a0._model is model, "the refused call's array did not replace the model"
        a1.barrier()
        waiter.join(timeout=20)
        assert waited == [None], "rank 0's barrier returned"
    finally:
        for a in agents:
            a.close()


def test_integers_outside_the_c_types_range_are_value_errors(tmp_path):
    # ctypes would truncate them: rank 2**32 would make a rank-0 agent, root
    # 2**32 broadcast from rank 0, a size of 2**64 + 4 build a 4-element model.
    gc = ctypes_module()
    rv = str(tmp_path / "rv")
    for rank, world in ((2**32, 0), (2**31, 0), (-2**31 - 1, 0), (0, 2**32 + 1)):
        with pytest.raises(ValueError, match="outside a C int's range"):
            gc.CAgent(ONE, rank, rv, world_size=world, is_text=True)
    with pytest.raises(TypeError, match="^rank must be an int, got bool True"):
        gc.CAgent(ONE, True, rv, is_text=True)
    with pytest.raises(TypeError, match="^world_size must be an int, got float 1.0"):
        gc.CAgent(ONE, 0, rv, world_size=1.0, is_text=True)
    with gc.CAgent(ONE, np.int64(0), rv, world_size=np.int32(1), is_text=True) as agent:
        assert (agent.rank, agent.world_size) == (0, 1)
        x = np.arange(3, dtype=np.float32)
        for root in (2**32, 2**31, -2**31 - 1):
            with pytest.raises(ValueError, match=f"^root {root} is outside a C int's range"):
                agent.broadcast(x, root=root)
        # In range but not a rank: the C ABI's own error.
        with pytest.raises(gc.GossamerCError) as e:
            agent.broadcast(x, root=2**31 - 1)
        assert e.value.status == "GOSSAMER_E_INVALID_ARGUMENT"
        with pytest.raises(ValueError, match=r"^tensor_sizes\[1\] 18446744073709551620 does not fit a size_t"):
            agent.make_optimizer([3, 2**64 + 4])
        with pytest.raises(ValueError, match=r"^tensor_sizes\[0\] is negative \(-1\)"):
            agent.make_optimizer([-1])
        with pytest.raises(TypeError, match=r"^tensor_sizes\[0\] must be an int, got bool True"):
            agent.make_optimizer([True])
        with pytest.raises(gc.GossamerCError, match="add up to more than"):
            agent.make_optimizer([2**64 - 1])  # the largest size_t reaches C, which refuses it
        with pytest.raises(gc.GossamerCError, match="no optimizer"):
            agent.steps  # none of the refused calls made one
        agent.broadcast(x, root=0)
        np.testing.assert_array_equal(x, np.arange(3, dtype=np.float32))


def c_types():
    """The ctypes type of each parameter or result type spelled in gossamer.h (enums are C ints; None: void)."""
    import ctypes
    P = ctypes.POINTER
    return {
        "void": None, "int": ctypes.c_int, "size_t": ctypes.c_size_t, "const char*": ctypes.c_char_p,
        "char*": P(ctypes.c_char), "gossamer_status": ctypes.c_int, "gossamer_dtype": ctypes.c_int,
        "gossamer_op": ctypes.c_int, "gossamer_agent*": ctypes.c_void_p, "const gossamer_agent*": ctypes.c_void_p,
        "gossamer_agent**": P(ctypes.c_void_p), "const char* const*": P(ctypes.c_char_p), "void*": ctypes.c_void_p,
        "float*": P(ctypes.c_float), "const float*": P(ctypes.c_float), "int*": P(ctypes.c_int),
        "uint64_t*": P(ctypes.c_uint64), "size_t*": P(ctypes.c_size_t), "const size_t*": P(ctypes.c_size_t),
    }


def declared_in_header():
    """{name: (result, [parameter types])} of every GOSSAMER_C_EXPORT function in gossamer.h, as ctypes
    types (c_types())."""
    import re
    text = re.sub(r"/\*.*?\*/", " ", open(HEADER).read(), flags=re.S)
    types = c_types()

    def ctype(spelling):
        return types[re.sub(r"\s*\*", "*", " ".join(spelling.split()))]

    out = {}
    for result, name, params in re.findall(r"GOSSAMER_C_EXPORT\s+([\w\s\*]+?)\s*\b(gossamer_\w+)\s*\(([^)]*)\)",
                                           text):
        args = []
        for p in params.split(","):
            if p.strip() == "void":
                continue
            args.append(ctype(re.fullmatch(r"\s*(.*?[\w\*])\s*\b\w+\s*", p).group(1)))  # the name dropped
        out[name] = (ctype(result), args)
    return out


def test_every_entry_point_of_the_header_is_declared_with_its_exact_c_types():
    gc = ctypes_module()
    lib = gc.library()
    header = declared_in_header()
    # The header's functions are the library's exports (the parse missed none).
    exported = subprocess.run(["nm", "-D", "--defined-only", os.environ["GOSSAMER_C_LIBRARY"]], check=True,
                              capture_output=True, text=True).stdout
    assert set(header) == {f[2] for f in map(str.split, exported.splitlines()) if len(f) == 3}
    assert {"gossamer_agent_from_env", "gossamer_view", "gossamer_recover", "gossamer_metrics_poll"} <= set(header)
    for name, (result, params) in header.items():
        fn = getattr(lib, name)
        assert fn.argtypes is not None, f"{name} is not declared"
        assert (list(fn.argtypes), fn.restype) == (params, result), name


def test_the_modules_status_and_version_are_the_headers_and_the_librarys_soname_carries_the_version():
    import re
    gc = ctypes_module()
    header = open(HEADER).read()
    version = int(re.search(r"^#define GOSSAMER_C_API_VERSION (\d+)$", header, re.M).group(1))
    statuses = {name: int(v) for name, v in re.findall(r"\b(GOSSAMER_(?:OK|E_\w+)) = (\d+)", header)}
    assert gc._API_VERSION == version
    assert (gc._STATUS_OK, gc._STATUS_INVALID_ARGUMENT, gc._STATUS_BUSY) == (
        statuses["GOSSAMER_OK"], statuses["GOSSAMER_E_INVALID_ARGUMENT"], statuses["GOSSAMER_E_BUSY"])
    assert gc.library().gossamer_c_api_version() == version
    dynamic = subprocess.run(["readelf", "-d", os.environ["GOSSAMER_C_LIBRARY"]], check=True,
                             capture_output=True, text=True).stdout
    assert re.findall(r"\(SONAME\)\s+Library soname: \[(.*)\]", dynamic) == [f"libgossamer_c.so.{version}"]
    assert os.path.basename(os.environ["GOSSAMER_C_LIBRARY"]).startswith(f"libgossamer_c.so.{version}.")


def test_a_library_of_another_c_api_version_or_none_is_refused_naming_it(monkeypatch):
    gc = ctypes_module()
    path = os.environ["GOSSAMER_C_LIBRARY"]
    monkeypatch.setattr(gc, "_LIB", None)
    monkeypatch.setattr(gc, "_API_VERSION", gc._API_VERSION + 1)
    with pytest.raises(OSError) as e:
        gc.library()
    assert path in str(e.value) and f"version {gc._API_VERSION - 1}" in str(e.value), e.value
    assert gc._LIB is None, "a refused library is not kept"
    monkeypatch.setattr(gc, "_API_VERSION", gc._API_VERSION - 1)
    monkeypatch.setenv("GOSSAMER_C_LIBRARY", "libc.so.6")  # loads, but is not libgossamer_c
    with pytest.raises(OSError) as e:
        gc.library()
    assert "libc.so.6 exports no gossamer_c_api_version" in str(e.value), e.value


def test_from_env_view_recover_and_metrics_poll_through_ctypes(tmp_path, monkeypatch):
    gc = ctypes_module()
    for var in ("RANK", "WORLD_SIZE", "GOSSAMER_RENDEZVOUS", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK",
                "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(gc.GossamerCError, match="no launcher found") as e:
        gc.CAgent.from_env(ONE, is_text=True)
    assert e.value.status == "GOSSAMER_E_INVALID_ARGUMENT"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    monkeypatch.setenv("GOSSAMER_RENDEZVOUS", str(tmp_path / "rv"))
    config = ("world_size: 3\ntransport:\n  kind: socket\n  host: 127.0.0.1\n  timeout_seconds: 10\n"
              "membership:\n  enabled: false\n")
    overrides = [f"run.dir={tmp_path / 'run'}", "run.metrics_every=1"]
    with gc.CAgent.from_env(config, overrides=overrides, is_text=True) as agent:
        assert (agent.rank, agent.world_size) == (0, 1)  # the launcher's world size, not the config's
        assert agent.view == (0, [0])
        with pytest.raises(gc.GossamerCError, match="membership service") as e:
            agent.recover()
        assert e.value.status == "GOSSAMER_E_INVALID_ARGUMENT"
        agent.make_optimizer([3])
        agent.step(np.ones(3, dtype=np.float32), np.ones(3, dtype=np.float32))
        records = agent.metrics()
        kinds = [r["kind"] for r in records]
        assert kinds[0] == "start" and "step" in kinds, kinds
        assert agent.metrics() == []
    with pytest.raises(gc.GossamerCError, match="agent is NULL"):  # closed: CAgent dropped its handle
        agent.view


def test_error_text_that_is_not_utf8_is_replaced_not_a_decode_error(tmp_path):
    gc = ctypes_module()
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"world_size: 1\nalgorithm:\n  n\xe4me: sgp\n")  # Latin-1 for "name" with an a-umlaut
    with pytest.raises(gc.GossamerCError) as e:
        gc.CAgent(str(path), 0, str(tmp_path / "rv"))
    assert e.value.status == "GOSSAMER_E_CONFIG" and e.value.line == 3
    assert e.value.key == "algorithm.n\ufffdme" and "n\ufffdme" in str(e.value)
