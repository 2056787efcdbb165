"""Gossamer: gossip-based and decentralized training, from Python.

One :class:`Agent` per process (rank) holds the transport, the collectives
and the configured training algorithm of the C++ core::

    import gossamer
    agent = gossamer.Agent.from_env(config="peer.yaml")   # torchrun, mpirun, srun
    agent.allreduce(array)                                 # in place, no copy

Arrays are NumPy ``float32`` / ``float64`` arrays or contiguous CPU torch
tensors; every call works on the caller's memory, with the GIL released while
C++ works. For PyTorch training see :mod:`gossamer.torch`.

Errors keep their C++ type: :class:`PeerFailure`, :class:`TimeoutError`,
:class:`ConfigError`, :class:`ProtocolError`, :class:`InvalidArgument`
(also a ``ValueError``), all subclasses of :class:`Error`.
"""

from __future__ import annotations

import json
import math
import numbers
import os
import shutil
import sys
import tempfile
import threading
import weakref
from typing import Any, List, Mapping, Optional, Sequence, Union

from . import _core
from ._core import (  # noqa: F401  (re-exported)
    Cancelled,
    ConfigError,
    Error,
    InternalError,
    InvalidArgument,
    Expelled,
    PeerFailure,
    ProtocolError,
    TimeoutError,
    ViewChanged,
)

__all__ = [
    "Agent",
    "Optimizer",
    "discover_launch",
    "Work",
    "allreduce_algorithms",
    "Error",
    "InvalidArgument",
    "InternalError",
    "ConfigError",
    "ProtocolError",
    "TimeoutError",
    "PeerFailure",
    "ViewChanged",
    "Expelled",
    "Cancelled",
]

Optimizer = _core.Optimizer

ConfigSource = Union[str, "os.PathLike[str]", Mapping[str, Any]]


def allreduce_algorithms() -> list:
    """Names accepted by ``Agent.allreduce(algorithm=...)``: ``"auto"``,
    ``"ring"``, ``"recursive_doubling"``, ``"rabenseifner"``, ``"torus2d"``,
    ``"hierarchical"``, ``"tga2d"``, ``"hips"``."""
    return list(_core.allreduce_algorithms())


def _remove_in(pid: int, directory: str) -> None:
    """Removes ``directory`` when called in process ``pid`` only: a child
    forked from it (which inherits the finalizer) leaves the parent's alone."""
    if os.getpid() == pid:
        shutil.rmtree(directory, ignore_errors=True)


def discover_launch() -> Optional[dict]:
    """This process's place in a job started by a launcher.

    Reads ``RANK``/``WORLD_SIZE`` (torchrun), ``OMPI_COMM_WORLD_RANK``/``SIZE``
    (Open MPI), ``PMI_RANK``/``PMI_SIZE`` (MPICH Hydra) or ``SLURM_PROCID``/
    ``SLURM_NTASKS`` (srun), and the rendezvous from ``GOSSAMER_RENDEZVOUS``,
    ``MASTER_ADDR``/``MASTER_PORT`` (``MASTER_PORT + 1`` under torchrun, whose
    agent holds ``MASTER_PORT``) or, for a job on one host, a directory named
    by the job id.

    Returns:
        ``{"launcher": str, "rank": int, "world_size": int, "rendezvous": str}``
        or ``None`` when no launcher's variables are set. A world of one
        needs no rendezvous: ``"rendezvous"`` is then ``""`` when none of
        those variables names one.

    Raises:
        InvalidArgument: a malformed variable (named in the message), or no
            way to find the rendezvous of a world of more than one rank.
    """
    return _core.discover_launch()


def _config_source(config: ConfigSource) -> tuple:
    """(text or path, is_text) for the C++ loader. A mapping is written as
    JSON, which is YAML."""
    if isinstance(config, Mapping):
        return json.dumps(config), True
    if isinstance(config, (str, os.PathLike)):
        return os.fspath(config), False
    raise TypeError(
        f"config must be a path or a mapping of YAML keys, not {type(config).__name__}"
    )


def _overrides(overrides: Any, what: str = "overrides") -> list:
    """``overrides`` as a list of ``"key=value"`` strings.

    Raises:
        TypeError: a single str (which would be split into characters), or
            an element that is not a str.
    """
    if isinstance(overrides, (str, bytes)):
        raise TypeError(
            f"{what} must be a sequence of 'key=value' strings, not a single {type(overrides).__name__}: "
            f"write {what}=[{overrides!r}]"
        )
    out = list(overrides)
    for o in out:
        if not isinstance(o, str):
            raise TypeError(f"{what} must hold 'key=value' strings, got {type(o).__name__} {o!r}")
    return out


def _is_tensor(data: Any) -> bool:
    """A torch tensor (never imports torch: without it nothing is one)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(data, torch.Tensor)


def _on_device(data: Any) -> bool:
    """A torch tensor that is not on the CPU (staged through host memory)."""
    return _is_tensor(data) and data.device.type != "cpu"


def _check_device_tensor(data: Any) -> None:
    """The checks _as_array makes, for a tensor on a device (before any copy)."""
    import torch

    if data.device.type == "meta":
        raise ValueError(
            f"data is a tensor on the meta device (shape {tuple(data.shape)}, dtype {data.dtype}), "
            "which holds no elements to communicate: pass a tensor on the CPU or an accelerator"
        )
    if data.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise TypeError(
            f"data must hold float32, float64, float16 or bfloat16 elements; got shape "
            f"{tuple(data.shape)}, dtype {data.dtype} on {data.device}"
        )
    if not data.is_contiguous():
        raise ValueError(
            f"data is not contiguous (shape {tuple(data.shape)}, dtype {data.dtype}): pass tensor.contiguous()"
        )


def _as_array(data: Any, name: str, wide: bool = False) -> Any:
    """A buffer over the caller's memory: NumPy arrays pass as they are; a
    torch tensor must be a CPU tensor and is viewed through ``.numpy()``
    (shared memory, no copy).

    With ``wide`` (the collectives) float64, float16 and bfloat16 are
    accepted besides float32; returns ``(buffer, dtype)`` where ``dtype`` is
    ``"bfloat16"`` or ``"float16"`` for a torch 16-bit tensor, which NumPy
    cannot hold and which is passed as its raw 16-bit integers, else ``""``.
    Without ``wide`` returns the buffer alone."""
    tag = ""
    if not _is_tensor(data):
        try:
            memoryview(data)
        except ValueError:
            pass  # a buffer whose format Python cannot describe (datetime64): the dtype check names it
        except TypeError:
            raise TypeError(
                f"{name} must be a NumPy array or a torch tensor (or another object with the buffer "
                f"protocol), not {type(data).__module__}.{type(data).__qualname__}"
            ) from None
    else:
        if data.device.type != "cpu":
            raise ValueError(
                f"{name} is on {data.device}; Gossamer works on CPU tensors"
            )
        if not data.is_contiguous():
            raise ValueError(
                f"{name} is not contiguous (shape {tuple(data.shape)}, dtype "
                f"{data.dtype}): pass tensor.contiguous()"
            )
        import torch  # only when given a tensor: `import gossamer` does not need torch

        halves = {torch.bfloat16: "bfloat16", torch.float16: "float16"}
        allowed = (torch.float32, torch.float64) + tuple(halves) if wide else (torch.float32,)
        if data.dtype not in allowed:
            kinds = "float32, float64, float16 or bfloat16" if wide else "float32"
            raise TypeError(
                f"{name} must hold {kinds} elements; got shape "
                f"{tuple(data.shape)}, dtype {data.dtype}"
            )
        if data.dtype in halves:
            tag = halves[data.dtype]
            data = data.detach().view(torch.int16).numpy()
        else:
            data = data.detach().numpy()
    return (data, tag) if wide else data


def _bump_version(data: Any) -> None:
    """After Gossamer wrote into a torch tensor's memory in place (through
    the NumPy view of :func:`_as_array`, which autograd does not see): bumps
    the tensor's version counter as torch's own in-place operations do, so
    that a backward() needing its old values raises torch's "modified by an
    inplace operation" error instead of computing with the new ones. No data
    pass: ``torch.autograd.graph.increment_version`` where torch has it
    (2.1+), else an in-place fill of a 0-element view (which shares the
    counter) under ``torch.no_grad()``. Anything but a tensor, and inference
    tensors (which have no counter), are left alone."""
    if not _is_tensor(data):
        return
    import torch

    is_inference = getattr(data, "is_inference", None)
    if is_inference is not None and is_inference():
        return
    increment = getattr(getattr(torch.autograd, "graph", None), "increment_version", None)
    if increment is not None:
        increment(data)
        return
    with torch.no_grad():
        data.detach().view(-1)[:0].zero_()


def _check_json_ints(value: Any) -> None:
    """Raises ValueError for an int in ``value`` (or in its lists, tuples and
    dicts) outside ``[-2**63, 2**64)``, which the metrics' JSON reader cannot
    hold."""
    if isinstance(value, bool):
        return
    if isinstance(value, int):
        if not -(2**63) <= value <= _UINT64_MAX:
            raise ValueError(f"the int {value} is outside [-2**63, 2**64)")
    elif isinstance(value, (list, tuple)):
        for v in value:
            _check_json_ints(v)
    elif isinstance(value, dict):
        for v in value.values():
            _check_json_ints(v)


def _int_arg(value: Any, name: str) -> int:
    """``value`` as an int: a Python int or a NumPy integer, not a bool.

    Raises:
        TypeError: naming ``name``.
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


_INT_MAX = 2**31 - 1  # the C++ int of ranks
_UINT64_MAX = 2**64 - 1  # the C++ std::uint64_t of step counts
# make_optimizer: at most PTRDIFF_MAX / 4 float32 elements in all (its C++ bound).
_MAX_MODEL_ELEMENTS = (2**63 - 1) // 4


class Work:
    """A non-blocking allreduce started by :meth:`Agent.allreduce_async`."""

    def __init__(self, core: Any) -> None:
        self._core = core

    def wait(self, timeout: Optional[float] = None) -> None:
        """Blocks until the allreduce is done (each of its waits is bounded by
        ``transport.timeout_seconds``), then raises its error if it failed:
        PeerFailure, TimeoutError. With ``timeout`` (seconds), raises
        TimeoutError if it is not done by then (the allreduce goes on).
        (C++: ``gossamer::Work::wait``.)

        Raises:
            PeerFailure, TimeoutError: as above. TypeError: a timeout that is
            not a real number. InvalidArgument: a negative or NaN timeout.
        """
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
                raise TypeError(f"timeout must be a number of seconds or None, got {type(timeout).__name__}")
            if math.isnan(timeout):
                raise InvalidArgument("timeout is not a number (nan): give seconds >= 0, or None")
            if timeout < 0:
                raise InvalidArgument(f"timeout {timeout} s is negative: give seconds >= 0, or None")
        self._core.wait(timeout)

    def is_completed(self) -> bool:
        """True once the allreduce has finished, successfully or not. Never blocks."""
        return self._core.is_completed()


class Agent:
    """One peer (rank) of a Gossamer job: transport, collectives, topology
    and training algorithm, built from a YAML config.

    Args:
        config: path of a YAML config file, or a mapping with the same keys
            (e.g. ``{"transport": {"kind": "zmq"}, "algorithm": {"name":
            "crossover_sgd"}}``); unset keys take their defaults. The keys are
            those of ``gossamer-config --schema`` (docs/configuration.md).
        rank: this process's rank, in ``[0, world_size)``.
        world_size: number of ranks; overrides the config's ``world_size``.
        rendezvous: where the ranks meet: ``"tcp://HOST:PORT"`` (rank 0
            serves a store there; HOST must be an address of rank 0's host) or
            a directory that every rank sees (created if missing; use a fresh
            one per job).
        overrides: a sequence of ``"key=value"`` strings applied after the
            config, e.g. ``["transport.timeout_seconds=10"]`` (a single str is
            a TypeError).

    Raises:
        TypeError: a rank or world_size that is not an int (bools are
            refused), overrides that are not a sequence of str, a config or
            rendezvous of another type.
        ConfigError: an invalid config (``.file``, ``.line``, ``.key``).
        InvalidArgument: a rank outside ``[0, world_size)``, a world_size
            below 1 or past 2**31 - 1, a rendezvous with a NUL character.
        TimeoutError: peers that do not show up within
            ``transport.timeout_seconds``.
        Error: rank 0 cannot bind the rendezvous address.

    With the membership service on (``membership.enabled``, the default) the
    agent is elastic (a C++ ``gossamer::Session``): its optimizer's steps go
    on over the survivors when a peer dies or falls silent, and
    :meth:`survive` does the same for collectives of your own, such as an
    evaluation.

    One thread issues an agent's calls, and every rank issues the same
    collectives in the same order; :meth:`close` and :meth:`abort` may come
    from another thread (a watchdog's), which cancels the waits of a call in
    flight (it raises). Use as a context manager, or call
    :meth:`close`. A job may make Agents one after another on one rendezvous:
    every rank's n-th Agent (counted in its process) meets the others' n-th.
    """

    def __init__(
        self,
        config: ConfigSource,
        rank: int,
        world_size: Optional[int] = None,
        rendezvous: Optional[str] = None,
        overrides: Sequence[str] = (),
    ) -> None:
        source, is_text = _config_source(config)
        ov = _overrides(overrides)
        if world_size is not None:
            world_size = _int_arg(world_size, "world_size")
            if not 1 <= world_size <= _INT_MAX:
                raise InvalidArgument(f"world_size must be a positive int (at most {_INT_MAX}), got {world_size}")
            ov.append(f"world_size={world_size}")
        rank = _int_arg(rank, "rank")
        if not 0 <= rank <= _INT_MAX:
            raise InvalidArgument(f"rank {rank} outside [0, world_size)")
        if rendezvous is None:
            raise ValueError(
                "rendezvous is required: 'tcp://HOST:PORT' or a directory all ranks see "
                "(or use Agent.from_env under a launcher)"
            )
        rendezvous = os.fspath(rendezvous)  # TypeError for another type
        if ("\0" if isinstance(rendezvous, str) else b"\0") in rendezvous:
            raise InvalidArgument(f"rendezvous contains a NUL character: {rendezvous!r}")
        # The threads inside survive() on this agent (fn runs on the caller's
        # thread): close, abort, make_optimizer and recover from one of them
        # are refused (they would free what survive is using).
        self._surviving: List[int] = []
        self._core = _core.Agent(source, is_text, ov, rank, rendezvous)
        self._optimizer: Optional[Optimizer] = None
        self.launcher: str = "explicit"
        # A rendezvous directory this agent made for itself (from_env's world
        # of one): removed when it closes, or when it is collected unclosed.
        self._own_rendezvous: Optional[weakref.finalize] = None

    @classmethod
    def from_env(
        cls, config: ConfigSource, overrides: Sequence[str] = ()
    ) -> "Agent":
        """An Agent whose rank, world size and rendezvous come from the
        launcher's environment (see :func:`discover_launch`): torchrun,
        ``mpirun``, ``srun`` or MPICH's Hydra. Without any launcher variables
        (or with a launcher's world of one that names no rendezvous) it is
        the single rank of a world of one, whose rendezvous is a new
        directory under :func:`tempfile.gettempdir`, removed when the agent
        closes (or is collected unclosed).

        Raises:
            as :class:`Agent`; InvalidArgument for malformed launcher
            variables.
        """
        launch = discover_launch()
        if launch is None or not launch["rendezvous"]:
            rendezvous = tempfile.mkdtemp(prefix="gossamer-rendezvous-")
            try:
                agent = cls(config, 0, 1, rendezvous, overrides)
            except BaseException:
                shutil.rmtree(rendezvous, ignore_errors=True)
                raise
            agent._own_rendezvous = weakref.finalize(agent, _remove_in, os.getpid(), rendezvous)
            agent.launcher = "none" if launch is None else launch["launcher"]
            return agent
        agent = cls(config, launch["rank"], launch["world_size"], launch["rendezvous"], overrides)
        agent.launcher = launch["launcher"]
        return agent

    # -- identity -------------------------------------------------------
    @property
    def rank(self) -> int:
        """This rank, in ``[0, world_size)``."""
        return self._core.rank

    @property
    def world_size(self) -> int:
        """Number of ranks in the job."""
        return self._core.world_size

    @property
    def algorithm(self) -> str:
        """The configured training algorithm (``algorithm.name``)."""
        return self._core.algorithm

    @property
    def transport(self) -> str:
        """The configured transport (``transport.kind``)."""
        return self._core.transport_kind

    @property
    def timeout_seconds(self) -> float:
        """The bound on every network wait (``transport.timeout_seconds``), seconds."""
        return self._core.timeout_seconds

    # -- collectives ----------------------------------------------------
    def allreduce(self, data: Any, op: str = "average", algorithm: Optional[str] = None) -> None:
        """Reduces ``data`` over all ranks, in place.

        Args:
            data: NumPy array or torch tensor, float32, float64,
                float16 or bfloat16 (torch), C-contiguous and writable, any
                shape; the same number of elements and dtype on every rank.
                A tensor on another device than the CPU is staged through
                host memory in 16 MiB chunks, copies overlapping the
                communication (``gossamer/_staging.py``).
                16-bit elements travel as 2 bytes and are reduced in float32,
                rounded once per hop (docs/collectives.md, "16-bit vectors").
            op: ``"average"`` (default; ``"mean"`` is the same), ``"sum"``,
                ``"max"`` or ``"min"``, as C's ``gossamer_allreduce``.
            algorithm: one of :func:`allreduce_algorithms` for this call
                (default: the config's ``collectives.allreduce``); the same on
                every rank.

        Raises:
            TypeError: another dtype, or not an array (a torch.Size, a
            module, a list). ValueError: not contiguous, read-only, a meta
            tensor, unknown op or algorithm. PeerFailure, TimeoutError: a
            peer died or did not answer within the timeout (on every rank).

        A torch tensor's version counter is bumped, as by torch's in-place
        operations: a backward() that needs its old values raises. (C++:
        ``Communicator::allreduce``.)
        """
        if _on_device(data):
            from . import _staging

            _check_device_tensor(data)
            _staging.staged(data, lambda host: self.allreduce_async(host, op, algorithm), lambda w: w.wait())
            return
        array, dtype = _as_array(data, "data", wide=True)
        try:
            self._core.allreduce(array, op, algorithm, dtype)
        finally:  # a failed reduction may have written part of it
            _bump_version(data)

    def allreduce_async(self, data: Any, op: str = "average", algorithm: Optional[str] = None) -> "Work":
        """Starts reducing ``data`` over all ranks, in place, and returns at
        once; the reduction runs on the communicator's communication thread.

        Collectives run in the order they were called on each rank (a
        blocking one waits for the asynchronous ones before it), so every
        rank must start the same ones in the same order. ``data`` must not be
        read or written until the returned :class:`Work` is done; the Work
        keeps it alive, and dropping the Work waits for the reduction.

        Args:
            data: as :meth:`allreduce`, but in host memory: a NumPy array or
                a CPU torch tensor. A tensor on another device is refused
                (ValueError), not staged as :meth:`allreduce` stages it.
            op, algorithm: as :meth:`allreduce`.

        Returns:
            A :class:`Work`: ``wait(timeout=None)`` blocks until it is done and
            raises its error; ``is_completed()`` never blocks.

        Raises:
            TypeError: as :meth:`allreduce`, at the call. ValueError: as
            :meth:`allreduce`, and a tensor that is not on the CPU, at the
            call. Errors of the reduction itself (PeerFailure, TimeoutError)
            come from ``Work.wait()``; one that fails fails those queued
            behind it.

        A torch tensor's version counter is bumped at the call (the
        reduction writes into it). (C++: ``Communicator::iallreduce``.)
        """
        array, dtype = _as_array(data, "data", wide=True)
        work = Work(self._core.allreduce_async(array, op, algorithm, dtype))
        _bump_version(data)
        return work

    def broadcast(self, data: Any, root: int = 0) -> None:
        """Copies ``root``'s ``data`` (float32, float64, float16 or bfloat16,
        contiguous, writable;
        same element count on every rank) into every rank's ``data``, in
        place; a torch tensor's version counter is bumped. ``root`` is a
        global rank (as :attr:`rank`), a member of the view in force
        (``view["members"]``). (C++: ``Communicator::broadcast``.)

        Raises:
            as :meth:`allreduce`; TypeError for a root that is not an int
            (bools are refused); ValueError for a root outside
            ``[0, world_size)``, or one the membership service removed
            from the view.
        """
        root = _int_arg(root, "root")
        if not 0 <= root < self.world_size:
            raise ValueError(f"root {root} outside [0, {self.world_size})")
        if _on_device(data):
            from . import _staging

            _check_device_tensor(data)
            _staging.staged(data, lambda host: self.broadcast(host, root), lambda _: None)
            return
        array, dtype = _as_array(data, "data", wide=True)
        try:
            self._core.broadcast(array, root, dtype)
        finally:  # a failed broadcast may have written part of it
            _bump_version(data)

    def barrier(self) -> None:
        """Returns once every rank has entered the barrier (C++:
        ``Communicator::barrier``). Raises PeerFailure, TimeoutError."""
        self._core.barrier()

    # -- training -------------------------------------------------------
    def make_optimizer(self, tensor_sizes: Sequence[int]) -> Optimizer:
        """Creates the configured training algorithm (``algorithm.name``,
        wrapped by ``compression.kind``) for a flat float32 parameter vector
        made of tensors of ``tensor_sizes`` elements, and keeps it (replacing
        any previous one). Collective for hierarchical groups. With the
        membership service on, a step that fails because a peer died is
        undone, the survivors agree on a view without it, and the step is
        redone over it (or skipped by a rank behind the others; ``steps``
        says so).

        The returned :class:`Optimizer` has ``step(params, grads)`` (the C++
        local SGD step and the exchange), the communication-only pair
        ``reduce_gradients(grads)`` / ``mix_parameters(params)`` for a local
        step made elsewhere, ``flush(params)``, ``steps`` and ``name``; its
        arrays are NumPy float32 arrays (C-contiguous, writable; for a CPU
        float32 torch tensor pass ``tensor.detach().numpy()``) with exactly
        ``sum(tensor_sizes)`` elements. (C++: ``Session::makeOptimizer``.)

        Raises:
            TypeError: ``tensor_sizes`` not a sequence of ints (floats and
            bools are refused; NumPy integers are ints). InvalidArgument
            (a ValueError), naming the index: no sizes, a size of 0 or a
            negative one, sizes adding up to more than ``PTRDIFF_MAX / 4``
            elements; called inside :meth:`survive`'s ``fn`` or while a call
            on this agent runs on another thread; sizes the algorithm
            refuses. ConfigError: unknown algorithm. PeerFailure,
            TimeoutError: a collective of a hierarchical group's set-up.
        """
        self._not_surviving("make_optimizer")
        if isinstance(tensor_sizes, (str, bytes)) or not hasattr(tensor_sizes, "__iter__"):
            raise TypeError(f"tensor_sizes must be a sequence of ints, not {type(tensor_sizes).__name__}")
        sizes = []
        total = 0
        for i, s in enumerate(tensor_sizes):
            if isinstance(s, bool) or not isinstance(s, numbers.Integral):
                raise TypeError(f"tensor_sizes[{i}] must be an int, got {type(s).__name__} {s!r}")
            s = int(s)
            if s < 0:
                raise InvalidArgument(f"tensor_sizes[{i}] is negative ({s})")
            if s == 0:
                raise InvalidArgument(f"tensor_sizes[{i}] is 0: every tensor has one element at least")
            total += s
            if total > _MAX_MODEL_ELEMENTS:
                raise InvalidArgument(
                    f"tensor_sizes add up to more than {_MAX_MODEL_ELEMENTS} elements (at tensor_sizes[{i}])"
                )
            sizes.append(s)
        if not sizes:
            raise InvalidArgument("tensor_sizes is empty: a model has one tensor at least")
        self._optimizer = self._core.make_optimizer(sizes)
        return self._optimizer

    def exchange(self, params: Any) -> None:
        """One gossip exchange of ``params`` (float32, in place) with the
        configured gossip algorithm's peers, without a local step: Crossover-
        SGD's segment exchange, SGP's push-sum round. Needs
        :meth:`make_optimizer` first (with ``sum(tensor_sizes)`` equal to
        ``params``' element count). Crossover-SGD's exchange is its sync
        one whatever ``algorithm.mode`` (a dead peer fails it; SGP's follows
        the mode, and async routes around). Exchanges are numbered so that every
        rank's n-th meets the others' n-th: a failed one is repeated by the
        next call, and after a view change (:meth:`recover`) the numbering
        starts again on every survivor.

        ``params``: a NumPy float32 array or a CPU float32 torch tensor,
        C-contiguous and writable, updated in place (a tensor's version
        counter is bumped). (C++: the optimizer's
        ``DistributedOptimizer::modelExchange``.)

        Raises:
            TypeError, ValueError: not a float32 array, not contiguous,
            read-only, not on the CPU. InvalidArgument: no optimizer, or one
            without a model exchange (allreduce_sgd), or a length mismatch.
            PeerFailure, TimeoutError.
        """
        array = _as_array(params, "params")
        try:
            self._core.exchange(array)
        finally:  # a failed exchange may have written part of it
            _bump_version(params)

    # -- membership -------------------------------------------------------
    @property
    def has_membership(self) -> bool:
        """Whether the membership service is on (``membership.enabled``)."""
        return self._core.has_membership

    @property
    def view(self) -> dict:
        """The membership view in force: ``number`` (0 for the first view),
        ``coordinator`` (the rank that issued it, -1 for the first) and
        ``members`` (the live ranks, ascending; every rank without the
        membership service)."""
        return self._core.view

    def survive(self, fn) -> bool:
        """Runs ``fn()`` (collectives of your own, e.g. an evaluation or
        :func:`gossamer.torch.average_parameters`) until it completes: when a
        peer dies inside it (:class:`PeerFailure`) and the membership service
        is on, agrees with the survivors on a view without it and runs
        ``fn`` again over that view, so ``fn`` must recompute its inputs each
        time. Every survivor must call it with the same ``fn``.

        Returns:
            True once ``fn`` completed; False when a view change moved this
            rank past the step where ``fn`` belonged (it rejoined the job, or
            the others are past that step and did not run theirs there).

        A :class:`TimeoutError` inside ``fn`` counts as a peer's failure
        when the view is revoked within 5 seconds of it (a peer that stalled
        past ``transport.timeout_seconds`` but not yet past
        ``membership.suspect_seconds``, or this rank was stopped).

        While ``fn`` runs, :meth:`close`, :meth:`abort`,
        :meth:`make_optimizer` and :meth:`recover` on this agent raise
        InvalidArgument when ``fn`` calls them (they would free or replace
        what survive is using): call them after survive returns. Another
        thread may close or abort the agent meanwhile (a watchdog), which
        makes survive raise. (C++: ``Session::survive``.)

        Raises:
            TypeError: ``fn`` not callable. PeerFailure: the membership
            service is off, or ``fn``'s own PeerFailure came back after
            three view changes in a row that lost and joined nobody (a
            link that fails while the peer's heartbeats arrive, or ``fn``
            raising PeerFailure itself). Expelled: the survivors removed this rank.
            TimeoutError: from ``fn`` with no view change following it, or no
            agreement within ``membership.agreement_seconds``. Whatever else
            ``fn`` raises.
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, not {type(fn).__name__}")
        me = threading.get_ident()
        self._surviving.append(me)
        try:
            return self._core.survive(fn)
        finally:
            self._surviving.remove(me)

    def _not_surviving(self, call: str) -> None:
        """Raises InvalidArgument naming ``call`` inside :meth:`survive`'s
        ``fn`` (on the thread that runs it: a watchdog thread may close)."""
        if threading.get_ident() in getattr(self, "_surviving", ()):
            raise InvalidArgument(f"{call}() inside survive(fn): call it after survive returns")

    @property
    def view_changes(self) -> list:
        """The view changes so far, oldest first: dicts as :meth:`recover`
        returns."""
        return self._core.view_changes

    def recover(self) -> dict:
        """After a :class:`PeerFailure` (or :class:`ViewChanged`) in a
        collective of your own: agrees with the survivors on a view without
        the lost peers and rebuilds the communicator and optimizer over it
        (the optimizer's steps and :meth:`survive` do this themselves). Every
        survivor must call it. Returns ``number``, ``members``, ``lost``
        (ranks), ``joined`` (ranks taken back), ``resume_step`` and
        ``seconds`` (how long the agreement took).

        (C++: ``Session::recover``.)

        Raises:
            InvalidArgument: the membership service is off; called inside
            :meth:`survive`'s ``fn`` or while a call on this agent runs on
            another thread. Expelled: the survivors removed this
            rank. TimeoutError: no agreement within
            ``membership.agreement_seconds``. PeerFailure: another peer failed
            meanwhile (call it again).
        """
        self._not_surviving("recover")
        return self._core.recover()

    def stats(self) -> dict:
        """This rank's transport counters: ``bytes_sent``,
        ``bytes_received``, ``messages_sent``, ``messages_received``."""
        return self._core.stats()

    # -- metrics ----------------------------------------------------------
    @property
    def run_dir(self) -> Optional[str]:
        """The run directory (``run.dir``) where every rank appends its
        metrics records (``rank-R.jsonl``, docs/metrics.md), or None when the
        run writes no files (``run.dir: ""`` or ``run.metrics: false``)."""
        return self._core.run_dir or None

    def metrics(self) -> list:
        """This rank's metrics records made since the last call (the first
        call also returns the ``start`` record), oldest first, each a dict as
        in docs/metrics.md: ``kind`` (``start``, ``step``, ``view``,
        ``stall``, ``end`` or your own), ``rank``, ``time`` (Unix seconds),
        ``step``, and the kind's fields (a ``step`` record has ``compute_s``,
        ``communication_s``, ``waiting_s`` in seconds, ``sent_bytes`` and
        ``received_bytes`` by peer, ``push_sum_weight``, ``view``, and the
        means of what :meth:`note_metric` noted). Records wait in a queue of
        at most 65,536 until taken; older ones are dropped beyond that
        (counted by :attr:`metrics_dropped`). Empty with ``run.metrics:
        false``."""
        return [json.loads(line) for line in self._core.take_metrics()]

    @property
    def metrics_dropped(self) -> int:
        """Records dropped because :meth:`metrics` was not called often enough."""
        return self._core.metrics_dropped

    def note_metric(self, name: str, value: float) -> None:
        """Adds ``value`` to the next ``step`` record's ``name`` field, which
        carries the mean of the values noted since the previous one (e.g.
        ``agent.note_metric("loss", loss.item())`` every step).

        (C++: ``Metrics::note``.)

        Raises:
            TypeError: ``name`` not a str or ``value`` not a real number.
            InvalidArgument: ``name`` is a field every step record has
            already (``kind``, ``rank``, ``time``, ``step``, ``steps``,
            ``compute_s``, ``communication_s``, ``waiting_s``,
            ``sent_bytes``, ``received_bytes``, ``push_sum_weight``,
            ``view``: module.cpp's kRecordFields and kStepRecordFields).
        """
        if not isinstance(name, str) or not name:
            raise TypeError(f"name must be a non-empty str, got {name!r}")
        # numbers.Real takes NumPy's scalars (np.float32, np.int64) too.
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"value must be a real number, got {type(value).__name__}")
        self._core.note_metric(name, float(value))

    def emit_metrics(self, kind: str, step: Optional[int] = None, **fields: Any) -> None:
        """Appends a record of your own (e.g. ``kind="eval"``, ``accuracy=0.9``)
        to this rank's metrics file and queue. ``step`` defaults to the
        optimizer's steps (0 without one). Field values must be JSON-
        serialisable.

        ``step``: an int in ``[0, 2**64)``. (C++: ``Metrics::emit``.)

        Raises:
            TypeError: a value that is not JSON-serialisable (NaN and the
            infinities included, and ints outside ``[-2**63, 2**64)``, which
            JSON readers cannot hold), a step that is not an int.
            InvalidArgument: an empty kind, a step outside ``[0, 2**64)``, or
            a field named kind, rank, time or step.
        """
        if step is None:
            step = self._optimizer.steps if self._optimizer is not None else 0
        step = _int_arg(step, "step")
        if not 0 <= step <= _UINT64_MAX:
            raise InvalidArgument(f"step {step} outside [0, 2**64)")
        pairs = []
        for name, value in fields.items():
            try:
                _check_json_ints(value)
                pairs.append((name, json.dumps(value, allow_nan=False)))
            except (TypeError, ValueError) as e:
                raise TypeError(f"metrics field {name!r}: {e}") from None
        self._core.emit_metrics(kind, step, pairs)

    # -- lifetime ---------------------------------------------------------
    def close(self) -> None:
        """Delivers what is queued (within ``transport.linger_seconds``),
        says goodbye to the peers and releases the transport. Idempotent.
        (C++: ``Session::close``.)

        May be called from another thread while a call runs: that call's
        waits are cancelled and it raises (:class:`Cancelled`, or the error
        of the wait it was in); the agent is freed once it returns.

        Raises:
            InvalidArgument: called inside :meth:`survive`'s ``fn`` (nothing
            is closed). The close's own error (the agent is closed anyway).
        """
        self._not_surviving("close")
        self._optimizer = None
        try:
            self._core.close()
        finally:
            self._remove_own_rendezvous()

    def abort(self) -> None:
        """Closes without delivering what is still queued (error paths).
        (C++: ``Session::abort``.)

        Raises:
            InvalidArgument: called inside :meth:`survive`'s ``fn`` (nothing
            is closed).
        """
        self._not_surviving("abort")
        self._optimizer = None
        try:
            self._core.abort()
        finally:
            self._remove_own_rendezvous()

    def _remove_own_rendezvous(self) -> None:
        if self._own_rendezvous is not None:
            self._own_rendezvous()  # runs once: later calls do nothing

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` or :meth:`abort` was called."""
        return self._core.closed

    def __enter__(self) -> "Agent":
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is None:
            self.close()
        else:
            self.abort()

    def __repr__(self) -> str:
        if self.closed:
            return "<gossamer.Agent closed>"
        return (
            f"<gossamer.Agent rank {self.rank} of {self.world_size}, "
            f"{self.algorithm} over {self.transport}>"
        )
