"""PyTorch integration: any ``torch.optim`` optimizer, decentralized.

::

    agent = gossamer.Agent.from_env(config="peer.yaml")
    opt = gossamer.torch.DistributedOptimizer(torch.optim.Adam(model.parameters()), model, agent)
    gossamer.torch.broadcast_parameters(model, agent)
    for x, y in loader:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

The model's parameters (all float32, or all bfloat16 or all float16, on
one device) are fused once into one flat buffer and their gradients into
another, on that device; the parameters and ``.grad`` tensors become views
of them, so no step copies a float32 CPU model. A 16-bit model, or one on
another device than the CPU (CUDA, ...), is communicated through a float32
host copy of each flat buffer (the C++ optimizers keep float32 state,
push-sum weights in float64, and never see a device pointer): each step
copies the gradients and parameters into it (pinned memory on CUDA; torch's
blocking copies, so the host buffer is complete before the exchange reads
it) and the results back, rounded to the model's dtype, ties to even. Under
``torch.autocast`` the parameters stay float32 and nothing changes. Each
``step()``:

1. ``reduce_gradients``: AllReduce-SGD and the compressors (Top-K, QSGD,
   A2SGD) average the flat gradient over the ranks; the gossip algorithms
   leave it alone;
2. the wrapped optimizer's own ``step()`` (SGD, Adam, AdamW, ...);
3. ``mix_parameters``: Crossover-SGD, SGP and hierarchical groups mix the
   flat parameters with their peers' (as BlueFog's neighbour-allreduce
   optimizers do); allreduce-style algorithms leave them alone.

Push-sum weights, overlap and async modes keep the C++ semantics (see
``docs/algorithms.md``). The C++ side is
``DistributedOptimizer::reduceGradients`` / ``mixParameters``.

Under AllReduce-SGD (``algorithm.name: allreduce_sgd``, no compression) the
gradient average is bucketed as DDP does it (Li et al., "PyTorch Distributed:
Experiences on Accelerating Data Parallel Training", VLDB 2020, Sec. 3.2):
the parameters, in reverse order, are cut into buckets, each closed once it
holds at least ``bucket_bytes`` (25 MiB) of float32 gradients, and each bucket is averaged by
one allreduce (4 bytes an element, the configured allreduce algorithm). With
``overlap=True`` (the default) a hook on each parameter's gradient
accumulation starts a bucket's allreduce (``Agent.allreduce_async``) as soon
as backward has produced all of its gradients, buckets in order, so that the
communication runs while backward goes on; ``step()`` starts any bucket not
started yet and waits for all of them. With ``overlap=False`` the same
allreduces run in ``step()``: the results are the same bits either way.
With the membership service on, a bucketed average that fails because a
peer died (PeerFailure, ViewChanged) is redone as the C++ optimizers'
steps are: ``step()`` waits for every bucket, agrees on a view without the
peer (``Agent.recover``), puts back the local gradient and averages it
again over the survivors; a rank behind the survivors takes their model and
skips the step (``steps`` says so).

Parameters with ``requires_grad=False`` (frozen) are left out, as DDP leaves
them out of its buckets: not fused, their gradients not averaged, their
values not mixed; ``broadcast_parameters`` copies them with the others, so
every rank starts with the same frozen values and keeps them.
"""

from __future__ import annotations

import copy
import weakref
from typing import Iterable, List, Optional, Tuple, Union

import torch

from . import Agent, Expelled, InvalidArgument, PeerFailure

__all__ = [
    "DistributedOptimizer",
    "broadcast_parameters",
    "average_parameters",
    "consensus_distance",
]

Parameters = Union[torch.nn.Module, Iterable[torch.Tensor]]

# The parameter dtypes DistributedOptimizer trains.
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)

# DDP's default bucket size (torch.nn.parallel.DistributedDataParallel's bucket_cap_mb).
DEFAULT_BUCKET_BYTES = 25 * 1024 * 1024


def _needs_host_copy(device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the C++ optimizer works on a float32 host copy of the flat
    buffers (a 16-bit model, or one off the CPU) rather than on the buffers
    themselves."""
    return device.type != "cpu" or dtype != torch.float32


def _host_float32(numel: int, device: torch.device) -> torch.Tensor:
    """A float32 host buffer to stage a flat buffer of ``device`` through:
    pinned when the device is CUDA (faster copies both ways)."""
    return torch.zeros(numel, dtype=torch.float32, pin_memory=device.type == "cuda")


def _tensors(params: Parameters) -> List[torch.Tensor]:
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    return list(params)


class DistributedOptimizer:
    """Wraps a ``torch.optim.Optimizer`` so that each ``step()`` also runs
    the agent's configured algorithm (``algorithm.name``) across the ranks.

    Args:
        optimizer: the local optimizer, built on ``model``'s parameters (all
            float32, all bfloat16 or all float16, all on one device: the CPU,
            CUDA, or any other torch device).
        model: the ``torch.nn.Module`` (or an iterable of its parameters, in
            the optimizer's order). Build this wrapper before the first step:
            the parameters are moved into a flat buffer (their values kept).
            Parameters with ``requires_grad=False`` are left out (as DDP
            does; they need not be in the optimizer and may have any dtype or
            device); freezing or unfreezing one afterwards raises
            RuntimeError in ``step()``: build the wrapper again.
        agent: the :class:`gossamer.Agent` of this rank.
        total_steps: steps of the whole run, if known (A2SGD synchronises
            the models after the last one); 0 = unknown.
        overlap: AllReduce-SGD only: start each bucket's allreduce during
            backward (True, the default) or in ``step()`` (False); the same
            results. Needs one backward per step: a gradient accumulated twice
            before a step raises RuntimeError in ``step()``.
        bucket_bytes: AllReduce-SGD only: the bucket size, bytes of float32
            gradients (> 0). Walking the parameters last first, a bucket is
            closed at the first parameter that brings it to this size or more.

    Raises:
        TypeError: a parameter of another dtype than float32, bfloat16 or
            float16, or of another dtype or device than the first parameter's.
        ValueError: parameters the optimizer does not hold, trainable
            parameters it holds that the model lacks, or no trainable
            parameter at all.
        gossamer.InvalidArgument: an algorithm without a communication-only
            form. During ``step()``: gossamer.PeerFailure (without the
            membership service; with it, a dead peer's step is redone over
            the survivors), gossamer.Expelled, gossamer.TimeoutError as the
            exchange raises them.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: Parameters,
        agent: Agent,
        total_steps: int = 0,
        overlap: bool = True,
        bucket_bytes: int = DEFAULT_BUCKET_BYTES,
    ) -> None:
        # Built outside inference mode whatever the caller's: the fused
        # buffers must be ordinary tensors that autograd tracks (under
        # torch.inference_mode() they would be inference tensors).
        with torch.inference_mode(False):
            self._build(optimizer, model, agent, total_steps, overlap, bucket_bytes)

    def _build(self, optimizer, model, agent, total_steps, overlap, bucket_bytes) -> None:
        if int(bucket_bytes) <= 0:
            raise ValueError(f"bucket_bytes must be positive, got {bucket_bytes}")
        every = _tensors(model)
        if not every:
            raise ValueError("model has no parameters")
        # Frozen parameters are left out (DDP leaves them out of its buckets).
        index = [i for i, p in enumerate(every) if p.requires_grad]
        if not index:
            raise ValueError(f"model has no trainable parameter (all {len(every)} have requires_grad=False)")
        params = [every[i] for i in index]
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        first = index[0]
        dtype, device = params[0].dtype, params[0].device
        for i, p in zip(index, params):
            if p.dtype not in _DTYPES or p.dtype != dtype or p.device != device:
                raise TypeError(
                    f"parameter {i} (shape {tuple(p.shape)}) is {p.dtype} on {p.device}; "
                    "Gossamer trains parameters of one dtype (float32, bfloat16 or float16) on one device"
                    + (f" (parameter {first} is {dtype} on {device})"
                       if p.dtype != dtype or p.device != device else "")
                )
            if id(p) not in held:
                raise ValueError(f"parameter {i} (shape {tuple(p.shape)}) is not in the optimizer")
        # And the other way: a trainable parameter the optimizer holds that
        # the model lacks would train on each rank alone, never exchanged.
        in_model = {id(p) for p in every}
        for gi, g in enumerate(optimizer.param_groups):
            for p in g["params"]:
                if p.requires_grad and id(p) not in in_model:
                    raise ValueError(
                        f"the optimizer's param group {gi} holds a parameter (shape {tuple(p.shape)}) that is "
                        "not in the model: it would train on each rank alone; wrap a model that holds "
                        "every parameter the optimizer trains")
        self._index = index
        self._frozen = [(i, p) for i, p in enumerate(every) if not p.requires_grad]
        self.optimizer = optimizer
        self.agent = agent
        self._params = params
        sizes = [p.numel() for p in params]
        total = sum(sizes)
        self.dtype = dtype
        self.device = device
        with torch.no_grad():
            self._flat = torch.empty(total, dtype=dtype, device=device)
            self._flat_grad = torch.zeros(total, dtype=dtype, device=device)
            self._views = []
            self._grad_views = []
            offset = 0
            for p, n in zip(params, sizes):
                self._flat[offset : offset + n].copy_(p.detach().reshape(-1))
                p.data = self._flat[offset : offset + n].view_as(p)
                gv = self._flat_grad[offset : offset + n].view_as(p)
                if p.grad is not None:
                    gv.copy_(p.grad)
                p.grad = gv
                self._views.append(p.data)
                self._grad_views.append(gv)
                offset += n
        # What the C++ optimizer reads and writes: the flat buffers
        # themselves for a float32 CPU model, a float32 host copy of each
        # otherwise.
        if _needs_host_copy(device, dtype):
            self._wide = _host_float32(total, device)
            self._wide.copy_(self._flat)
            self._wide_grad = _host_float32(total, device)
        else:
            self._wide, self._wide_grad = self._flat, self._flat_grad
        self._flat_np = self._wide.numpy()
        self._flat_grad_np = self._wide_grad.numpy()
        self._comm = agent.make_optimizer(sizes)
        if not self._comm.has_communication_only_form:
            raise InvalidArgument(
                f"algorithm '{self._comm.name}' cannot wrap a torch optimizer "
                "(it has no communication-only form)"
            )
        if total_steps:
            self._comm.set_total_steps(int(total_steps))
        # Bucketed gradient averages: plain AllReduce-SGD, whose
        # reduce_gradients is one average allreduce of the flat gradient.
        self._buckets: List[Tuple[int, int]] = []  # [begin, end) element ranges, in launch order
        self._works: list = []
        self._hooks: list = []
        # The local gradient of the step in progress, for its redo over the
        # survivors (membership on): the float32 CPU model's own copy; a
        # staged model's flat gradient stays local until the average is back.
        self._local_grad: Optional[torch.Tensor] = None
        # A replicated model (AllReduce-SGD, a compressor whose decoded
        # average is the same everywhere) needs the same wrapped optimizer
        # state on every rank: the view its state was last updated under, and
        # the state to start afresh from after a view change.
        self._view_seen = agent.view["number"] if agent.has_membership else 0
        self._replicated = self._comm.replicated_model and agent.world_size > 1 and agent.has_membership
        self._initial_state = _state_snapshot(optimizer) if self._replicated else {}
        if self._comm.name == "allreduce_sgd" and agent.world_size > 1:
            self._make_buckets(sizes, int(bucket_bytes))
            if agent.has_membership:
                if self._wide is self._flat:
                    self._local_grad = torch.zeros_like(self._flat_grad)
                # The C++ optimizer learns where the model is (a view change
                # before the first step broadcasts it to a rank behind); no
                # message: AllReduce-SGD has nothing in flight. Before the
                # hooks: if it raises, no hook is left on the parameters.
                self._comm.flush(self._flat_np)
            if overlap:
                self._install_hooks()
        elif self._replicated:
            # A compressor whose decoded average is the same everywhere: the
            # C++ optimizer learns where the model is, as above (its flush
            # sends nothing).
            self._comm.flush(self._flat_np)

    # -- the torch.optim.Optimizer interface ------------------------------
    @property
    def param_groups(self):
        """The wrapped optimizer's parameter groups (learning rates, ...)."""
        return self.optimizer.param_groups

    @property
    def state(self):
        """The wrapped optimizer's state."""
        return self.optimizer.state

    def state_dict(self) -> dict:
        """The wrapped optimizer's ``state_dict()``."""
        return self.optimizer.state_dict()

    def load_state_dict(self, state: dict) -> None:
        """Loads the wrapped optimizer's state."""
        self.optimizer.load_state_dict(state)

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes the fused gradient buffer (one memset). ``set_to_none`` is
        accepted for compatibility; the gradients stay views of the buffer.

        With overlap, a backward whose step was skipped (a non-finite loss,
        a GradScaler's inf) started bucket allreduces during it, as every
        rank's did: they are completed first and their result dropped, and
        the next backward starts the buckets afresh. Collective then, like
        step(): every rank skips the same steps. Raises PeerFailure,
        TimeoutError from those allreduces."""
        # (Every rank must skip the same steps, as with DDP: a GradScaler's
        # decision is the same everywhere once the gradients are averaged.)
        if self._buckets and (self._works or self._next or any(self._ready)):
            try:
                self._finish_buckets()
            finally:
                self._clear_buckets()
        self._flat_grad.zero_()
        self._rebind_grads()

    def _rebind_grads(self) -> None:
        # A .grad that was set to None or replaced is copied back into the
        # fused buffer once and bound to it again.
        with torch.no_grad():
            for p, gv in zip(self._params, self._grad_views):
                g = p.grad
                if g is None:
                    gv.zero_()
                    p.grad = gv
                elif g.data_ptr() != gv.data_ptr():
                    gv.copy_(g)
                    p.grad = gv

    def _check_params(self) -> None:
        for i, p, v in zip(self._index, self._params, self._views):
            if p.data_ptr() != v.data_ptr():
                raise RuntimeError(
                    "a parameter was replaced after the DistributedOptimizer fused the model "
                    "(e.g. model.to() or load_state_dict(assign)); build the wrapper after that"
                )
            if not p.requires_grad:
                raise RuntimeError(
                    f"parameter {i} (shape {tuple(p.shape)}) was frozen (requires_grad=False) after the "
                    "DistributedOptimizer was built, which averages its gradient; build the wrapper again"
                )
        for i, p in self._frozen:
            if p.requires_grad:
                raise RuntimeError(
                    f"parameter {i} (shape {tuple(p.shape)}) was unfrozen (requires_grad=True) after the "
                    "DistributedOptimizer was built without it, so its gradient would not be averaged; "
                    "build the wrapper again"
                )

    # -- buckets (AllReduce-SGD) ------------------------------------------
    def _make_buckets(self, sizes: List[int], bucket_bytes: int) -> None:
        offsets = [0]
        for n in sizes:
            offsets.append(offsets[-1] + n)
        limit = max(1, bucket_bytes // 4)  # float32 elements
        self._bucket_of = [0] * len(sizes)
        self._bucket_params: List[List[int]] = []
        end = offsets[-1]
        members: List[int] = []
        # Backward produces the last parameters first. A bucket is closed once
        # it holds at least `limit` elements (as DDP's buckets are), so a
        # layer's bias travels with its weight rather than in a bucket of its own.
        for i in reversed(range(len(sizes))):
            members.append(i)
            self._bucket_of[i] = len(self._buckets)
            if end - offsets[i] >= limit or i == 0:
                self._buckets.append((offsets[i], end))
                self._bucket_params.append(members)
                end = offsets[i]
                members = []
        self._clear_buckets()

    def _install_hooks(self) -> None:
        # The gradient accumulator of each parameter (torch 1.13 and 2.x):
        # its hook runs once the gradient is in p.grad. The hook holds the
        # wrapper weakly: a wrapper dropped or replaced (a later wrapper or
        # make_optimizer on the agent) neither stays alive through it nor
        # starts allreduces.
        me = weakref.ref(self)
        # (Under torch.no_grad() or inference_mode, expand_as records no
        # grad_fn: the wrapper may be built there.)
        with torch.enable_grad():
            for i, p in enumerate(self._params):
                acc = p.expand_as(p).grad_fn.next_functions[0][0]
                self._hooks.append((acc, acc.register_hook(lambda *_, i=i: DistributedOptimizer._hook(me, i))))
        # A wrapper that is freed takes its hooks with it (removing a hook
        # twice is harmless), so rebuilding wrappers leaves none behind.
        weakref.finalize(self, _remove_hooks, [handle for _, handle in self._hooks])

    @staticmethod
    def _hook(me: "weakref.ref[DistributedOptimizer]", i: int) -> None:
        self = me()
        if self is not None and self._hooks:
            self._on_ready(i)

    def _on_ready(self, i: int) -> None:
        if self._ready[i]:
            self._twice = True
            return
        self._ready[i] = True
        b = self._bucket_of[i]
        self._pending[b] -= 1
        # Buckets start in order, the same on every rank.
        while self._next < len(self._buckets) and self._pending[self._next] == 0:
            try:
                self._comm.name  # raises once the agent's optimizer is another one, or closed
            except InvalidArgument:
                for _, handle in self._hooks:
                    handle.remove()
                self._hooks = []
                return
            self._start(self._next)

    def _start(self, b: int) -> None:
        begin, end = self._buckets[b]
        with torch.no_grad():
            if self._wide is not self._flat:
                self._wide_grad[begin:end].copy_(self._flat_grad[begin:end])
            elif self._local_grad is not None:
                self._local_grad[begin:end].copy_(self._flat_grad[begin:end])
        self._works.append(self.agent.allreduce_async(self._wide_grad[begin:end], op="average"))
        self._next = b + 1

    def _average_buckets(self, steps_before: int) -> bool:
        """Averages the buckets' gradients; with the membership service, over
        the survivors when a peer dies meanwhile. False: this rank skips the
        step (see _redo_over_survivors)."""
        if self._twice:
            self._finish_buckets()
            raise RuntimeError(
                "a gradient was accumulated twice before step(): with overlap=True each step "
                "takes one backward; use DistributedOptimizer(..., overlap=False) to accumulate"
            )
        while self._next < len(self._buckets):
            self._start(self._next)
        try:
            try:
                self._finish_buckets()
            except PeerFailure as e:  # ViewChanged included
                if isinstance(e, Expelled) or not self.agent.has_membership:
                    raise
                if not self._redo_over_survivors(steps_before):
                    return False
        except BaseException:
            # Given up: the gradient is this rank's own again, not a mix of
            # averaged and local buckets (a caller may step again).
            if self._local_grad is not None:
                with torch.no_grad():
                    self._flat_grad.copy_(self._local_grad)
            raise
        if self._hooks:
            for i, p, gv in zip(self._index, self._params, self._grad_views):
                if p.grad is None or p.grad.data_ptr() != gv.data_ptr():
                    raise RuntimeError(
                        f"the .grad of parameter {i} was replaced or set to None after the "
                        "DistributedOptimizer bound it, so backward's gradient was not averaged; "
                        "use the DistributedOptimizer's zero_grad(), or overlap=False"
                    )
        return True

    def _clear_buckets(self) -> None:
        # No bucket started, no gradient ready: the state at the start of a step.
        self._works = []
        self._pending = [len(m) for m in self._bucket_params]
        self._ready = [False] * len(self._params)
        self._twice = False
        self._next = 0  # the first bucket not started

    def _finish_buckets(self) -> None:
        # Waits for every started bucket (each wait is bounded), raises the
        # first one's error (a PeerFailure before any other: a lost peer is
        # what the caller recovers from, whatever failed first), and brings a
        # 16-bit model's averaged gradient back from its float32 copy. None
        # is left writing into the buffer.
        works = self._works
        self._clear_buckets()
        error = None
        for w in works:
            try:
                w.wait()
            except Exception as e:  # raised once all are done
                if error is None or (isinstance(e, PeerFailure) and not isinstance(error, PeerFailure)):
                    error = e
        if error is not None:
            raise error
        if self._wide is not self._flat:
            with torch.no_grad():
                self._flat_grad.copy_(self._wide_grad)

    def _recover(self) -> dict:
        """Agrees with the survivors on a view without the lost peers, again
        while another peer fails during the agreement (as the C++ optimizers'
        recovery does). Raises Expelled, TimeoutError."""
        for _ in range(self.agent.world_size):
            try:
                return self.agent.recover()
            except PeerFailure as e:
                if isinstance(e, Expelled):
                    raise
                last = e
        raise last

    def _redo_over_survivors(self, steps_before: int) -> bool:
        """After a bucket failed because a peer died: installs the view
        without it and averages this step's local gradient again over the
        survivors, as ResilientOptimizer redoes a C++ step. Returns True once
        the gradient is averaged; False when this rank skips the step: it was
        behind a survivor that completed it (it holds that survivor's model
        now, the step counted) or it rejoined the job (it holds the
        survivors' model and step; its gradient belongs to another model).
        Then the wrapped optimizer does not step either; step() restarts
        its state on every rank after a view change."""
        staged = self._wide is not self._flat
        with torch.no_grad():
            # Each round that fails lost a peer: at most one per rank.
            for _ in range(self.agent.world_size):
                if staged:
                    # A realignment broadcasts the model into what the C++ side holds.
                    self._wide.copy_(self._flat)
                change = self._recover()
                if self.agent.rank in change["joined"] or change["resume_step"] > steps_before:
                    if self.agent.rank not in change["joined"]:
                        self._comm.mix_parameters(self._flat_np)  # counts the step it skips
                    if staged:
                        self._flat.copy_(self._wide)
                    return False
                if staged:
                    self._wide_grad.copy_(self._flat_grad)  # _start copies it again, bucket by bucket
                else:
                    self._flat_grad.copy_(self._local_grad)
                self._clear_buckets()
                for b in range(len(self._buckets)):
                    self._start(b)
                try:
                    self._finish_buckets()
                    return True
                except PeerFailure as e:
                    if isinstance(e, Expelled):
                        raise
                    last = e
        raise last

    def step(self, closure=None):
        """Averages the gradients (allreduce-style algorithms), runs the
        wrapped optimizer's step, then mixes the parameters with the peers
        (gossip algorithms). Collective: every rank steps together.

        ``closure`` (zeroes the gradients, computes the loss, calls
        backward, returns the loss) runs once, under ``torch.enable_grad()``,
        before the gradients are averaged, so that the ones it computes are
        what every rank steps with; the wrapped optimizer's step gets no
        closure (optimizers that evaluate it again, such as LBFGS, are not
        supported: theirs would not be averaged). Returns the closure's loss
        (without one, what the wrapped ``step()`` returns), or None when a
        view change had this rank skip the step (``steps`` counts it, the
        model is the survivors')."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._check_params()
        staged = self._wide is not self._flat
        if self._buckets:
            if not self._hooks:
                self._rebind_grads()
            averaged = self._average_buckets(self._comm.steps)
            self._restart_state_after_view_change()
            if not averaged:
                return None
        else:
            self._rebind_grads()
            with torch.no_grad():
                if staged:
                    self._wide_grad.copy_(self._flat_grad)
                self._comm.reduce_gradients(self._flat_grad_np)
                if staged:
                    self._flat_grad.copy_(self._wide_grad)
            self._restart_state_after_view_change()
            if self._comm.skips_local_step:
                # A view change in the exchange found this rank behind the
                # survivors: it skips to their step (a replicated model's
                # realignment wrote their model into what the C++ side
                # holds), so no local update; mix_parameters exchanges nothing.
                with torch.no_grad():
                    self._comm.mix_parameters(self._flat_np)
                    if staged:
                        self._flat.copy_(self._wide)
                return None
        stepped = self.optimizer.step()
        if closure is None:
            loss = stepped
        with torch.no_grad():
            if staged:
                self._wide.copy_(self._flat)
            self._comm.mix_parameters(self._flat_np)
            if staged:
                self._flat.copy_(self._wide)
        return loss

    def _restart_state_after_view_change(self) -> None:
        # A view was installed since the last update (in this step's
        # exchange, a flush, survive() or recover()): a replicated model's
        # wrapped optimizer state (momentum, Adam's moments and step) starts
        # afresh on every survivor before its next update, as the C++
        # optimizers' does, so that a rank that skipped the step and one that
        # redid it hold the same state again.
        if self._replicated:
            view = self.agent.view["number"]
            if view != self._view_seen:
                _restore_state(self.optimizer, self._initial_state)
                self._view_seen = view

    def flush(self) -> None:
        """Completes an exchange still in flight (overlap mode) so that the
        parameters include every message; call before evaluating or saving.
        Writes to the parameters since the last step (``load_state_dict``,
        ``average_parameters``) are kept: a model that is not float32 on the
        CPU is copied into the float32 host copy the exchange works on first,
        as ``step()`` does."""
        staged = self._wide is not self._flat
        with torch.no_grad():
            if staged:
                self._wide.copy_(self._flat)
            self._comm.flush(self._flat_np)
            if staged:
                self._flat.copy_(self._wide)

    @property
    def steps(self) -> int:
        """Steps taken so far."""
        return self._comm.steps

    @property
    def flat_parameters(self) -> torch.Tensor:
        """The fused parameters (all parameters in order, in the model's
        dtype, on its device); the model's parameters are views of it."""
        return self._flat

    def __repr__(self) -> str:
        return (
            f"<gossamer.torch.DistributedOptimizer {type(self.optimizer).__name__} "
            f"with {self._comm.name}, {self._flat.numel()} parameters>"
        )


def _real(p: torch.Tensor) -> torch.Tensor:
    """The tensor's elements as real numbers, sharing its memory: a complex
    tensor as its (real, imaginary) pairs (``torch.view_as_real``), which a
    broadcast moves and an average averages exactly, part by part."""
    p = p.detach()
    return torch.view_as_real(p) if p.is_complex() else p


def _checked(model: Parameters, what: str) -> List[torch.Tensor]:
    """The model's parameters as real tensors (_real).

    Raises:
        ValueError: no parameters. TypeError: a parameter that is not
            floating point or complex (its values would not survive the
            float conversion)."""
    params = _tensors(model)
    if not params:
        raise ValueError(f"{what}: model has no parameters")
    out = []
    for i, p in enumerate(params):
        if not (p.is_floating_point() or p.is_complex()):
            raise TypeError(
                f"{what}: parameter {i} (shape {tuple(p.shape)}) is {p.dtype}; it moves floating-point and "
                "complex tensors (use agent.broadcast or torch.distributed for other dtypes)"
            )
        out.append(_real(p))
    return out


def _wire_dtype(reals: List[torch.Tensor]) -> torch.dtype:
    """The dtype the concatenated parameters travel in, which holds every one
    of them exactly: their own when they all share one 16-bit dtype (2 bytes
    per element), float64 when any is float64 (or complex128), float32
    otherwise."""
    dtypes = {p.dtype for p in reals}
    if len(dtypes) == 1 and next(iter(dtypes)) in (torch.bfloat16, torch.float16):
        return next(iter(dtypes))
    return torch.float64 if torch.float64 in dtypes else torch.float32


def _flat_copy(reals: List[torch.Tensor], dtype: torch.dtype) -> torch.Tensor:
    return torch.cat([p.reshape(-1).to(dtype) for p in reals])


def _scatter(flat: torch.Tensor, reals: List[torch.Tensor]) -> None:
    offset = 0
    with torch.no_grad():
        for p in reals:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def _buffers(model: Parameters, integers: bool) -> List[torch.Tensor]:
    """A module's buffers (BatchNorm's running statistics) as real tensors
    (_real): the floating-point and complex ones, and with ``integers`` the
    integer ones too (``num_batches_tracked``); none for a list of tensors."""
    if not isinstance(model, torch.nn.Module):
        return []
    out = []
    for b in model.buffers():
        if b.is_floating_point() or b.is_complex():
            out.append(_real(b))
        elif integers and b.dtype != torch.bool:
            out.append(b.detach())
    return out


def _move(tensors: List[torch.Tensor], move) -> None:
    """Moves `tensors` by `move` (a collective on one flat vector, in place)
    as two flat copies at most: the floating-point ones in _wire_dtype, and
    the integer ones (buffers) apart in float64 (exact up to 2^53), so that
    an integer buffer does not widen a 16-bit model's vector."""
    floats = [t for t in tensors if t.is_floating_point()]
    integers = [t for t in tensors if not t.is_floating_point()]
    for group, dtype in ((floats, _wire_dtype(floats) if floats else None), (integers, torch.float64)):
        if group:
            flat = _flat_copy(group, dtype)
            move(flat)
            _scatter(flat, group)


def broadcast_parameters(model: Parameters, agent: Agent, root: int = 0, buffers: bool = True) -> None:
    """Copies rank ``root``'s parameters into every rank's, exactly (one
    broadcast of the concatenated parameters: 16-bit when they all are
    bfloat16 or all float16, float64 when any is float64, float32
    otherwise; a complex parameter as its real and imaginary parts). Frozen
    parameters (``requires_grad=False``) are copied too, and with
    ``buffers`` a module's floating-point buffers (BatchNorm's running
    statistics, in the same broadcast) and integer ones
    (``num_batches_tracked``, in a second one, as float64: exact up to
    2^53), as DDP broadcasts them; bool buffers are left as they are. Call
    once before training so that every rank starts from the same model.

    Raises:
        ValueError: no parameters. TypeError: a parameter that is not
        floating point or complex. PeerFailure, TimeoutError."""
    reals = _checked(model, "broadcast_parameters")
    _move(reals + (_buffers(model, integers=True) if buffers else []), lambda flat: agent.broadcast(flat, root))


def average_parameters(model: Parameters, agent: Agent, buffers: bool = True) -> None:
    """Replaces every rank's parameters by their average over all ranks
    (one allreduce of the concatenated parameters: 16-bit when they all are
    bfloat16 or all float16, reduced in float32 and rounded once per hop;
    float64 when any is float64; float32 otherwise; a complex parameter as
    its real and imaginary parts, averaged each), e.g. at the end of a
    gossip run. With ``buffers`` a module's floating-point buffers
    (BatchNorm's running statistics) are averaged with them, so that the
    average model is evaluated with averaged statistics; integer buffers
    (``num_batches_tracked``) stay each rank's. The same bits on every rank.

    Raises:
        ValueError: no parameters. TypeError: a parameter that is not
        floating point or complex. PeerFailure, TimeoutError."""
    reals = _checked(model, "average_parameters")
    _move(reals + (_buffers(model, integers=False) if buffers else []),
          lambda flat: agent.allreduce(flat, op="average"))


def _remove_hooks(handles: list) -> None:
    for handle in handles:
        handle.remove()


def _state_snapshot(optimizer: torch.optim.Optimizer) -> dict:
    """A copy of the optimizer's per-parameter state as it is now (empty for
    most; Adagrad makes its sums in its constructor)."""
    return {p: copy.deepcopy(s) for p, s in optimizer.state.items()}


def _restore_state(optimizer: torch.optim.Optimizer, snapshot: dict) -> None:
    """Puts the optimizer's per-parameter state back to ``snapshot``
    (_state_snapshot), leaving its parameter groups (learning rates a
    scheduler set) as they are."""
    optimizer.state.clear()
    for p, s in snapshot.items():
        optimizer.state[p] = copy.deepcopy(s)


def consensus_distance(model: Parameters, agent: Agent) -> float:
    """The mean over ranks of ``||x_i - x_avg||^2``, where ``x_i`` is rank
    i's concatenated parameters (a complex one as its real and imaginary
    parts) and ``x_avg`` their average (0 when all ranks hold the same
    model). Collective; the same value on every rank. Costs two allreduces
    (4 P bytes, 8 P when a parameter is float64, and 8 bytes); parameters
    off the CPU are copied to it first.

    Raises:
        ValueError: no parameters. TypeError: a parameter that is not
        floating point or complex. PeerFailure, TimeoutError."""
    reals = _checked(model, "consensus_distance")
    mine = _flat_copy(reals, torch.float64 if _wire_dtype(reals) == torch.float64 else torch.float32).cpu()
    avg = mine.clone()
    agent.allreduce(avg.numpy(), op="average")
    d = torch.tensor([float(((mine.double() - avg.double()) ** 2).sum())], dtype=torch.float64)
    agent.allreduce(d.numpy(), op="average")
    return float(d[0])


# ---- the torch.distributed backend "gossamer" ------------------------------------

#: The Gossamer config a "gossamer" process group uses when neither
#: ``pg_options`` nor ``GOSSAMER_CONFIG`` names one: zmq over TCP with the
#: library's defaults, each rank on its address facing ``$MASTER_ADDR``, or
#: without it the host of the group's ``TCPStore`` (``init_method="tcp://..."``)
#: (``host: auto``; 127.0.0.1 when that is a loopback address or neither is
#: there), so that the default works across hosts as torchrun starts them.
DEFAULT_PROCESS_GROUP_CONFIG = {"transport": {"kind": "zmq", "host": "auto"}}


def _create_process_group(opts, pg_options):
    """c10d's creator of a "gossamer" process group (the extended API of
    ``torch.distributed.Backend.register_backend``): called by
    ``init_process_group("gossamer", ...)`` and ``new_group``.

    Args:
        opts: torch's ``_DistributedBackendOptions`` (the group's store, rank,
            size and timeout).
        pg_options: ``init_process_group``'s ``pg_options``: ``None``, a
            config (path or mapping of YAML keys), or a mapping with the keys
            ``gossamer_config`` (a config) and ``overrides`` (``"key=value"``
            strings). Without a config, ``$GOSSAMER_CONFIG`` names the YAML
            file, else ``DEFAULT_PROCESS_GROUP_CONFIG`` applies. With
            ``transport.host: auto`` each rank binds to its address facing
            ``$MASTER_ADDR``, else the host of the ``TCPStore`` under the
            group's store (127.0.0.1 with neither: a file store).

    Returns:
        a ``gossamer._c10d.ProcessGroupGossamer`` (a ``c10d.ProcessGroup`` under
        torch 1.13, a ``c10d.Backend`` that torch wraps for the CPU and CUDA
        device types under torch 2.x).

    Raises:
        TypeError for pg_options of another type, or overrides that are not
        a sequence of str (a single str included); RuntimeError from the
        rendezvous (a peer that never arrives: a timeout naming it).
    """
    import os
    from collections.abc import Mapping

    from . import _c10d, _config_source, _overrides

    config, overrides = None, []
    if isinstance(pg_options, Mapping) and ("gossamer_config" in pg_options or "overrides" in pg_options):
        config = pg_options.get("gossamer_config")
        overrides = _overrides(pg_options.get("overrides", ()), "pg_options['overrides']")
    elif pg_options is not None:
        config = pg_options
    if config is None:
        config = os.environ.get("GOSSAMER_CONFIG") or DEFAULT_PROCESS_GROUP_CONFIG
    source, is_text = _config_source(config)
    timeout = opts.timeout.total_seconds() if hasattr(opts.timeout, "total_seconds") else float(opts.timeout)
    return _c10d.ProcessGroupGossamer(opts.store, opts.group_rank, opts.group_size, source, is_text, overrides,
                                      timeout, os.environ.get("MASTER_ADDR") or _store_host(opts.store))


def _store_host(store) -> str:
    """The host of the ``TCPStore`` under ``store`` (through the
    ``PrefixStore`` wrappers c10d adds), or "" for another store (a file
    store): what ``transport.host: auto`` faces when ``$MASTER_ADDR`` is
    unset, as with ``init_method="tcp://HOST:PORT"``; "" for an IPv6
    literal too (``host: auto`` resolves IPv4 only)."""
    import torch.distributed as dist

    for _ in range(64):  # a bound: each PrefixStore wraps one more
        if isinstance(store, dist.TCPStore):
            # host auto faces IPv4 addresses only: an IPv6 literal keeps 127.0.0.1
            return "" if ":" in store.host else store.host
        store = getattr(store, "underlying_store", None)
        if store is None:
            return ""
    return ""


def _register_backend() -> bool:
    """Registers the c10d backend "gossamer" once per process; False if the
    extension was not built (no libtorch-dev) or torch lacks distributed."""
    import torch.distributed as dist

    try:
        from . import _c10d  # noqa: F401
    except ImportError:
        return False
    if not dist.is_available():
        return False
    if "GOSSAMER" not in getattr(dist.Backend, "_plugins", {}):
        import inspect

        kwargs = {"extended_api": True}
        if "devices" in inspect.signature(dist.Backend.register_backend).parameters:
            # torch 2.x: one c10d::Backend serves both device types (CUDA tensors are staged through host memory)
            kwargs["devices"] = ["cpu", "cuda"]
        dist.Backend.register_backend("gossamer", _create_process_group, **kwargs)
    return True


#: Whether ``torch.distributed.init_process_group("gossamer")`` is available.
HAS_PROCESS_GROUP = _register_backend()
