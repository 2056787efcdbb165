"""Single-process checks of every binding entry point: arguments, errors and
their types, the optimizer handle, configs from files and mappings."""

import array
import gc
import json
import subprocess
import sys
import tempfile
import weakref

import numpy as np
import pytest

import gossamer

ONE = {"world_size": 1, "transport": {"kind": "zmq", "timeout_seconds": 5}}


@pytest.fixture
def agent(tmp_path):
    a = gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / "rv"))
    yield a
    a.close()


def test_exception_classes_keep_their_cpp_hierarchy():
    for cls in (gossamer.InvalidArgument, gossamer.ConfigError, gossamer.ProtocolError, gossamer.TimeoutError,
                gossamer.PeerFailure, gossamer.Cancelled, gossamer.InternalError):
        assert issubclass(cls, gossamer.Error)
    assert issubclass(gossamer.InvalidArgument, ValueError)
    assert issubclass(gossamer.TimeoutError, TimeoutError)
    assert issubclass(gossamer.Error, RuntimeError)


def test_agent_reports_rank_world_and_components(agent):
    assert (agent.rank, agent.world_size) == (0, 1)
    assert agent.algorithm == "crossover_sgd"
    assert agent.transport == "zmq"
    assert agent.timeout_seconds == 5
    assert "rank 0 of 1" in repr(agent)
    assert set(agent.stats()) == {"bytes_sent", "bytes_received", "messages_sent", "messages_received"}


def test_config_from_a_file_with_overrides(tmp_path):
    cfg = tmp_path / "c.yaml"
    cfg.write_text("world_size: 3\ntransport:\n  kind: zmq\nalgorithm:\n  name: sgp\n")
    with gossamer.Agent(cfg, 0, world_size=1, rendezvous=str(tmp_path / "rv"),
                        overrides=["transport.timeout_seconds=7"]) as a:
        assert a.world_size == 1
        assert a.algorithm == "sgp"
        assert a.timeout_seconds == 7
    assert a.closed


def test_config_errors_name_file_line_and_key(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("world_size: 1\ntransport:\n  kind: zmq\n  timeout_secs: 3\n")
    with pytest.raises(gossamer.ConfigError) as e:
        gossamer.Agent(cfg, 0, rendezvous=str(tmp_path / "rv"))
    assert e.value.file == str(cfg) and e.value.line == 4 and e.value.key == "transport.timeout_secs"
    assert "did you mean 'timeout_seconds'" in str(e.value)
    with pytest.raises(gossamer.ConfigError) as e:
        gossamer.Agent({"world_size": 1, "algorithm": {"name": "crossover"}}, 0, rendezvous=str(tmp_path / "r2"))
    assert e.value.key == "algorithm.name" and "crossover_sgd" in str(e.value)
    with pytest.raises(gossamer.ConfigError) as e:
        gossamer.Agent(tmp_path / "missing.yaml", 0, rendezvous=str(tmp_path / "r3"))
    with pytest.raises(TypeError, match="config must be a path or a mapping"):
        gossamer.Agent(42, 0, rendezvous=str(tmp_path / "r4"))


def test_bad_rank_world_size_and_rendezvous(tmp_path):
    with pytest.raises(gossamer.InvalidArgument, match=r"rank 1 outside \[0, 1\)"):
        gossamer.Agent(ONE, 1, rendezvous=str(tmp_path / "rv"))
    with pytest.raises(ValueError, match="world_size must be a positive int"):
        gossamer.Agent(ONE, 0, world_size=0, rendezvous=str(tmp_path / "rv"))
    with pytest.raises(ValueError, match="rendezvous is required"):
        gossamer.Agent(ONE, 0)
    with pytest.raises(TypeError, match="rank must be an int"):
        gossamer.Agent(ONE, "0", rendezvous=str(tmp_path / "rv"))


def test_bad_arrays_raise_naming_argument_shape_and_dtype(agent):
    with pytest.raises(TypeError, match=r"data must hold float32, float64, float16 or bfloat16 elements; got shape \(2, 3\), dtype int64"):
        agent.allreduce(np.zeros((2, 3), dtype=np.int64))
    with pytest.raises(ValueError, match=r"data is not contiguous \(shape \(5,\), dtype float32\)"):
        agent.allreduce(np.zeros(10, dtype=np.float32)[::2])
    ro = np.zeros(4, dtype=np.float32)
    ro.setflags(write=False)
    with pytest.raises(ValueError, match=r"data is read-only \(shape \(4,\), dtype float32\)"):
        agent.allreduce(ro)
    with pytest.raises(ValueError, match="op must be 'sum', 'average' \\(or 'mean'\\), 'max' or 'min'"):
        agent.allreduce(np.zeros(4, dtype=np.float32), op="prod")
    with pytest.raises(ValueError, match="algorithm"):
        agent.allreduce(np.zeros(4, dtype=np.float32), algorithm="butterfly")
    with pytest.raises(ValueError, match=r"root 1 outside \[0, 1\)"):
        agent.broadcast(np.zeros(4, dtype=np.float32), root=1)
    with pytest.raises(TypeError):
        agent.allreduce([1.0, 2.0])  # a list is no buffer


def test_bad_tensors_raise_naming_argument(agent):
    import torch  # here, not above: the other cases run without torch's 1.7 s import

    with pytest.raises(TypeError, match=r"data must hold float32, float64, float16 or bfloat16 elements; got shape \(3,\), dtype torch.int32"):
        agent.allreduce(torch.zeros(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"data is not contiguous \(shape \(3, 2\)"):
        agent.allreduce(torch.zeros(2, 3).t())
    t = torch.ones(4, requires_grad=True)
    agent.allreduce(t)  # a leaf that requires grad is reduced in place through .detach()
    assert torch.equal(t.detach(), torch.ones(4))


def test_every_allreduce_algorithm_is_named():
    names = gossamer.allreduce_algorithms()
    assert names[0] == "auto"
    assert {"ring", "recursive_doubling", "torus2d", "hierarchical", "tga2d", "hips"} <= set(names)


def test_optimizer_step_is_the_cpp_sgd_step(tmp_path):
    cfg = dict(ONE, training={"learning_rate": 0.5, "momentum": 0.0})
    with gossamer.Agent(cfg, 0, rendezvous=str(tmp_path / "rv")) as a:
        opt = a.make_optimizer([2, 3])
        assert (opt.name, opt.size, opt.steps) == ("crossover_sgd", 5, 0)
        assert opt.has_communication_only_form
        x = np.ones(5, dtype=np.float32)
        g = np.arange(5, dtype=np.float32)
        opt.step(x, g)
        np.testing.assert_array_equal(x, 1 - 0.5 * np.arange(5, dtype=np.float32))
        assert opt.steps == 1
        opt.reduce_gradients(g)  # a gossip algorithm leaves gradients alone
        np.testing.assert_array_equal(g, np.arange(5, dtype=np.float32))
        opt.mix_parameters(x)
        opt.flush(x)
        assert opt.steps == 2
        with pytest.raises(ValueError, match=r"params has 4 elements, expected 5"):
            opt.step(np.ones(4, dtype=np.float32), g)
        with pytest.raises(TypeError, match="grads must hold float32 elements; got shape \\(5,\\), dtype float64"):
            opt.reduce_gradients(np.zeros(5))


def test_the_agent_keeps_the_model_buffer_it_was_given_exported(agent):
    # The optimizer keeps the address of the model given to step,
    # mix_parameters and flush (a view change may write into it later): the
    # agent holds the buffer exported, so dropping the caller's reference
    # does not free it and an array.array cannot be resized under it.
    opt = agent.make_optimizer([3])
    for call in ("step", "mix_parameters", "flush"):
        model = array.array("f", [0.0, 0.0, 0.0])
        args = (model, np.zeros(3, dtype=np.float32)) if call == "step" else (model,)
        getattr(opt, call)(*args)
        with pytest.raises(BufferError):
            model.append(1.0)
        params = np.ones(3, dtype=np.float32)
        getattr(opt, call)(*((params,) + args[1:]))
        model.append(1.0)  # no longer the model: released
        held = weakref.ref(params)
        del params
        gc.collect()
        assert held() is not None, call


def test_a_call_on_a_replaced_optimizer_keeps_the_current_model(agent):
    # Refused (InvalidArgument) before the model is swapped: the buffer the
    # current optimizer holds stays exported.
    stale = agent.make_optimizer([3])
    current = agent.make_optimizer([3])
    model = array.array("f", [0.0, 0.0, 0.0])
    current.flush(model)
    with pytest.raises(gossamer.InvalidArgument):
        stale.flush(array.array("f", [0.0, 0.0, 0.0]))
    with pytest.raises(BufferError):
        model.append(1.0)


def test_exchange_needs_a_gossip_optimizer(tmp_path):
    with gossamer.Agent(dict(ONE, algorithm={"name": "allreduce_sgd"}), 0, rendezvous=str(tmp_path / "rv")) as a:
        x = np.ones(3, dtype=np.float32)
        with pytest.raises(gossamer.InvalidArgument, match="call make_optimizer first"):
            a.exchange(x)
        a.make_optimizer([3])
        with pytest.raises(gossamer.InvalidArgument, match="no optimizer with a model exchange"):
            a.exchange(x)


def test_a_closed_agent_refuses_calls(tmp_path):
    a = gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / "rv"))
    a.close()
    a.close()  # idempotent
    with pytest.raises(gossamer.InvalidArgument, match="the agent is closed"):
        a.barrier()


# The variables by which discover_launch finds a launcher (one per launcher).
LAUNCHER_RANKS = ("RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID")


def _no_launcher(monkeypatch, tmp_path):
    """No launcher variables, temporary directories under tmp_path; returns a
    listing of tmp_path."""
    for k in LAUNCHER_RANKS:
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return lambda: sorted(p.name for p in tmp_path.iterdir())


def test_from_env_without_a_launcher_is_a_world_of_one(monkeypatch, tmp_path):
    _no_launcher(monkeypatch, tmp_path)
    assert gossamer.discover_launch() is None
    with gossamer.Agent.from_env(ONE) as a:
        assert (a.rank, a.world_size, a.launcher) == (0, 1, "none")


def test_from_env_under_a_launcher_of_one_rank_without_a_rendezvous_is_a_world_of_one(monkeypatch, tmp_path):
    listing = _no_launcher(monkeypatch, tmp_path)
    for k in ("GOSSAMER_RENDEZVOUS", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert gossamer.discover_launch() == {"launcher": "env", "rank": 0, "world_size": 1, "rendezvous": ""}
    with gossamer.Agent.from_env(ONE) as a:
        assert (a.rank, a.world_size, a.launcher) == (0, 1, "env")
        assert len(listing()) == 1
    assert listing() == []
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(gossamer.InvalidArgument, match="there is no rendezvous"):
        gossamer.discover_launch()


def test_a_world_of_one_removes_its_rendezvous_directory(monkeypatch, tmp_path):
    listing = _no_launcher(monkeypatch, tmp_path)
    a = gossamer.Agent.from_env(ONE)
    made = listing()
    assert len(made) == 1 and made[0].startswith("gossamer-rendezvous-")
    a.barrier()
    a.close()
    assert listing() == []
    a.close()  # idempotent, nothing left to remove
    with gossamer.Agent.from_env(ONE) as b:
        assert len(listing()) == 1
        b.abort()
    assert listing() == []


def test_a_world_of_one_that_fails_to_start_or_is_dropped_leaves_no_directory(monkeypatch, tmp_path):
    listing = _no_launcher(monkeypatch, tmp_path)
    with pytest.raises(gossamer.ConfigError):
        gossamer.Agent.from_env(ONE, overrides=["transport.kind=no_such_transport"])
    assert listing() == []
    a = gossamer.Agent.from_env(ONE)
    assert len(listing()) == 1
    del a
    gc.collect()
    assert listing() == []


def test_a_child_forked_from_a_world_of_one_leaves_its_rendezvous_directory(tmp_path):
    # The child inherits the agent and its finalizer; its exit (which runs
    # the finalizers) must not remove the parent's live directory.
    script = f"""
import os, sys, tempfile, gossamer
tempfile.tempdir = {str(tmp_path)!r}
for k in {LAUNCHER_RANKS!r}:
    os.environ.pop(k, None)
a = gossamer.Agent.from_env({{"transport": {{"kind": "zmq", "host": "127.0.0.1"}}}})
pid = os.fork()
if pid == 0:
    sys.exit(0)
os.waitpid(pid, 0)
print(len(os.listdir({str(tmp_path)!r})))
a.barrier()
a.close()
print(len(os.listdir({str(tmp_path)!r})))
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["1", "0"]


def test_a_child_forked_after_rank_0_served_a_tcp_rendezvous_exits(tmp_path, loopback_port):
    # Rank 0's store server serves until its process exits; a child forked
    # after it (os.fork, then a normal exit that runs C++'s static
    # destructors) must not wait for the parent's server thread.
    port = loopback_port
    script = f"""
import os, sys, gossamer
cfg = {{"transport": {{"kind": "zmq", "host": "127.0.0.1", "timeout_seconds": 10}}}}
with gossamer.Agent(cfg, 0, 1, "tcp://127.0.0.1:{port}") as a:
    a.barrier()
pid = os.fork()
if pid == 0:
    sys.exit(7)
_, status = os.waitpid(pid, 0)
print(os.waitstatus_to_exitcode(status))
"""
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["7"]


def test_malformed_launcher_variables_raise(monkeypatch):
    monkeypatch.setenv("RANK", "x")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(gossamer.InvalidArgument, match="RANK='x' is not an integer"):
        gossamer.Agent.from_env(ONE)


def test_metrics_records_reach_python_and_the_run_directory(tmp_path):
    run = tmp_path / "run"
    with gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / "rv"), overrides=[f"run.dir={run}"]) as a:
        assert a.run_dir == str(run)
        opt = a.make_optimizer([8])
        params, grads = np.ones(8, dtype=np.float32), np.full(8, 0.5, dtype=np.float32)
        for s in range(3):
            # NumPy's scalars are real numbers too.
            a.note_metric("loss", [float(s), np.float32(s), np.int64(s)][s])
            opt.step(params, grads)
        a.emit_metrics("eval", accuracy=0.5, classes=[1, 2])
        got = a.metrics()
        assert [r["kind"] for r in got] == ["start", "step", "step", "step", "eval"]
        assert [r["loss"] for r in got[1:4]] == [0.0, 1.0, 2.0]
        assert all(r["compute_s"] >= 0 and r["waiting_s"] >= 0 for r in got[1:4])
        assert got[4]["step"] == 3 and got[4]["accuracy"] == 0.5 and got[4]["classes"] == [1, 2]
        assert a.metrics() == []  # taken
        assert a.metrics_dropped == 0
        with pytest.raises(TypeError):
            a.note_metric("loss", "high")
        with pytest.raises(TypeError):
            a.emit_metrics("eval", model=object())
        # What the records' JSON reader cannot hold is a TypeError too, not
        # the reader's error.
        for bad in (float("nan"), float("inf"), [1, -float("inf")], 10**400, {"n": 2**64}, -(2**63) - 1):
            with pytest.raises(TypeError, match="metrics field 'value'"):
                a.emit_metrics("eval", value=bad)
        with pytest.raises(gossamer.InvalidArgument):
            a.emit_metrics("eval", rank=3)
        with pytest.raises(gossamer.InvalidArgument):
            a.emit_metrics("")
    lines = [json.loads(x) for x in (run / "rank-0.jsonl").read_text().splitlines()]
    assert [r["kind"] for r in lines] == ["start", "step", "step", "step", "eval", "end"]
    assert lines[:5] == got


def test_metrics_off_records_nothing(tmp_path):
    with gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / "rv"), overrides=["run.metrics=false"]) as a:
        opt = a.make_optimizer([4])
        opt.step(np.zeros(4, dtype=np.float32), np.zeros(4, dtype=np.float32))
        assert a.metrics() == [] and a.run_dir is None


def test_an_optimizer_of_a_closed_or_aborted_agent_raises(tmp_path):
    for end in ("close", "abort"):
        a = gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / f"rv-{end}"))
        opt = a.make_optimizer([4])
        assert opt.steps == 0
        getattr(a, end)()
        x, g = np.ones(4, dtype=np.float32), np.ones(4, dtype=np.float32)
        for use in (lambda: opt.name, lambda: opt.steps, lambda: opt.has_communication_only_form,
                    lambda: opt.step(x, g), lambda: opt.reduce_gradients(g), lambda: opt.mix_parameters(x),
                    lambda: opt.flush(x), lambda: opt.set_total_steps(3)):
            with pytest.raises(gossamer.InvalidArgument, match="this Optimizer's Agent is closed"):
                use()
        assert opt.size == 4  # what it was made for, which needs no optimizer
        np.testing.assert_array_equal(x, np.ones(4, dtype=np.float32))


def test_arguments_that_are_not_arrays_raise_type_error(agent):
    import torch

    for bad in (torch.Size([3]), torch.float32, torch.nn.Linear(2, 2), [1.0, 2.0], None, 1.5):
        for call in (agent.allreduce, agent.allreduce_async, agent.broadcast):
            with pytest.raises(TypeError, match="data must be a NumPy array or a torch tensor"):
                call(bad)
    with pytest.raises(ValueError, match="meta device"):
        agent.allreduce(torch.ones(3, device="meta"))
    with pytest.raises(ValueError, match="meta device"):
        agent.broadcast(torch.ones(3, device="meta"))
    with pytest.raises(TypeError, match=r"got shape \(3,\), dtype float32, big-endian"):
        agent.allreduce(np.ones(3, dtype=">f4"))


def test_make_optimizer_takes_integer_sizes_only(agent):
    for bad in ([1.5], [2.0], [True], ["3"], None, 3):
        with pytest.raises(TypeError, match="tensor_sizes"):
            agent.make_optimizer(bad)
    with pytest.raises(ValueError, match=r"tensor_sizes\[1\] is negative \(-1\)"):
        agent.make_optimizer([2, -1])
    with pytest.raises(ValueError, match="tensor_sizes is empty"):
        agent.make_optimizer([])
    assert agent.make_optimizer([np.int64(3), 2]).size == 5


def test_overrides_must_be_a_sequence_of_strings(tmp_path):
    with pytest.raises(TypeError, match=r"write overrides=\['transport.timeout_seconds=5'\]"):
        gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / "rv"), overrides="transport.timeout_seconds=5")
    with pytest.raises(TypeError, match="overrides must hold 'key=value' strings, got int"):
        gossamer.Agent(ONE, 0, rendezvous=str(tmp_path / "rv"), overrides=[5])
    from gossamer import torch as gt

    class Opts:  # what torch hands the creator: the group's store, rank, size and timeout
        store, group_rank, group_size, timeout = None, 0, 1, 5.0

    with pytest.raises(TypeError, match=r"pg_options\['overrides'\] must be a sequence"):
        gt._create_process_group(Opts(), {"gossamer_config": ONE, "overrides": "transport.timeout_seconds=5"})


def test_every_public_name_has_a_docstring():
    import inspect

    from gossamer import torch as gt

    missing = []
    for mod in (gossamer, gt):
        for name in mod.__all__:
            obj = getattr(mod, name)
            members = [(name, obj)]
            if inspect.isclass(obj):
                members += [(f"{name}.{k}", v) for k, v in vars(obj).items() if not k.startswith("_")]
            for qual, o in members:
                doc = inspect.getdoc(o)
                if not doc or len(doc.strip()) < 15:
                    missing.append(f"{mod.__name__}.{qual}")
    assert not missing, missing


def test_close_abort_make_optimizer_and_recover_inside_survive_are_refused(agent):
    # Each would free or replace the session that survive() is running fn
    # over: refused, naming the call, with nothing closed or replaced.
    opt = agent.make_optimizer([4])
    calls = {"close": agent.close, "abort": agent.abort, "make_optimizer": lambda: agent.make_optimizer([3]),
             "recover": agent.recover}
    for name, call in calls.items():
        with pytest.raises(gossamer.InvalidArgument, match=rf"^{name}\(\) inside survive\(fn\): call it after"):
            agent.survive(call)
        assert not agent.closed, name
    # The C++ entry points refuse them too, for callers of _core.
    core = agent._core
    core_calls = {"close": core.close, "abort": core.abort, "make_optimizer": lambda: core.make_optimizer([3]),
                  "recover": core.recover}
    for name, call in core_calls.items():
        with pytest.raises(gossamer.InvalidArgument, match=rf"^{name}\(\) inside survive\(fn\)"):
            core.survive(call)
        assert not core.closed, name
    # fn may catch the refusal: survive then completes it.
    refused = []

    def fn():
        with pytest.raises(gossamer.InvalidArgument, match=r"close\(\) inside survive") as e:
            agent.close()
        refused.append(str(e.value))

    assert agent.survive(fn) is True and len(refused) == 1
    # The agent, and the optimizer made before, are usable after survive returns.
    x, g = np.ones(4, dtype=np.float32), np.full(4, 2.0, dtype=np.float32)
    opt.step(x, g)
    assert opt.steps == 1
    data = np.arange(3, dtype=np.float32)
    agent.allreduce(data, op="sum")
    np.testing.assert_array_equal(data, np.arange(3, dtype=np.float32))
    assert agent.survive(lambda: agent.barrier()) is True
    assert agent.view["number"] == 0 and agent.view_changes == []  # the refused recover() changed nothing
    assert agent.make_optimizer([2, 3]).size == 5  # outside survive, allowed again
    change = agent.recover()
    assert change["number"] == 1 and change["members"] == [0] and change["lost"] == []
    agent.close()
    assert agent.closed


def test_make_optimizer_refuses_empty_zero_non_integer_and_too_large_sizes(agent):
    kept = agent.make_optimizer([4])
    cases = [([], gossamer.InvalidArgument, r"^tensor_sizes is empty: a model has one tensor at least"),
             ([0], gossamer.InvalidArgument, r"^tensor_sizes\[0\] is 0: every tensor has one element at least"),
             ([3, 0], gossamer.InvalidArgument, r"^tensor_sizes\[1\] is 0: every tensor has one element at least"),
             ([True], TypeError, r"^tensor_sizes\[0\] must be an int, got bool True"),
             ([2.5], TypeError, r"^tensor_sizes\[0\] must be an int, got float 2\.5"),
             ([2**63, 2**63], gossamer.InvalidArgument,
              r"^tensor_sizes add up to more than \d+ elements \(at tensor_sizes\[0\]\)")]
    for sizes, error, match in cases:
        with pytest.raises(error, match=match):
            agent.make_optimizer(sizes)
        with pytest.raises(error, match=match):  # the C++ entry point checks the same
            agent._core.make_optimizer(sizes)
    # Refused before anything changed: the earlier optimizer is still the agent's.
    x = np.ones(4, dtype=np.float32)
    kept.step(x, np.ones(4, dtype=np.float32))
    assert kept.steps == 1
    assert agent.make_optimizer([2**20, 1]).size == 2**20 + 1


def test_collectives_bump_the_version_of_a_tensor_autograd_saved(agent):
    # Gossamer writes through a NumPy view autograd does not see: the
    # tensor's version counter must move as torch's in-place ops move it, so
    # that a backward() needing the old values fails instead of using the new.
    import torch

    def ops():
        return {"allreduce": lambda t: agent.allreduce(t, op="sum"),
                "allreduce_async": lambda t: agent.allreduce_async(t, op="sum").wait(),
                "broadcast": lambda t: agent.broadcast(t, root=0)}

    for name, op in ops().items():
        w = torch.ones(3, requires_grad=True)
        t = torch.full((3,), 2.0)
        loss = (w * t).sum()  # saves t for w's gradient
        before = t._version
        op(t)
        assert t._version > before, name
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            loss.backward()
        # An untouched graph still runs backward: the error is the version's.
        w2 = torch.ones(3, requires_grad=True)
        t2 = torch.full((3,), 2.0)
        (w2 * t2).sum().backward()
        assert torch.equal(w2.grad, torch.full((3,), 2.0)), name
    # A leaf that requires grad, reduced through .detach(), is bumped too.
    leaf = torch.ones(2, requires_grad=True)
    v = leaf._version
    agent.allreduce(leaf)
    assert leaf._version > v


def test_note_metric_and_emit_metrics_refuse_the_records_own_fields(tmp_path):
    for metrics in ("true", "false"):  # refused whether records are kept or not
        rv = str(tmp_path / f"rv-{metrics}")
        with gossamer.Agent(ONE, 0, rendezvous=rv, overrides=[f"run.metrics={metrics}"]) as a:
            for field, kind in (("kind", "record"), ("step", "record"), ("rank", "record"), ("time", "record"),
                                ("compute_s", "step record"), ("steps", "step record"),
                                ("waiting_s", "step record"), ("view", "step record")):
                with pytest.raises(gossamer.InvalidArgument,
                                   match=rf"^note_metric: field '{field}' is one every {kind} has"):
                    a.note_metric(field, 1.0)
            for field in ("rank", "time"):
                with pytest.raises(gossamer.InvalidArgument,
                                   match=rf"^emit_metrics: field '{field}' is one every record has"):
                    a.emit_metrics("eval", **{field: 3})
            for field in ("kind", "rank", "time", "step"):  # kind and step are arguments of the wrapper
                with pytest.raises(gossamer.InvalidArgument,
                                   match=rf"^emit_metrics: field '{field}' is one every record has"):
                    a._core.emit_metrics("eval", 0, [(field, "3")])
            if metrics == "true":
                # Nothing refused was noted: the next step record is the algorithm's own.
                opt = a.make_optimizer([2])
                a.note_metric("loss", 0.25)
                opt.step(np.ones(2, dtype=np.float32), np.ones(2, dtype=np.float32))
                a.emit_metrics("eval", accuracy=0.5)
                got = a.metrics()
                assert [r["kind"] for r in got] == ["start", "step", "eval"]
                assert got[1]["loss"] == 0.25 and got[1]["step"] == 1 and got[1]["compute_s"] >= 0
                assert got[2]["rank"] == 0 and got[2]["accuracy"] == 0.5


def test_float16_data_is_not_taken_for_bfloat16(agent):
    half = np.array([1.5, -2.0, 3.25], dtype=np.float16)
    # float16 bits mean other values as bfloat16: refused, the data untouched.
    for call in (lambda: agent._core.allreduce(half, "sum", None, "bfloat16"),
                 lambda: agent._core.allreduce_async(half, "sum", None, "bfloat16"),
                 lambda: agent._core.broadcast(half, 0, "bfloat16")):
        with pytest.raises(TypeError, match=r"data must hold 16-bit integer \(the bits of bfloat16\) elements; "
                                            r"got shape \(3,\), dtype float16"):
            call()
    np.testing.assert_array_equal(half, np.array([1.5, -2.0, 3.25], dtype=np.float16))
    # As float16 it is reduced; 16-bit integers holding bfloat16 bits are taken.
    agent._core.allreduce(half, "sum", None, "float16")
    agent._core.allreduce_async(half, "max", None, "float16").wait(None)
    agent._core.broadcast(half, 0, "float16")
    np.testing.assert_array_equal(half, np.array([1.5, -2.0, 3.25], dtype=np.float16))
    bits = np.array([0x3FC0, 0xC000], dtype=np.uint16)  # bfloat16 1.5, -2.0
    agent._core.allreduce(bits, "sum", None, "bfloat16")
    np.testing.assert_array_equal(bits, np.array([0x3FC0, 0xC000], dtype=np.uint16))
    with pytest.raises(ValueError, match="dtype must be '' .*'bfloat16' or 'float16'.*got 'float8'"):
        agent._core.allreduce(half, "sum", None, "float8")


def test_rank_rendezvous_wait_timeout_and_metrics_step_are_validated(agent, tmp_path):
    for rank in (True, False):
        with pytest.raises(TypeError, match=rf"^rank must be an int, got bool {rank}"):
            gossamer.Agent(ONE, rank, rendezvous=str(tmp_path / "rv-bool"))
    for rv in (str(tmp_path / "r\0v"), str(tmp_path / "r\0v").encode()):
        with pytest.raises(gossamer.InvalidArgument, match="^rendezvous contains a NUL character"):
            gossamer.Agent(ONE, 0, rendezvous=rv)
    with pytest.raises(gossamer.InvalidArgument, match="^rendezvous contains a NUL byte"):
        gossamer._core.Agent("world_size: 1\n", True, [], 0, str(tmp_path / "r\0v"))
    assert not (tmp_path / "r").exists()  # nothing made at the path cut at the NUL
    work = agent.allreduce_async(np.ones(3, dtype=np.float32))
    with pytest.raises(gossamer.InvalidArgument, match=r"^timeout is not a number \(nan\)"):
        work.wait(float("nan"))
    with pytest.raises(gossamer.InvalidArgument, match=r"^timeout is not a number \(nan\)"):
        work._core.wait(float("nan"))
    with pytest.raises(gossamer.InvalidArgument, match=r"^timeout -1\.0 s is negative"):
        work.wait(-1.0)
    work.wait(5.0)
    assert work.is_completed()
    with pytest.raises(gossamer.InvalidArgument, match=r"^step -1 outside \[0, 2\*\*64\)"):
        agent.emit_metrics("eval", step=-1)
    with pytest.raises(gossamer.InvalidArgument, match=r"^step 18446744073709551616 outside \[0, 2\*\*64\)"):
        agent.emit_metrics("eval", step=2**64)
    with pytest.raises(TypeError, match="^step must be an int, got bool True"):
        agent.emit_metrics("eval", step=True)
    with pytest.raises(gossamer.InvalidArgument, match=r"^step -1 outside \[0, 18446744073709551615\]"):
        agent._core.emit_metrics("eval", -1, [])
    agent.emit_metrics("eval", step=2**64 - 1, accuracy=1.0)
    assert [(r["kind"], r["step"]) for r in agent.metrics()][-1] == ("eval", 2**64 - 1)


@pytest.mark.parametrize("inside_survive", [False, True])
def test_close_from_another_thread_cancels_a_call_in_flight_and_frees_nothing_under_it(tmp_path, inside_survive):
    # Rank 0 blocks in an allreduce (rank 1 never enters it), and a watchdog
    # thread closes rank 0's agent: the allreduce raises at once instead of
    # waiting out its timeout, on an agent that is still whole (the Session
    # is freed when the call returns). recover() is refused while it runs
    # (and, with membership off, refused for that at once otherwise: a probe
    # that touches nothing the allreduce uses). Inside survive(fn) the same:
    # only fn's own thread is refused close().
    import threading
    import time
    two = {"world_size": 2, "transport": {"kind": "inproc", "timeout_seconds": 60}, "run": {"metrics": False},
           "membership": {"enabled": False}}
    agents = [None, None]

    def make(r):
        agents[r] = gossamer.Agent(two, r, rendezvous=str(tmp_path / "rv"))

    makers = [threading.Thread(target=make, args=(r,)) for r in range(2)]
    for t in makers:
        t.start()
    for t in makers:
        t.join(60)
    assert all(agents), "the two agents did not start"
    a0, a1 = agents
    x = np.ones(1 << 12, dtype=np.float32)
    outcome = {}

    def blocked():
        start = time.monotonic()
        try:
            if inside_survive:
                a0.survive(lambda: a0.allreduce(x))
            else:
                a0.allreduce(x)
            outcome["returned"] = True
        except gossamer.Error as e:
            outcome["error"] = e
        outcome["seconds"] = time.monotonic() - start

    caller = threading.Thread(target=blocked)
    caller.start()
    try:
        deadline = time.monotonic() + 30
        refused = None
        while refused is None and time.monotonic() < deadline:
            try:
                a0.recover()
            except gossamer.InvalidArgument as e:
                if "needs the membership service" in str(e):  # the allreduce does not hold the agent yet
                    time.sleep(0.01)
                else:
                    refused = str(e)
        assert refused is not None and "another call on this agent runs on another thread" in refused
        a0.close()
        caller.join(30)
        assert not caller.is_alive(), "the allreduce went on after its agent was closed"
        assert "error" in outcome, outcome
        error = outcome["error"]
        if inside_survive:
            # survive() holds the agent before fn's allreduce does, so the
            # close may come first: the allreduce then finds the agent closed.
            assert isinstance(error, gossamer.Cancelled) or (
                isinstance(error, gossamer.InvalidArgument) and "the agent is closed" in str(error)), repr(error)
        else:
            assert isinstance(error, gossamer.Cancelled), repr(error)
        assert outcome["seconds"] < 30
        assert a0.closed
        with pytest.raises(gossamer.InvalidArgument, match="the agent is closed"):
            a0.allreduce(x)
    finally:
        a1.abort()
        a0.abort()


def test_misaligned_buffers_are_refused(agent):
    raw = np.zeros(4 * 8 + 1, dtype=np.uint8)
    shifted = raw[1:].view(np.float32)  # 8 float32 elements at an odd address
    assert not shifted.flags.aligned
    with pytest.raises(ValueError, match="data is not aligned to its 4-byte elements"):
        agent.allreduce(shifted)
    opt = agent.make_optimizer([8])
    with pytest.raises(ValueError, match="params is not aligned"):
        opt.step(shifted, np.zeros(8, dtype=np.float32))


def test_an_error_whose_text_is_not_utf8_is_raised_as_itself(tmp_path):
    # A config value with a byte that is not UTF-8: the ConfigError, its key
    # and file reach Python (the byte escaped), not a UnicodeDecodeError.
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"transport:\n  kind: \"z\xffq\"\nrun:\n  metrics: false\n")
    with pytest.raises(gossamer.ConfigError) as e:
        gossamer.Agent(str(bad), 0, 1, str(tmp_path / "rv"))
    assert e.value.key == "transport.kind"
    assert e.value.line == 2
    assert "\\xff" in str(e.value)


def test_survive_takes_a_peer_failure_whose_peer_is_not_a_rank(agent):
    # A PeerFailure raised by the caller's own code with .peer set to
    # something that is not a rank is still a PeerFailure (naming no rank):
    # survive() recovers and runs fn again, instead of raising a RuntimeError
    # from the conversion.
    for peer in ("x", 2**70, None, True):
        calls = []

        def fn():
            calls.append(peer)
            if len(calls) == 1:
                e = gossamer.PeerFailure("raised by the application")
                e.peer = peer
                raise e

        assert agent.survive(fn) is True
        assert len(calls) == 2
