"""Gossamer through its C ABI alone, with Python's ctypes: a proof that a
language which binds C (Swift, Kotlin, Rust, Go, ...) needs nothing but
gossamer/gossamer.h and libgossamer_c.

    from gossamer_ctypes import CAgent
    with CAgent("job.yaml", rank=r, rendezvous="/shared/rv") as agent:
        agent.make_optimizer([784 * 128, 128, 128 * 10, 10])
        agent.step(params, grads)          # float32 numpy arrays, params in place

The library is found at $GOSSAMER_C_LIBRARY, else as "libgossamer_c.so.2"
(the soname of C API version 2, the one this module speaks) on the
loader's path; library() declares every entry point of
gossamer/gossamer.h. Every failed call raises GossamerCError with the C
status's name, message, peer, file, line and key (gossamer_last_error_*).
An integer that the C parameter's type cannot hold (an int outside
[-2**31, 2**31), a size_t outside [0, 2**64)) raises ValueError before any
C call, instead of being truncated by ctypes.
The full Python package (bindings/python, gossamer) is the one to use from
Python; this module exists to test the C ABI as a foreign language sees it.
"""
import ctypes
import json
import numbers
import os

import numpy as np

__all__ = ["CAgent", "GossamerCError", "library"]

_STATUS_OK = 0
_STATUS_INVALID_ARGUMENT = 1  # refused before the optimizer took anything
_STATUS_BUSY = 11  # refused, not run: another thread's call runs on the agent
_API_VERSION = 2  # the GOSSAMER_C_API_VERSION this module speaks
_DTYPES = {np.dtype(np.float32): 1, np.dtype(np.float64): 2}
_OPS = {"sum": 0, "average": 1, "mean": 1, "max": 2, "min": 3}  # gossamer_op ("mean" is GOSSAMER_AVERAGE)
_LIB = None  # the loaded library, once library() has run
_INT_MIN, _INT_MAX = -(1 << (8 * ctypes.sizeof(ctypes.c_int) - 1)), (1 << (8 * ctypes.sizeof(ctypes.c_int) - 1)) - 1
_SIZE_LIMIT = 1 << (8 * ctypes.sizeof(ctypes.c_size_t))  # size_t holds [0, _SIZE_LIMIT)


class GossamerCError(RuntimeError):
    """A failed C call: `status` (e.g. "GOSSAMER_E_PEER_FAILURE"), `peer`
    (-1 if none), and for configuration errors `file`, `line` and `key`."""

    def __init__(self, status, message, peer, file, line, key):
        super().__init__(f"{status}: {message}")
        self.status, self.peer, self.file, self.line, self.key = status, peer, file, line, key


def library():
    """The loaded libgossamer_c with the signatures of every entry point of
    gossamer/gossamer.h declared (argtypes, restype; enums are C ints).
    Raises OSError, naming the library, when it cannot be loaded, exports
    no gossamer_c_api_version, or has another C API version than the one
    this module speaks (_API_VERSION)."""
    global _LIB
    if _LIB is not None:
        return _LIB
    path = os.environ.get("GOSSAMER_C_LIBRARY", f"libgossamer_c.so.{_API_VERSION}")
    lib = ctypes.CDLL(path)
    try:
        version = lib.gossamer_c_api_version
    except AttributeError:
        raise OSError(f"{path} exports no gossamer_c_api_version: not libgossamer_c") from None
    version.argtypes, version.restype = [], ctypes.c_int
    if version() != _API_VERSION:
        raise OSError(f"{path} has C API version {version()}; this module speaks version {_API_VERSION}")
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
        "gossamer_agent_from_env": ([ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_char_p), size_t,
                                     ctypes.POINTER(agent_p)], ctypes.c_int),
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
        "gossamer_view": ([agent_p, ctypes.POINTER(ctypes.c_uint64), ctypes.POINTER(ctypes.c_int), size_t,
                           ctypes.POINTER(size_t)], ctypes.c_int),
        "gossamer_recover": ([agent_p], ctypes.c_int),
        "gossamer_metrics_poll": ([agent_p, ctypes.POINTER(ctypes.c_char), size_t, ctypes.POINTER(size_t)],
                                  ctypes.c_int),
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
    """Returns for GOSSAMER_OK; raises GossamerCError with this thread's
    gossamer_last_error_* details for any other status (their bytes decoded
    as UTF-8, a byte that is not replaced by U+FFFD: a message may quote a
    YAML file's Latin-1 text)."""
    if status == _STATUS_OK:
        return
    lib = library()

    def text(raw):
        return raw.decode("utf-8", errors="replace")

    raise GossamerCError(text(lib.gossamer_status_name(status)), text(lib.gossamer_last_error_message()),
                         lib.gossamer_last_error_peer(), text(lib.gossamer_last_error_file()),
                         lib.gossamer_last_error_line(), text(lib.gossamer_last_error_key()))


def _integer(value, name):
    """`value` as a Python int. Raises TypeError for a bool or a non-integer."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    return int(value)


def _c_int(value, name):
    """`value` (an int) for a C int parameter. Raises TypeError (not an int;
    a bool), ValueError (outside [-2**31, 2**31), which ctypes would
    truncate)."""
    v = _integer(value, name)
    if not _INT_MIN <= v <= _INT_MAX:
        raise ValueError(f"{name} {v} is outside a C int's range [{_INT_MIN}, {_INT_MAX}]")
    return v


def _size_t(value, name):
    """`value` (an int) for a C size_t parameter. Raises TypeError (not an
    int; a bool), ValueError (negative, or 2**64 or more, which ctypes would
    wrap)."""
    v = _integer(value, name)
    if v < 0:
        raise ValueError(f"{name} is negative ({v})")
    if v >= _SIZE_LIMIT:
        raise ValueError(f"{name} {v} does not fit a size_t (at most {_SIZE_LIMIT - 1})")
    return v


def _c_string(value, name):
    """`value` (a str, or an os.PathLike for a path) as the bytes of a C
    string.

    Raises:
        TypeError: neither a str nor a path.
        ValueError: it contains a NUL character (C would read it up to there).
    """
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    if "\0" in value:
        raise ValueError(f"{name} contains a NUL character: {value!r}")
    return value.encode()


def _overrides(overrides):
    """(char* array, count) of "key=value" strings for the create calls.

    Raises:
        TypeError: a single str or bytes (which would be split into
            characters), or an element that is not a str.
        ValueError: an element with a NUL character.
    """
    if isinstance(overrides, (str, bytes)):
        raise TypeError(f"overrides must be a list of \"key=value\" strings, not a single {type(overrides).__name__}")
    encoded = [_c_string(o, f"overrides[{i}]") for i, o in enumerate(overrides)]
    return (ctypes.c_char_p * max(1, len(encoded)))(*encoded), len(encoded)


def _floats(array, name, size=None, written=True):
    """A float* to `array`'s elements: a C-contiguous float32 numpy array of
    `size` elements (any size when None), writable when the call writes into
    it (`written`).

    Raises:
        TypeError: not a numpy array, not float32, not C-contiguous.
        ValueError: not aligned to its 4-byte elements; another element
            count; read-only when `written`.
    """
    if not isinstance(array, np.ndarray) or array.dtype != np.float32 or not array.flags.c_contiguous:
        raise TypeError(f"{name} must be a C-contiguous float32 numpy array, not {_describe(array)}")
    if not array.flags.aligned:
        raise ValueError(f"{name} is not aligned to its 4-byte elements (a view at an odd byte offset): "
                         "pass a copy")
    if size is not None and array.size != size:
        raise ValueError(f"{name} has {array.size} elements, expected {size}")
    if written and not array.flags.writeable:
        raise ValueError(f"{name} is read-only: the call writes into it (pass a writable array)")
    return array.ctypes.data_as(ctypes.POINTER(ctypes.c_float))


def _describe(obj):
    """`obj` for an error message: its dtype and flags if an array, else its type."""
    if isinstance(obj, np.ndarray):
        order = "C-contiguous" if obj.flags.c_contiguous else "not C-contiguous"
        return f"a {order} {obj.dtype} array"
    return type(obj).__name__


class CAgent:
    """One rank's agent through gossamer_agent_create (a YAML file path, or
    YAML text with is_text=True; `overrides` "key=value" strings; `rank` and
    `world_size` ints, world_size 0 keeping the config's; `rendezvous` a
    path or "tcp://HOST:PORT"). Raises TypeError (rank or world_size not an
    int, overrides a single str, a string argument of another type),
    ValueError (outside a C int's range, a string with a NUL character),
    GossamerCError (GOSSAMER_E_CONFIG, _INVALID_ARGUMENT, _TIMEOUT, ...).
    An agent dropped without close() is closed when it is collected.

    The model: the agent keeps the address of the array given to step,
    mix_parameters and flush, and a view change in a later call writes the
    survivors' model into it or sends from it ("The model" in gossamer.h).
    Pass the model itself to all three; the agent holds a reference to the
    last one, so that it is not freed while the C side may use it."""

    def __init__(self, config, rank, rendezvous, world_size=0, overrides=(), is_text=False):
        lib = library()
        rank, world_size = _c_int(rank, "rank"), _c_int(world_size, "world_size")
        ov, n = _overrides(overrides)
        handle = ctypes.c_void_p()
        _check(lib.gossamer_agent_create(_c_string(config, "config"), 1 if is_text else 0, ov, n, rank,
                                         world_size, _c_string(rendezvous, "rendezvous"), ctypes.byref(handle)))
        self._h, self._size, self._model = handle, None, None

    @classmethod
    def from_env(cls, config, overrides=(), is_text=False):
        """An agent with the rank, world size and rendezvous a launcher set
        in the environment (gossamer_agent_from_env: torchrun, mpirun,
        mpiexec, srun, or RANK, WORLD_SIZE and GOSSAMER_RENDEZVOUS); config,
        overrides and is_text as CAgent's. Raises GossamerCError
        (GOSSAMER_E_INVALID_ARGUMENT when no launcher is found; as CAgent)."""
        lib = library()
        ov, n = _overrides(overrides)
        handle = ctypes.c_void_p()
        _check(lib.gossamer_agent_from_env(_c_string(config, "config"), 1 if is_text else 0, ov, n,
                                           ctypes.byref(handle)))
        agent = cls.__new__(cls)
        agent._h, agent._size, agent._model = handle, None, None
        return agent

    def close(self):
        """Closes the agent (idempotent)."""
        if self._h:
            h, self._h = self._h, None
            _check(library().gossamer_agent_close(h))

    def __del__(self):
        # An agent dropped without close() is closed here (its threads and
        # sockets would otherwise stay for the life of the process); an error
        # cannot be raised from a finalizer, and is dropped.
        try:
            if getattr(self, "_h", None):
                self.close()
        except Exception:  # pylint: disable=broad-except
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def rank(self):
        """This agent's rank (int, in [0, world_size); gossamer_agent_rank).
        Raises GossamerCError (GOSSAMER_E_INVALID_ARGUMENT once closed)."""
        out = ctypes.c_int()
        _check(library().gossamer_agent_rank(self._h, ctypes.byref(out)))
        return out.value

    @property
    def world_size(self):
        """The job's number of ranks (int; gossamer_agent_world_size). Raises
        GossamerCError (GOSSAMER_E_INVALID_ARGUMENT once closed)."""
        out = ctypes.c_int()
        _check(library().gossamer_agent_world_size(self._h, ctypes.byref(out)))
        return out.value

    @staticmethod
    def _buffer(data):
        """(address, element count, gossamer_dtype) of a writable, C-contiguous
        float32 or float64 numpy array (the collectives write into it).

        Raises:
            TypeError: not a numpy array, another dtype, not C-contiguous.
            ValueError: not aligned to its elements; read-only.
        """
        if not isinstance(data, np.ndarray) or data.dtype not in _DTYPES or not data.flags.c_contiguous:
            raise TypeError(f"data must be a C-contiguous float32 or float64 numpy array, not {_describe(data)}")
        if not data.flags.aligned:
            raise ValueError(f"data is not aligned to its {data.itemsize}-byte elements (a view at an odd byte "
                             "offset): pass a copy")
        if not data.flags.writeable:
            raise ValueError("data is read-only: the collective writes into it (pass a writable array)")
        return data.ctypes.data, data.size, _DTYPES[data.dtype]

    @staticmethod
    def _op(op):
        """The gossamer_op of `op`. Raises ValueError for another name."""
        if not isinstance(op, str) or op not in _OPS:
            raise ValueError(f"op must be one of {', '.join(map(repr, _OPS))}; got {op!r}")
        return _OPS[op]

    def _keep(self, params, status):
        """Holds `params` as the model once a call reached the optimizer (any
        status but GOSSAMER_E_INVALID_ARGUMENT and GOSSAMER_E_BUSY, which
        refuse before it takes the address), then raises for a failed
        `status` as _check."""
        if status not in (_STATUS_INVALID_ARGUMENT, _STATUS_BUSY):
            self._model = params
        _check(status)

    def _count(self, array):
        """The element count to pass: the optimizer's (make_optimizer), or the
        array's before any, which the C ABI then refuses with "no optimizer:
        call gossamer_make_optimizer first" (GOSSAMER_E_INVALID_ARGUMENT)."""
        return self._size if self._size is not None else array.size

    def allreduce(self, data, op="average"):
        """Reduces `data` (a writable, C-contiguous float32 or float64 numpy
        array in host memory, any shape) over every rank, in place
        (gossamer_allreduce). `op`: "average" (or "mean"), "sum", "max",
        "min". Raises TypeError/ValueError for a bad array or op,
        GossamerCError (GOSSAMER_E_PEER_FAILURE, _TIMEOUT, _PROTOCOL, _BUSY
        while another thread's call runs on the agent, ...)."""
        code = self._op(op)
        _check(library().gossamer_allreduce(self._h, *self._buffer(data), code))

    def broadcast(self, data, root=0):
        """Copies global rank `root`'s `data` (as allreduce's) into every
        member's of the view in force, in place (gossamer_broadcast). Raises
        as allreduce; GossamerCError (GOSSAMER_E_INVALID_ARGUMENT) for a root
        that is not a member of the view."""
        root = _c_int(root, "root")
        _check(library().gossamer_broadcast(self._h, *self._buffer(data), root))

    def barrier(self):
        """Returns once every rank has entered the barrier (gossamer_barrier).
        Raises GossamerCError (GOSSAMER_E_PEER_FAILURE, _TIMEOUT, _CANCELLED,
        _BUSY while another thread's call runs on the agent)."""
        _check(library().gossamer_barrier(self._h))

    def make_optimizer(self, tensor_sizes):
        """The configured algorithm for tensors of these element counts (ints
        > 0; the model is one flat float32 vector of their sum, in order;
        gossamer_make_optimizer). Raises TypeError (not ints; bools
        refused), ValueError (a negative size, or one of 2**64 or more),
        GossamerCError (GOSSAMER_E_INVALID_ARGUMENT for no sizes, a 0, too
        large a total; GOSSAMER_E_BUSY while another thread's call runs on
        the agent; GOSSAMER_E_CONFIG, _PEER_FAILURE, _TIMEOUT)."""
        sizes = [_size_t(s, f"tensor_sizes[{i}]") for i, s in enumerate(tensor_sizes)]
        array = (ctypes.c_size_t * max(1, len(sizes)))(*sizes)
        _check(library().gossamer_make_optimizer(self._h, array, len(sizes)))
        self._size = int(sum(sizes))

    def step(self, params, grads):
        """One step of the algorithm with its own SGD (gossamer_step):
        `params` (float32, the optimizer's size) updated in place from
        `grads` (float32, same size, only read). Raises TypeError/ValueError
        for a bad array (params read-only), GossamerCError
        (GOSSAMER_E_INVALID_ARGUMENT before make_optimizer; GOSSAMER_E_BUSY
        while another thread's call runs on the agent, the model kept; ...)."""
        p = _floats(params, "params", self._size)
        g = _floats(grads, "grads", self._size, written=False)
        self._keep(params, library().gossamer_step(self._h, p, g, self._count(params)))

    def reduce_gradients(self, grads):
        """Communication-only form, before a local step made by the caller
        (gossamer_reduce_gradients): averages `grads` (a writable float32
        array of the optimizer's size) in place for allreduce-style
        algorithms. Raises as step."""
        g = _floats(grads, "grads", self._size)
        _check(library().gossamer_reduce_gradients(self._h, g, self._count(grads)))

    @property
    def skips_local_step(self):
        """True after a reduce_gradients() that left this step out (a view change found this rank
        behind): make no local step, then call mix_parameters(), which exchanges nothing."""
        out = ctypes.c_int()
        _check(library().gossamer_skips_local_step(self._h, ctypes.byref(out)))
        return bool(out.value)

    def mix_parameters(self, params):
        """Communication-only form, after the caller's local step
        (gossamer_mix_parameters): mixes `params` (a writable float32 array
        of the optimizer's size) in place with the peers' for gossip
        algorithms, and counts the step. Raises as step."""
        p = _floats(params, "params", self._size)
        self._keep(params, library().gossamer_mix_parameters(self._h, p, self._count(params)))

    def flush(self, params):
        """Completes communication still in flight into `params` (a writable
        float32 array of the optimizer's size; gossamer_flush); call before
        evaluating or saving the model. Raises as step."""
        p = _floats(params, "params", self._size)
        self._keep(params, library().gossamer_flush(self._h, p, self._count(params)))

    @property
    def steps(self):
        """Steps the optimizer has taken (int; gossamer_steps). Raises
        GossamerCError (GOSSAMER_E_INVALID_ARGUMENT before make_optimizer,
        GOSSAMER_E_BUSY)."""
        out = ctypes.c_uint64()
        _check(library().gossamer_steps(self._h, ctypes.byref(out)))
        return out.value

    @property
    def view(self):
        """The view in force (gossamer_view): (number, members), number an
        int (0 for the job's first view, +1 or more per change) and members
        a list of the members' global ranks (ints, ascending). Raises
        GossamerCError (GOSSAMER_E_INVALID_ARGUMENT once closed,
        GOSSAMER_E_BUSY)."""
        lib = library()
        number, count = ctypes.c_uint64(), ctypes.c_size_t()
        capacity = max(1, self.world_size)
        while True:
            members = (ctypes.c_int * capacity)()
            status = lib.gossamer_view(self._h, ctypes.byref(number), members, capacity, ctypes.byref(count))
            if status == _STATUS_OK or count.value <= capacity:
                _check(status)
                return number.value, list(members[:count.value])
            capacity = count.value  # more members than the world size (membership.max_world_size)

    def recover(self):
        """After GOSSAMER_E_PEER_FAILURE from a collective of the caller's:
        agrees with the survivors on the next view and rebuilds the
        communicator and optimizer over it (gossamer_recover; every survivor
        calls it); then repeat the collective. Raises GossamerCError
        (GOSSAMER_E_INVALID_ARGUMENT without the membership service,
        GOSSAMER_E_BUSY, _EXPELLED, _TIMEOUT, _PEER_FAILURE)."""
        _check(library().gossamer_recover(self._h))

    def metrics(self):
        """The metrics records queued since the last call, oldest first
        (gossamer_metrics_poll until none is left): a list of dicts, one per
        JSON record (run.metrics on). Raises GossamerCError
        (GOSSAMER_E_INVALID_ARGUMENT once closed)."""
        lib = library()
        buffer, length, records = ctypes.create_string_buffer(4096), ctypes.c_size_t(), []
        while True:
            status = lib.gossamer_metrics_poll(self._h, buffer, len(buffer), ctypes.byref(length))
            if status != _STATUS_OK and length.value + 1 > len(buffer):
                buffer = ctypes.create_string_buffer(length.value + 1)  # the record stays queued: again
                continue
            _check(status)
            if length.value == 0:
                return records
            records.append(json.loads(buffer.raw[:length.value].decode("utf-8", errors="replace")))
