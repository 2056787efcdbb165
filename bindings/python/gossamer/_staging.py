"""Collectives on tensors that are not on the CPU: staged through host memory
in chunks (used by ``Agent.allreduce`` and ``Agent.broadcast``; the C++ core
never sees a device pointer).

Pipeline, for chunks of ``chunk_bytes`` (16 MiB) of the flat tensor and up
to three host slots (pinned memory where the device has it; one slot of the
tensor's size when it fits in one chunk)::

    chunk k:   D2H into slot k % 3  ->  collective on the slot  ->  H2D back

All three stages are in flight at once: the device-to-host copy of chunk k+1
is issued before chunk k's collective is waited on, and chunk k-1's copy back
runs meanwhile on the copy stream; a slot is reused only once its copy back
has finished. Copies run on a stream of their own, ordered after the work
already queued on the tensor's current stream (and the current stream waits
for the copies back before the call returns), so the caller sees an ordinary
in-place collective. The chunks are the same on every rank (they depend on
the element count alone), and each is one collective of the configured
algorithm: the bytes on the wire are those of the CPU call on the whole
tensor. A tensor of one chunk is one collective, with the bits of the CPU
call.

The chunk size is the one that cost least on the GPU machine of
scripts/device-check.sh (an NVIDIA H200, 4 ranks sharing it; 2026-12-04,
docs/python.md, "On a GPU"; two runs): a 64 MiB float32 allreduce took
1.01-1.04 times the CPU one in 16 MiB chunks, 1.15-1.19 times in one chunk of
64 MiB (nothing to overlap the copies with) and 1.63 times in 4 MiB chunks
(16 collectives alone took 1.55-1.59 times one).

``DeviceOps`` is the device boundary: ``CudaOps`` uses CUDA streams, events
and pinned memory; ``SyncOps`` copies synchronously for any other device.
Tests drive the pipeline with an instrumented ``DeviceOps`` over CPU tensors;
bench/device_checks.py runs it on a GPU.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

import torch

DEFAULT_CHUNK_BYTES = 16 * 1024 * 1024
SLOTS = 3


class DeviceOps:
    """Copies between a device tensor and host memory, and their completion."""

    def host_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        """A host (CPU) tensor of ``numel`` elements to stage through."""
        return torch.empty(numel, dtype=dtype)

    def begin(self, device_tensor: torch.Tensor) -> None:
        """Called once before the first copy (order after the caller's work)."""

    def to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        """Starts copying ``src`` (device) into ``dst`` (host); returns an event."""
        dst.copy_(src)
        return None

    def to_device(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        """Starts copying ``src`` (host) into ``dst`` (device); returns an event."""
        dst.copy_(src)
        return None

    def wait(self, event: Any) -> None:
        """Blocks the host until ``event``'s copy has finished."""

    def end(self) -> None:
        """Called once after the last copy back was issued."""


class SyncOps(DeviceOps):
    """Any device: synchronous copies (no overlap, always correct)."""


class CudaOps(DeviceOps):
    """CUDA: pinned slots, copies on a side stream, events to wait on."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def host_buffer(self, numel: int, dtype: torch.dtype) -> torch.Tensor:
        return torch.empty(numel, dtype=dtype, pin_memory=True)

    def begin(self, device_tensor: torch.Tensor) -> None:
        # The copies see what the caller's stream has queued on the tensor.
        self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def _copy(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        with torch.cuda.stream(self.stream):
            dst.copy_(src, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self.stream)
        return event

    def to_host(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        return self._copy(dst, src)

    def to_device(self, dst: torch.Tensor, src: torch.Tensor) -> Any:
        return self._copy(dst, src)

    def wait(self, event: Any) -> None:
        event.synchronize()

    def end(self) -> None:
        # The caller's stream runs after the copies back.
        torch.cuda.current_stream(self.device).wait_stream(self.stream)


_CUDA_OPS = {}  # device -> CudaOps: one copy stream per device, made once


def ops_for(tensor: torch.Tensor) -> DeviceOps:
    """The DeviceOps for ``tensor``'s device (CUDA: one per device, reused)."""
    if tensor.device.type == "cuda":
        ops = _CUDA_OPS.get(tensor.device)
        if ops is None:
            ops = _CUDA_OPS[tensor.device] = CudaOps(tensor.device)
        return ops
    return SyncOps()


def chunks(numel: int, element_bytes: int, chunk_bytes: int) -> List[range]:
    """[begin, end) element ranges of at most ``chunk_bytes`` each (>= 1 element)."""
    per = max(1, chunk_bytes // element_bytes)
    return [range(b, min(b + per, numel)) for b in range(0, numel, per)]


def staged(
    tensor: torch.Tensor,
    start: Callable[[torch.Tensor], Any],
    finish: Callable[[Any], None],
    chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ops: Optional[DeviceOps] = None,
) -> None:
    """Runs a collective on ``tensor`` (contiguous, any device) chunk by
    chunk through host slots: ``start(host_chunk)`` begins the collective on
    a host tensor and returns a handle, ``finish(handle)`` waits for it.

    Raises:
        ValueError: a tensor that is not contiguous, or chunk_bytes <= 0.
        Whatever ``start``/``finish`` raise (PeerFailure, TimeoutError); the
        chunks already started are waited for first.
    """
    if chunk_bytes <= 0:
        raise ValueError(f"chunk_bytes must be positive, got {chunk_bytes}")
    if not tensor.is_contiguous():
        raise ValueError(f"the tensor is not contiguous (shape {tuple(tensor.shape)}): pass tensor.contiguous()")
    ops = ops or ops_for(tensor)
    # Detached: the copies back write into the caller's storage, which may be
    # a leaf that requires grad (a model's parameter), as the CPU path does.
    flat = tensor.detach().view(-1)
    parts = chunks(flat.numel(), flat.element_size(), chunk_bytes)
    if not parts:
        return
    # An inference tensor takes in-place writes only inside inference mode.
    with torch.inference_mode(tensor.is_inference()):
        _run_chunks(flat, parts, start, finish, ops, tensor)


def _run_chunks(flat: Any, parts: List[range], start: Any, finish: Any, ops: "DeviceOps", tensor: Any) -> None:
    """staged's pipeline over the chunks ``parts`` of the detached ``flat``."""
    size = len(parts[0])
    slots = [ops.host_buffer(size, flat.dtype) for _ in range(min(SLOTS, len(parts)))]
    back: List[Any] = [None] * len(slots)  # the copy back last issued from each slot
    ops.begin(tensor)

    def down(k: int) -> Any:
        s = k % len(slots)
        if back[s] is not None:  # the slot's previous chunk is on its way back
            ops.wait(back[s])
            back[s] = None
        r = parts[k]
        return ops.to_host(slots[s][: len(r)], flat[r.start : r.stop])

    pending = down(0)
    try:
        for k, r in enumerate(parts):
            s = k % len(slots)
            ops.wait(pending)
            handle = start(slots[s][: len(r)])
            # Chunk k+1 comes down while chunk k is on the wire.
            pending = down(k + 1) if k + 1 < len(parts) else None
            finish(handle)
            back[s] = ops.to_device(flat[r.start : r.stop], slots[s][: len(r)])
    finally:
        if pending is not None:  # a chunk still coming down when a collective failed
            ops.wait(pending)
        for event in back:
            if event is not None:
                ops.wait(event)
        ops.end()
