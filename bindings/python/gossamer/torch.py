"""PyTorch integration: any ``torch.optim`` optimizer, decentralized.

::

    agent = gossamer.Agent.from_env(config="peer.yaml")
    opt = gossamer.torch.DistributedOptimizer(torch.optim.Adam(model.parameters()), model, agent)
    gossamer.torch.broadcast_parameters(model, agent)
    for x, y in loader:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

The model's parameters (CPU tensors, all float32, or all bfloat16 or all
float16) are fused once into one flat buffer and their gradients into
another; the parameters and ``.grad`` tensors become views of them, so no step
copies a float32 model. A 16-bit model is communicated through a float32
copy of each flat buffer (the C++ optimizers keep float32 state, push-sum
weights in float64): each step widens the gradients and parameters into it
and rounds the results back to the model's dtype, ties to even. Under
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
"""

from __future__ import annotations

from typing import Iterable, List, Optional, Union

import torch

from . import Agent

__all__ = [
    "DistributedOptimizer",
    "broadcast_parameters",
    "average_parameters",
    "consensus_distance",
]

Parameters = Union[torch.nn.Module, Iterable[torch.Tensor]]

# The parameter dtypes DistributedOptimizer trains.
_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _tensors(params: Parameters) -> List[torch.Tensor]:
    if isinstance(params, torch.nn.Module):
        return list(params.parameters())
    return list(params)


class DistributedOptimizer:
    """Wraps a ``torch.optim.Optimizer`` so that each ``step()`` also runs
    the agent's configured algorithm (``algorithm.name``) across the ranks.

    Args:
        optimizer: the local optimizer, built on ``model``'s parameters (CPU
            tensors, all float32, all bfloat16 or all float16).
        model: the ``torch.nn.Module`` (or an iterable of its parameters, in
            the optimizer's order). Build this wrapper before the first step:
            the parameters are moved into a flat buffer (their values kept).
        agent: the :class:`gossamer.Agent` of this rank.
        total_steps: steps of the whole run, if known (A2SGD synchronises
            the models after the last one); 0 = unknown.

    Raises:
        TypeError: a parameter that is not on the CPU, of another dtype, or
            of a dtype other than the first parameter's.
        ValueError: parameters the optimizer does not hold, or none at all.
        gossamer.InvalidArgument: an algorithm without a communication-only
            form. During ``step()``: gossamer.PeerFailure,
            gossamer.TimeoutError as the exchange raises them.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        model: Parameters,
        agent: Agent,
        total_steps: int = 0,
    ) -> None:
        params = _tensors(model)
        if not params:
            raise ValueError("model has no parameters")
        held = {id(p) for g in optimizer.param_groups for p in g["params"]}
        dtype = params[0].dtype
        for i, p in enumerate(params):
            if p.dtype not in _DTYPES or p.device.type != "cpu" or p.dtype != dtype:
                raise TypeError(
                    f"parameter {i} (shape {tuple(p.shape)}) is {p.dtype} on {p.device}; "
                    "Gossamer trains CPU parameters of one dtype: float32, bfloat16 or float16"
                    + (f" (parameter 0 is {dtype})" if p.dtype != dtype else "")
                )
            if id(p) not in held:
                raise ValueError(f"parameter {i} (shape {tuple(p.shape)}) is not in the optimizer")
        self.optimizer = optimizer
        self.agent = agent
        self._params = params
        sizes = [p.numel() for p in params]
        total = sum(sizes)
        self.dtype = dtype
        with torch.no_grad():
            self._flat = torch.empty(total, dtype=dtype)
            self._flat_grad = torch.zeros(total, dtype=dtype)
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
        # themselves for float32, a float32 copy of each for a 16-bit model.
        if dtype == torch.float32:
            self._wide, self._wide_grad = self._flat, self._flat_grad
        else:
            self._wide = self._flat.to(torch.float32)
            self._wide_grad = torch.zeros(total, dtype=torch.float32)
        self._flat_np = self._wide.numpy()
        self._flat_grad_np = self._wide_grad.numpy()
        self._comm = agent.make_optimizer(sizes)
        if not self._comm.has_communication_only_form:
            raise ValueError(
                f"algorithm '{self._comm.name}' cannot wrap a torch optimizer "
                "(it has no communication-only form)"
            )
        if total_steps:
            self._comm.set_total_steps(int(total_steps))

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
        accepted for compatibility; the gradients stay views of the buffer."""
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
        for p, v in zip(self._params, self._views):
            if p.data_ptr() != v.data_ptr():
                raise RuntimeError(
                    "a parameter was replaced after the DistributedOptimizer fused the model "
                    "(e.g. model.to() or load_state_dict(assign)); build the wrapper after that"
                )

    def step(self, closure=None):
        """Averages the gradients (allreduce-style algorithms), runs the
        wrapped optimizer's step, then mixes the parameters with the peers
        (gossip algorithms). Collective: every rank steps together.
        Returns what the wrapped ``step(closure)`` returns."""
        self._check_params()
        self._rebind_grads()
        narrow = self._wide is not self._flat
        with torch.no_grad():
            if narrow:
                self._wide_grad.copy_(self._flat_grad)
            self._comm.reduce_gradients(self._flat_grad_np)
            if narrow:
                self._flat_grad.copy_(self._wide_grad)
        loss = self.optimizer.step(closure)
        with torch.no_grad():
            if narrow:
                self._wide.copy_(self._flat)
            self._comm.mix_parameters(self._flat_np)
            if narrow:
                self._flat.copy_(self._wide)
        return loss

    def flush(self) -> None:
        """Completes an exchange still in flight (overlap mode) so that the
        parameters include every message; call before evaluating or saving."""
        self._comm.flush(self._flat_np)
        if self._wide is not self._flat:
            with torch.no_grad():
                self._flat.copy_(self._wide)

    @property
    def steps(self) -> int:
        """Steps taken so far."""
        return self._comm.steps

    @property
    def flat_parameters(self) -> torch.Tensor:
        """The fused parameters (all parameters in order, in the model's
        dtype); the model's parameters are views of it."""
        return self._flat

    def __repr__(self) -> str:
        return (
            f"<gossamer.torch.DistributedOptimizer {type(self.optimizer).__name__} "
            f"with {self._comm.name}, {self._flat.numel()} parameters>"
        )


def _flat_copy(params: List[torch.Tensor], dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).to(dtype) for p in params])


def _wire_dtype(params: List[torch.Tensor]) -> torch.dtype:
    """The parameters' own dtype when they all share one 16-bit dtype (they
    then travel as 2 bytes per element), float32 otherwise."""
    dtypes = {p.dtype for p in params}
    if len(dtypes) == 1 and next(iter(dtypes)) in (torch.bfloat16, torch.float16):
        return next(iter(dtypes))
    return torch.float32


def _scatter(flat: torch.Tensor, params: List[torch.Tensor]) -> None:
    offset = 0
    with torch.no_grad():
        for p in params:
            n = p.numel()
            p.copy_(flat[offset : offset + n].view_as(p))
            offset += n


def broadcast_parameters(model: Parameters, agent: Agent, root: int = 0) -> None:
    """Copies rank ``root``'s parameters into every rank's (one broadcast of
    the concatenated parameters: 16-bit when they all are bfloat16 or all
    float16, float32 otherwise). Call once before training so that every rank
    starts from the same model. Raises PeerFailure, TimeoutError."""
    params = _tensors(model)
    flat = _flat_copy(params, _wire_dtype(params))
    agent.broadcast(flat, root)
    _scatter(flat, params)


def average_parameters(model: Parameters, agent: Agent) -> None:
    """Replaces every rank's parameters by their average over all ranks
    (one allreduce of the concatenated parameters: 16-bit when they all are
    bfloat16 or all float16, reduced in float32 and rounded once per hop;
    float32 otherwise), e.g. at the end of a gossip run. Raises PeerFailure,
    TimeoutError."""
    params = _tensors(model)
    flat = _flat_copy(params, _wire_dtype(params))
    agent.allreduce(flat, op="average")
    _scatter(flat, params)


def consensus_distance(model: Parameters, agent: Agent) -> float:
    """The mean over ranks of ``||x_i - x_avg||^2``, where ``x_i`` is rank
    i's concatenated parameters and ``x_avg`` their average (0 when all ranks
    hold the same model). Collective; the same value on every rank. Costs two
    allreduces (4 P bytes and 8 bytes)."""
    params = _tensors(model)
    mine = _flat_copy(params)
    avg = mine.clone()
    agent.allreduce(avg.numpy(), op="average")
    d = torch.tensor([float(((mine.double() - avg.double()) ** 2).sum())], dtype=torch.float64)
    agent.allreduce(d.numpy(), op="average")
    return float(d[0])
