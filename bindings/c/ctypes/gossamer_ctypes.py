"""Gossamer through its C ABI alone, with Python's ctypes: a proof that a
language which binds C (Swift, Kotlin, Rust, Go, ...) needs nothing but
gossamer/gossamer.h and libgossamer_c.

    from gossamer_ctypes import CAgent
    with CAgent("job.yaml", rank=r, rendezvous="/shared/rv") as agent:
        agent.make_optimizer([784 * 128, 128, 128 * 10, 10])
        agent.step(params, grads)          # float32 numpy arrays, params in place

The library is found at $GOSSAMER_C_LIBRARY, else as "libgossamer_c.so.1"
on the loader's path. Every failed call raises GossamerCError with the C
status's name, message, peer, file, line and key (gossamer_last_error_*).
The full Python package (bindings/python, gossamer) is the one to use from
Python; this module exists to test the C ABI as a foreign language sees it.
"""
import ctypes
import os

import numpy as np

__all__ = ["CAgent", "GossamerCError", "library"]

_STATUS_OK = 0
_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2}
_OPS = {"sum": 0, "average": 1, "max": 2, "min": 3}
_LIB = None  # the loaded library, once library() has run


class GossamerCError(RuntimeError):
    """A failed C call: `status` (e.g. "GOSSAMER_E_PEER_FAILURE"), `peer`
    (-1 if none), and for configuration errors `file`, `line` and `key`."""

    def __init__(self, status, message, peer, file, line, key):
        super().__init__(f"{status}: {message}")
        self.status, self.peer, self.file, self.line, self.key = status, peer, file, line, key


def library():
    """The loaded libgossamer_c with its entry points' signatures declared."""
    global _LIB
    if _LIB is not None:
        return _LIB
    lib = ctypes.CDLL(os.environ.get("GOSSAMER_C_LIBRARY", "libgossamer_c.so.1"))
    agent_p = ctypes.c_void_p
    size_t = ctypes.c_size_t
    float_p = ctypes.POINTER(ctypes.c_float)
    sig = {
        "gossamer_c_api_version": ([], ctypes.c_int),
        "gossamer_version": ([], ctypes.c_char_p),
        "gossamer_status_name": ([ctypes.c_int], ctypes.c_char_p),
        "gossamer_agent_create": ([ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), size_t,
                                   ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.POINTER(agent_p)],
                                  ctypes.c_int),
        "gossamer_agent_close": ([agent_p], ctypes.c_int),
        "gossamer_agent_rank": ([agent_p, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        "gossamer_agent_world_size": ([agent_p, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        "gossamer_allreduce": ([agent_p, ctypes.c_void_p, size_t, ctypes.c_int, ctypes.c_int], ctypes.c_int),
        "gossamer_broadcast": ([agent_p, ctypes.c_void_p, size_t, ctypes.c_int, ctypes.c_int], ctypes.c_int),
        "gossamer_barrier": ([agent_p], ctypes.c_int),
        "gossamer_make_optimizer": ([agent_p, ctypes.POINTER(size_t), size_t], ctypes.c_int),
        "gossamer_step": ([agent_p, float_p, float_p, size_t], ctypes.c_int),
        "gossamer_reduce_gradients": ([agent_p, float_p, size_t], ctypes.c_int),
        "gossamer_skips_local_step": ([agent_p, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        "gossamer_mix_parameters": ([agent_p, float_p, size_t], ctypes.c_int),
        "gossamer_flush": ([agent_p, float_p, size_t], ctypes.c_int),
        "gossamer_steps": ([agent_p, ctypes.POINTER(ctypes.c_uint64)], ctypes.c_int),
        "gossamer_last_error": ([], ctypes.c_int),
        "gossamer_last_error_message": ([], ctypes.c_char_p),
        "gossamer_last_error_peer": ([], ctypes.c_int),
        "gossamer_last_error_file": ([], ctypes.c_char_p),
        "gossamer_last_error_line": ([], ctypes.c_int),
        "gossamer_last_error_key": ([], ctypes.c_char_p),
    }
    for name, (args, res) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, res
    _LIB = lib
    return lib


def _check(status):
    if status == _STATUS_OK:
        return
    lib = library()
    raise GossamerCError(lib.gossamer_status_name(status).decode(), lib.gossamer_last_error_message().decode(),
                         lib.gossamer_last_error_peer(), lib.gossamer_last_error_file().decode(),
                         lib.gossamer_last_error_line(), lib.gossamer_last_error_key().decode())


def _floats(array, name, size=None):
    if not isinstance(array, np.ndarray) or array.dtype != np.float32 or not array.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous float32 numpy array")
    if size is not None and array.size != size:
        raise ValueError(f"{name} has {array.size} elements, expected {size}")
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


class CAgent:
    """One rank's agent through gossamer_agent_create (a YAML file path, or
    YAML text with is_text=True; `overrides` "key=value" strings; world_size
    0 keeps the config's)."""

    def __init__(self, config, rank, rendezvous, world_size=0, overrides=(), is_text=False):
        lib = library()
        ov = (ctypes.c_char_p * max(1, len(overrides)))(*[o.encode() for o in overrides])
        handle = ctypes.c_void_p()
        _check(lib.gossamer_agent_create(config.encode(), int(is_text), ov, len(overrides), rank, world_size,
                                         os.fspath(rendezvous).encode(), ctypes.byref(handle)))
        self._h, self._size = handle, None

    def close(self):
        """Closes the agent (idempotent)."""
        if self._h:
            h, self._h = self._h, None
            _check(library().gossamer_agent_close(h))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def rank(self):
        out = ctypes.c_int()
        _check(library().gossamer_agent_rank(self._h, ctypes.byref(out)))
        return out.value

    @property
    def world_size(self):
        out = ctypes.c_int()
        _check(library().gossamer_agent_world_size(self._h, ctypes.byref(out)))
        return out.value

    @staticmethod
    def _buffer(data):
        """(address, element count, gossamer_dtype) of a C-contiguous float32 or float64 array."""
        if data.dtype not in _DTYPES or not data.flags.c_contiguous:
            raise TypeError("data must be a C-contiguous float32 or float64 numpy array")
        return data.ctypes.data, data.size, _DTYPES[data.dtype]

    def allreduce(self, data, op="average"):
        """In place on a float32 or float64 numpy array."""
        _check(library().gossamer_allreduce(self._h, *self._buffer(data), _OPS[op]))

    def broadcast(self, data, root=0):
        """In place on a float32 or float64 numpy array, from rank `root`."""
        _check(library().gossamer_broadcast(self._h, *self._buffer(data), root))

    def barrier(self):
        _check(library().gossamer_barrier(self._h))

    def make_optimizer(self, tensor_sizes):
        """The configured algorithm for tensors of these element counts (flat, in order)."""
        sizes = (ctypes.c_size_t * len(tensor_sizes))(*tensor_sizes)
        _check(library().gossamer_make_optimizer(self._h, sizes, len(tensor_sizes)))
        self._size = int(sum(tensor_sizes))

    def step(self, params, grads):
        """One step of the algorithm with its own SGD; `params` updated in place."""
        p, g = _floats(params, "params", self._size), _floats(grads, "grads", self._size)
        _check(library().gossamer_step(self._h, p, g, self._size))

    def reduce_gradients(self, grads):
        _check(library().gossamer_reduce_gradients(self._h, _floats(grads, "grads", self._size), self._size))

    @property
    def skips_local_step(self):
        """True after a reduce_gradients() that left this step out (a view change found this rank
        behind): make no local step, then call mix_parameters(), which exchanges nothing."""
        out = ctypes.c_int()
        _check(library().gossamer_skips_local_step(self._h, ctypes.byref(out)))
        return bool(out.value)

    def mix_parameters(self, params):
        _check(library().gossamer_mix_parameters(self._h, _floats(params, "params", self._size), self._size))

    def flush(self, params):
        _check(library().gossamer_flush(self._h, _floats(params, "params", self._size), self._size))

    @property
    def steps(self):
        out = ctypes.c_uint64()
        _check(library().gossamer_steps(self._h, ctypes.byref(out)))
        return out.value
