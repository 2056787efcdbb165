"""gossamer._staging: the pipeline that carries collectives on non-CPU
tensors through host slots, driven up to the device boundary by a DeviceOps
whose copies happen only when they are waited on (as asynchronous device
copies would), over CPU tensors."""

import pytest
import torch

from gossamer import _staging


class LazyOps(_staging.DeviceOps):
    """Copies run when their event is waited on; every call is logged."""

    def __init__(self):
        self.log = []
        self.slots = []

    def host_buffer(self, numel, dtype):
        t = torch.full((numel,), float("nan"), dtype=dtype)
        self.slots.append(t)
        return t

    def _event(self, kind, dst, src):
        done = []

        def run():
            if not done:
                dst.copy_(src)
                done.append(True)
                self.log.append(("done", kind, int(src.numel())))

        self.log.append((kind, int(src.numel())))
        return run

    def to_host(self, dst, src):
        return self._event("down", dst, src)

    def to_device(self, dst, src):
        return self._event("up", dst, src)

    def wait(self, event):
        event()


def run(n, chunk_bytes, dtype=torch.float32):
    ops = LazyOps()
    t = torch.arange(n, dtype=dtype)
    want = t * 2
    order = []

    def start(host):
        order.append(("start", host.numel()))
        host.mul_(2)  # the collective, on the host chunk
        return host

    def finish(host):
        order.append(("finish", host.numel()))
        ops.log.append(("finish",))

    _staging.staged(t, start, finish, chunk_bytes=chunk_bytes, ops=ops)
    return t, want, ops


@pytest.mark.parametrize("n,chunk_bytes", [(1, 4), (10, 16), (1000, 64), (1001, 64), (7, 1 << 20)])
def test_every_element_goes_down_through_the_collective_and_back(n, chunk_bytes):
    t, want, ops = run(n, chunk_bytes)
    assert torch.equal(t, want)
    parts = _staging.chunks(n, 4, chunk_bytes)
    assert len(ops.slots) == min(3, len(parts))
    assert sum(1 for e in ops.log if e[0] == "up") == len(parts)


def test_the_next_chunk_comes_down_while_one_is_on_the_wire():
    t, want, ops = run(1000, 64)  # 63 chunks of 16 elements, and one of 8
    assert torch.equal(t, want)
    kinds = [e[0] for e in ops.log if e[0] in ("down", "up", "finish")]
    # Chunk k+1's copy down is issued before chunk k's collective is waited on,
    # and chunk k's copy back right after it.
    assert kinds[:4] == ["down", "down", "finish", "up"]
    assert kinds.count("down") == kinds.count("up") == kinds.count("finish") == 63


def test_16_bit_and_64_bit_tensors_and_bad_arguments():
    for dtype in (torch.bfloat16, torch.float16, torch.float64):
        t, want, _ = run(300, 100, dtype)
        assert t.dtype == dtype and torch.equal(t, want)
    with pytest.raises(ValueError, match="chunk_bytes"):
        _staging.staged(torch.zeros(4), lambda h: h, lambda h: None, chunk_bytes=0, ops=LazyOps())
    with pytest.raises(ValueError, match="contiguous"):
        _staging.staged(torch.zeros(4, 4).t(), lambda h: h, lambda h: None, ops=LazyOps())


def test_a_failed_collective_waits_for_the_copies_under_way():
    ops = LazyOps()
    t = torch.arange(100, dtype=torch.float32)

    def finish(host):
        raise RuntimeError("peer 1 failed")

    with pytest.raises(RuntimeError, match="peer 1 failed"):
        _staging.staged(t, lambda h: h, finish, chunk_bytes=40, ops=ops)
    # The copy of chunk 1, issued before the failure, was completed.
    assert ("done", "down", 10) in ops.log and sum(1 for e in ops.log if e[:2] == ("done", "down")) == 2


def test_a_parameter_and_an_inference_tensor_are_written_back_like_any_tensor():
    # A model's parameter (a leaf that requires grad) and a tensor made in
    # inference mode take the copies back, as the CPU path's do; the first
    # chunk's collective used to run before the copy back refused them.
    for make in (lambda: torch.nn.Parameter(torch.arange(300, dtype=torch.float32)), None):
        if make is None:
            with torch.inference_mode():
                t = torch.arange(300, dtype=torch.float32)
        else:
            t = make()
        collectives = []

        def start(host):
            collectives.append(host.numel())
            host.mul_(2)
            return host

        _staging.staged(t, start, lambda h: None, chunk_bytes=400, ops=LazyOps())
        assert torch.equal(t.detach(), torch.arange(300, dtype=torch.float32) * 2)
        assert collectives == [100, 100, 100]
        if make is not None:
            assert t.requires_grad and t.grad_fn is None
