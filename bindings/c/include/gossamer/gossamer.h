/* Gossamer's C ABI (C11, usable from C++): an agent of a decentralized
 * training job behind an opaque handle, its collectives on the caller's
 * memory, and the configured training algorithm in its communication-only
 * form, for languages that bind C (Swift, Kotlin, Rust, Go, Python's ctypes).
 *
 * Library: libgossamer_c (link -lgossamer_c); it exports only gossamer_*
 * symbols. Every call returns a gossamer_status; GOSSAMER_OK is 0. No C++
 * exception crosses this boundary: a failed call returns the error's kind
 * and leaves its details (message, peer, file, line, key) readable on the
 * calling thread until that thread's next failed call
 * (gossamer_last_error_*). A NULL handle or pointer argument is
 * GOSSAMER_E_INVALID_ARGUMENT (where a call takes NULL with a count or
 * capacity of 0, it says so), and so is a handle that was closed or never
 * made. A count of elements whose size in bytes exceeds PTRDIFF_MAX is
 * GOSSAMER_E_INVALID_ARGUMENT too.
 *
 * Threads: an agent takes one call at a time. A call made while another
 * thread's call runs on the same agent is refused, not run:
 * GOSSAMER_E_BUSY, whose message names both calls ("... while
 * gossamer_step runs on this agent on another thread ..."), and nothing
 * changes (gossamer_make_optimizer and gossamer_recover would replace the
 * optimizer and communicator the running call uses). Excepted, callable
 * from any thread at any time: gossamer_agent_rank, gossamer_agent_world_size,
 * gossamer_metrics_poll, and gossamer_agent_close, which, while another
 * thread's call runs (a watchdog's close), closes the transport only: that
 * call returns GOSSAMER_E_CANCELLED from its wait (or its own status, if it
 * was not waiting), and the agent is freed once it returns. The
 * gossamer_last_error_* records are per thread. Different agents are
 * independent.
 *
 * The model: gossamer_step, gossamer_mix_parameters and gossamer_flush take
 * the model's parameters (`params`), and the agent keeps that address until
 * the next of them: a view change met in a later call (gossamer_recover,
 * gossamer_reduce_gradients) writes the survivors' model into it (a
 * replicated model such as allreduce_sgd's, or a rank that rejoined) or
 * sends from it (to a rank that rejoined). So pass the same buffer, the
 * model, to all three, and keep it valid (not freed, not moved: a Go or
 * numpy buffer must be pinned) until gossamer_agent_close; to save a copy
 * of the model, call gossamer_flush on the model and copy it afterwards. In
 * the communication-only form, call gossamer_flush(params) once after
 * gossamer_make_optimizer, before the first gossamer_reduce_gradients: a
 * view change before the agent has the model's address is
 * GOSSAMER_E_INTERNAL ("no model to ...: a view changed before the first
 * step").
 *
 *   gossamer_agent* a;
 *   if (gossamer_agent_create("job.yaml", 0, NULL, 0, rank, 0, "/shared/rv", &a) != GOSSAMER_OK)
 *     fprintf(stderr, "%s\n", gossamer_last_error_message());
 *   gossamer_allreduce(a, grads, n, GOSSAMER_FLOAT32, GOSSAMER_AVERAGE);
 *   gossamer_agent_close(a);
 *
 * The C++ side is gossamer::Session (sdk/include/gossamer/session.hpp) over
 * every built-in component; bindings/c/src/gossamer_c.cpp maps each call. */
#ifndef GOSSAMER_GOSSAMER_H
#define GOSSAMER_GOSSAMER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** The version of this header's ABI; gossamer_c_api_version() gives the
 *  library's. A program built against version V runs against a library
 *  whose version is V, which the library's soname carries
 *  (libgossamer_c.so.V). Version 2 added GOSSAMER_E_BUSY, which version 1
 *  reported as GOSSAMER_E_INVALID_ARGUMENT. */
#define GOSSAMER_C_API_VERSION 2

/* In C++ the enums below have int as their underlying type (in C it is the
 * compiler's, of the same size): a value outside an enum's names, which a C
 * caller may pass, is then a value of the type that the call refuses,
 * rather than undefined behaviour. */
#ifdef __cplusplus
#define GOSSAMER_ENUM_BASE : int
#else
#define GOSSAMER_ENUM_BASE
#endif

#if defined(__GNUC__)
#define GOSSAMER_C_EXPORT __attribute__((visibility("default")))
#else
#define GOSSAMER_C_EXPORT
#endif

/** What a call returns: 0 on success, else the kind of error. */
typedef enum gossamer_status GOSSAMER_ENUM_BASE {
  GOSSAMER_OK = 0,
  GOSSAMER_E_INVALID_ARGUMENT = 1, /**< a bad argument: NULL, a length or dtype the call cannot take */
  GOSSAMER_E_CONFIG = 2,           /**< a bad configuration: file, line and key are set */
  GOSSAMER_E_TIMEOUT = 3,          /**< a wait ran past its bound: transport.timeout_seconds
                                        (membership.agreement_seconds in gossamer_recover) */
  GOSSAMER_E_PEER_FAILURE = 4,     /**< a peer died or left: the peer is set */
  GOSSAMER_E_EXPELLED = 5,         /**< this rank was removed from the job's view */
  GOSSAMER_E_PROTOCOL = 6,         /**< a malformed frame from a peer: the peer is set */
  GOSSAMER_E_CANCELLED = 7,        /**< cancelled by a close */
  GOSSAMER_E_INTERNAL = 8,         /**< a bug in Gossamer: please report the message */
  GOSSAMER_E_ERROR = 9,            /**< any other failure (the message says what) */
  GOSSAMER_E_NO_MEMORY = 10,       /**< an allocation failed */
  GOSSAMER_E_BUSY = 11             /**< refused, not run: another thread's call runs on this agent */
} gossamer_status;

/** Element types of the collectives. */
typedef enum gossamer_dtype GOSSAMER_ENUM_BASE {
  GOSSAMER_FLOAT32 = 1, /**< float, 4 bytes */
  GOSSAMER_FLOAT64 = 2, /**< double, 8 bytes */
  GOSSAMER_FLOAT16 = 5, /**< IEEE 754 binary16 bits in a uint16_t, 2 bytes */
  GOSSAMER_BFLOAT16 = 6 /**< bfloat16 bits (a float's upper half) in a uint16_t, 2 bytes */
} gossamer_dtype;

/** Reductions of gossamer_allreduce. */
typedef enum gossamer_op GOSSAMER_ENUM_BASE {
  GOSSAMER_SUM = 0,
  GOSSAMER_AVERAGE = 1,
  GOSSAMER_MAX = 2,
  GOSSAMER_MIN = 3
} gossamer_op;

/** One rank's agent: its transport, communicator, optimizer and membership. */
typedef struct gossamer_agent gossamer_agent;

/** The library's ABI version (GOSSAMER_C_API_VERSION of the header it was built with). */
GOSSAMER_C_EXPORT int gossamer_c_api_version(void);
/** The library's version, "MAJOR.MINOR.PATCH" (static storage). */
GOSSAMER_C_EXPORT const char* gossamer_version(void);
/** A status's name, e.g. "GOSSAMER_E_PEER_FAILURE" (static storage; "unknown" for other values). */
GOSSAMER_C_EXPORT const char* gossamer_status_name(gossamer_status status);

/** Creates rank `rank`'s agent and connects it to the job: blocks until
 *  every rank has joined the rendezvous (bounded by
 *  transport.timeout_seconds).
 *  @param config a YAML file's path, or YAML text when `config_is_text` is nonzero.
 *  @param overrides `n_overrides` strings "key=value" applied after the YAML (may be NULL when 0).
 *  @param rank this process's rank, in [0, world size).
 *  @param world_size ranks in the job; 0 keeps the config's world_size.
 *  @param rendezvous "tcp://HOST:PORT" (rank 0 serves there, until its process exits) or a
 *         directory every rank sees. Agents made one after another on one rendezvous:
 *         each rank's n-th agent (counted in its process) meets the other ranks' n-th.
 *         Another scheme, a tcp:// address without HOST:PORT or a PORT outside
 *         1..65535 is GOSSAMER_E_INVALID_ARGUMENT on every rank.
 *  @param out receives the agent; NULL on failure.
 *  With run.dir "auto" (the default) the run directory is made in
 *  results/runs/ below rank 0's working directory.
 *  @return GOSSAMER_E_CONFIG for a bad YAML (gossamer_last_error_file/line/key),
 *          GOSSAMER_E_INVALID_ARGUMENT, GOSSAMER_E_TIMEOUT, GOSSAMER_E_NO_MEMORY,
 *          GOSSAMER_E_ERROR (the rendezvous port is taken, a file cannot be written). */
GOSSAMER_C_EXPORT gossamer_status gossamer_agent_create(const char* config, int config_is_text,
                                                        const char* const* overrides, size_t n_overrides,
                                                        int rank, int world_size, const char* rendezvous,
                                                        gossamer_agent** out);
/** gossamer_agent_create with the rank, world size and rendezvous a launcher
 *  set in the environment (torchrun, mpirun, mpiexec, srun, or RANK,
 *  WORLD_SIZE and GOSSAMER_RENDEZVOUS by hand).
 *  @return as gossamer_agent_create; GOSSAMER_E_INVALID_ARGUMENT when no launcher is found,
 *          or when a launcher's world of one rank names no rendezvous. */
GOSSAMER_C_EXPORT gossamer_status gossamer_agent_from_env(const char* config, int config_is_text,
                                                          const char* const* overrides, size_t n_overrides,
                                                          gossamer_agent** out);
/** Closes the agent (ends its metrics, closes its transport: it may wait up to
 *  transport.linger_seconds for messages still queued) and frees it. NULL is
 *  a no-op; the handle is never given to another agent, and calls made with
 *  it from here on are GOSSAMER_E_INVALID_ARGUMENT. May be called from
 *  another thread while a call runs on the agent (a watchdog's): it then
 *  closes the transport only, which makes that call return
 *  GOSSAMER_E_CANCELLED from any wait; the agent's metrics end and it is
 *  freed when that call returns.
 *  @return GOSSAMER_OK, the close's error (the agent is freed either way), or
 *          GOSSAMER_E_INVALID_ARGUMENT for a handle closed already. */
GOSSAMER_C_EXPORT gossamer_status gossamer_agent_close(gossamer_agent* agent);

/** This agent's rank, in [0, world size); callable from any thread, also while
 *  another call runs. @return GOSSAMER_E_INVALID_ARGUMENT for a NULL argument. */
GOSSAMER_C_EXPORT gossamer_status gossamer_agent_rank(const gossamer_agent* agent, int* rank);
/** The job's world size (ranks; the config's world_size when gossamer_agent_create
 *  was given 0); callable from any thread, also while another call runs.
 *  @return GOSSAMER_E_INVALID_ARGUMENT for a NULL argument. */
GOSSAMER_C_EXPORT gossamer_status gossamer_agent_world_size(const gossamer_agent* agent, int* world_size);

/** Allreduce of `count` elements of `dtype` at `data`, in place, over every
 *  rank (the configured collectives.allreduce algorithm). Collective: every
 *  rank calls it with the same count, dtype and op. A different count is
 *  GOSSAMER_E_PROTOCOL on the ranks that see it; the dtype and op are not
 *  sent, so ranks that differ only in those get the wrong sums (as with MPI).
 *  `data` must be host (CPU-addressable) memory: a device pointer (CUDA,
 *  ...) is not supported. It may be NULL when `count` is 0.
 *  @return GOSSAMER_E_INVALID_ARGUMENT (NULL data, a dtype or op outside its
 *          enum, a count past PTRDIFF_MAX bytes), GOSSAMER_E_PEER_FAILURE on
 *          every rank, naming the peer (-1 on a rank whose view the membership
 *          service revoked first: call gossamer_recover), GOSSAMER_E_PROTOCOL,
 *          GOSSAMER_E_TIMEOUT, GOSSAMER_E_CANCELLED, GOSSAMER_E_BUSY
 *          (another thread's call runs on the agent: see "Threads" above). */
GOSSAMER_C_EXPORT gossamer_status gossamer_allreduce(gossamer_agent* agent, void* data, size_t count,
                                                     gossamer_dtype dtype, gossamer_op op);
/** Broadcast of `count` elements of `dtype` at `data` from the global rank
 *  `root` (as gossamer_agent_rank numbers ranks), in place, over the view in
 *  force. Collective: every member gives the same count, dtype and root.
 *  `data`: host memory, as gossamer_allreduce's.
 *  @return as gossamer_allreduce; GOSSAMER_E_INVALID_ARGUMENT for a root
 *          that is not a member of the view in force (outside [0, world
 *          size), or a rank the membership service removed: see
 *          gossamer_view), on every member alike. */
GOSSAMER_C_EXPORT gossamer_status gossamer_broadcast(gossamer_agent* agent, void* data, size_t count,
                                                     gossamer_dtype dtype, int root);
/** Returns once every rank has entered the barrier. Collective.
 *  @return GOSSAMER_E_PEER_FAILURE, GOSSAMER_E_TIMEOUT, GOSSAMER_E_CANCELLED,
 *          GOSSAMER_E_BUSY. */
GOSSAMER_C_EXPORT gossamer_status gossamer_barrier(gossamer_agent* agent);

/** Builds the configured algorithm (algorithm.name) for a model whose
 *  tensors have `tensor_sizes[0..n_tensors)` float32 elements, flattened in
 *  that order; it replaces an earlier one. Collective for some algorithms
 *  (hierarchical splits the ranks into groups): call it on every rank. A
 *  call refused by its argument checks (the GOSSAMER_E_INVALID_ARGUMENT
 *  cases below, and a handle that is not a live agent), which run before
 *  anything changes, leaves an earlier optimizer in place; any later
 *  failure leaves the agent with no optimizer (the earlier one is gone):
 *  call it again before gossamer_step.
 *  @return GOSSAMER_E_INVALID_ARGUMENT for no sizes, a size of 0, sizes
 *          adding up past PTRDIFF_MAX bytes; GOSSAMER_E_BUSY while another
 *          thread's call runs on the agent (see "Threads" above: refused,
 *          the earlier optimizer kept); GOSSAMER_E_CONFIG for an algorithm setting
 *          that the algorithm refuses when it is built (the key is set,
 *          e.g. algorithm.mode overlap with d2); GOSSAMER_E_NO_MEMORY;
 *          GOSSAMER_E_PEER_FAILURE, GOSSAMER_E_TIMEOUT. */
GOSSAMER_C_EXPORT gossamer_status gossamer_make_optimizer(gossamer_agent* agent, const size_t* tensor_sizes,
                                                          size_t n_tensors);
/** One training step of the algorithm with its own local SGD
 *  (training.learning_rate, momentum, weight_decay): `params` (count
 *  float32, updated in place; the model, whose address the agent keeps: see
 *  "The model" above) from this rank's gradient `grads` (count float32).
 *  Both are host (CPU-addressable) memory; device pointers are not supported.
 *  A peer that fails is recovered from inside the step (membership.enabled).
 *  @return GOSSAMER_E_INVALID_ARGUMENT before gossamer_make_optimizer, for a
 *          count other than the sum of its sizes, or NULL arrays;
 *          GOSSAMER_E_BUSY while another thread's call runs on the agent;
 *          GOSSAMER_E_PEER_FAILURE (without the membership service),
 *          GOSSAMER_E_EXPELLED, GOSSAMER_E_TIMEOUT, GOSSAMER_E_CANCELLED. */
GOSSAMER_C_EXPORT gossamer_status gossamer_step(gossamer_agent* agent, float* params, const float* grads,
                                                size_t count);
/** Communication-only form, before a local step made by the caller: averages
 *  `grads` (count float32 in host memory, in place) for allreduce-style
 *  algorithms; gossip algorithms leave it (gradient tracking replaces it with
 *  its tracker). Returns as gossamer_step. */
GOSSAMER_C_EXPORT gossamer_status gossamer_reduce_gradients(gossamer_agent* agent, float* grads,
                                                            size_t count);
/** After gossamer_reduce_gradients: `*skips` is 1 when that call left this
 *  step out (membership.enabled: a view change inside it found this rank
 *  behind the survivors, or rejoining; it takes their step count and, for a
 *  replicated model such as allreduce_sgd's, their model), else 0. Make no
 *  local step when it is 1, then call gossamer_mix_parameters, which
 *  exchanges nothing.
 *  @return GOSSAMER_E_INVALID_ARGUMENT before gossamer_make_optimizer or for
 *          a NULL `skips`; GOSSAMER_E_BUSY. */
GOSSAMER_C_EXPORT gossamer_status gossamer_skips_local_step(gossamer_agent* agent, int* skips);
/** Communication-only form, after the caller's local step: mixes `params`
 *  (count float32 in host memory, in place; the model, whose address the
 *  agent keeps: see "The model" above) with the peers' for gossip
 *  algorithms, and counts the step. Returns as gossamer_step. */
GOSSAMER_C_EXPORT gossamer_status gossamer_mix_parameters(gossamer_agent* agent, float* params, size_t count);
/** Completes communication still in flight into `params` (count float32 in
 *  host memory; the model, whose address the agent keeps: see "The model"
 *  above); call before evaluating or saving the model.
 *  gossamer_reduce_gradients, gossamer_mix_parameters and this return as
 *  gossamer_step does. */
GOSSAMER_C_EXPORT gossamer_status gossamer_flush(gossamer_agent* agent, float* params, size_t count);
/** Steps the optimizer has taken.
 *  @return GOSSAMER_E_INVALID_ARGUMENT before gossamer_make_optimizer; GOSSAMER_E_BUSY. */
GOSSAMER_C_EXPORT gossamer_status gossamer_steps(gossamer_agent* agent, uint64_t* steps);

/** The view in force: its number (0 for the job's first, +1 or more per
 *  change) and its members' global ranks, ascending. Writes at most
 *  `capacity` ranks to `members` (may be NULL when 0) and their count to
 *  `*count`; GOSSAMER_E_INVALID_ARGUMENT when they do not fit (`*count` set);
 *  GOSSAMER_E_BUSY. */
GOSSAMER_C_EXPORT gossamer_status gossamer_view(gossamer_agent* agent, uint64_t* number, int* members,
                                                size_t capacity, size_t* count);
/** After GOSSAMER_E_PEER_FAILURE from a collective of the caller's own (with
 *  membership.enabled, the default): agrees with the survivors on the next
 *  view and rebuilds the communicator, topology and optimizer over it
 *  (every survivor calls it); then repeat the collective. gossamer_step does
 *  this by itself. Called with no failure, it still revokes the view and
 *  starts an agreement, which every rank must join (else it times out).
 *  @return GOSSAMER_E_INVALID_ARGUMENT without the membership service,
 *          GOSSAMER_E_BUSY while another thread's call runs on the agent
 *          (refused: it would replace the communicator and optimizer that
 *          call uses),
 *          GOSSAMER_E_EXPELLED if the survivors removed this rank,
 *          GOSSAMER_E_TIMEOUT, GOSSAMER_E_PEER_FAILURE (another peer failed: call it again). */
GOSSAMER_C_EXPORT gossamer_status gossamer_recover(gossamer_agent* agent);
/** Takes the oldest metrics record not yet taken (one JSON object, no
 *  newline; run.metrics, the default) into `buffer` with a terminating NUL,
 *  `*length` its bytes without the NUL; `*length` 0 when none is queued.
 *  Records queue from the agent's creation (at most 65,536; beyond that the
 *  oldest are dropped). When `capacity` is too small the record stays queued,
 *  `*length` is its size and the call returns GOSSAMER_E_INVALID_ARGUMENT.
 *  Callable from any thread, also while another call runs on the agent. */
GOSSAMER_C_EXPORT gossamer_status gossamer_metrics_poll(gossamer_agent* agent, char* buffer, size_t capacity,
                                                        size_t* length);

/** The status of this thread's last failed call (GOSSAMER_OK before any). */
GOSSAMER_C_EXPORT gossamer_status gossamer_last_error(void);
/** Its message ("" before any); valid until this thread's next failed call. */
GOSSAMER_C_EXPORT const char* gossamer_last_error_message(void);
/** The peer it names (GOSSAMER_E_PEER_FAILURE, GOSSAMER_E_PROTOCOL), else -1. */
GOSSAMER_C_EXPORT int gossamer_last_error_peer(void);
/** GOSSAMER_E_CONFIG: where the bad setting came from: the YAML file's
 *  path, "<config>" for YAML text, "override 'KEY=VALUE'" for an override
 *  ("" when none). */
GOSSAMER_C_EXPORT const char* gossamer_last_error_file(void);
/** GOSSAMER_E_CONFIG: the line in that file (0 when unknown). */
GOSSAMER_C_EXPORT int gossamer_last_error_line(void);
/** GOSSAMER_E_CONFIG: the dotted key, e.g. "transport.kind" ("" when none). */
GOSSAMER_C_EXPORT const char* gossamer_last_error_key(void);

#ifdef __cplusplus
}
#endif

#endif /* GOSSAMER_GOSSAMER_H */
