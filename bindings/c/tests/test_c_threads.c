/* One agent used from two threads, from strict C11 with POSIX threads: a
 * call made while another thread's call runs on the same agent is refused
 * with GOSSAMER_E_BUSY, never run against state the running
 * call uses (gossamer.h, "Threads").
 *
 * - A thread steps in a loop while another calls gossamer_make_optimizer
 *   again and again (and then closes the agent): every call returns OK or
 *   the refusal, none crashes.
 * - Deterministic: rank 0 of a 2-rank job (both agents in this process)
 *   waits in gossamer_barrier for rank 1; meanwhile every call that runs on
 *   rank 0's agent (gossamer_make_optimizer, _recover, _step, _allreduce,
 *   _broadcast, _reduce_gradients, _mix_parameters, _flush, _steps,
 *   _skips_local_step, _view) is refused, naming the barrier, while gossamer_agent_rank, _world_size and
 *   gossamer_metrics_poll answer. Then a close from the other thread makes
 *   the waiting barrier return GOSSAMER_E_CANCELLED.
 *
 * Every wait is bounded (a deadline, transport.timeout_seconds), none rests
 * on timing: the waiting call is found by polling until it refuses. Exit
 * status 0 when every check holds; each failed check is printed with its
 * line. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "c_checks.h"
#include "gossamer/gossamer.h"

/* The refusal of a call made while another thread's call runs. */
static int busy_refusal(gossamer_status s) {
  return s == GOSSAMER_E_BUSY && gossamer_last_error() == GOSSAMER_E_BUSY &&
         strstr(gossamer_last_error_message(), "on another thread") != NULL;
}

static double now_seconds(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

static void sleep_ms(long ms) {
  const struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

/* 512 KiB of parameters: buffers that large are mapped and unmapped, so
 * that a step on an optimizer freed under it would fault. */
enum { kParams = 1 << 17 };
static const size_t kTensors[2] = {kParams / 2, kParams / 2};

/* ---- a step loop against make_optimizer and a close ------------------------------------ */

typedef struct {
  gossamer_agent* agent;
  atomic_long ok;       /* the loop's statuses: OK (read by the other thread) */
  long refused;         /* ... and the refusal */
  gossamer_status last; /* the status that ended the loop (OK: its 120 s ran out) */
  char last_message[512];
} stepper;

/* Steps until a status other than OK or the refusal (the agent closed), for
 * 120 s at most. */
static void* step_loop(void* arg) {
  stepper* s = arg;
  static float params[kParams], grads[kParams];
  for (int i = 0; i < kParams; ++i) grads[i] = 1e-3f;
  const double deadline = now_seconds() + 120;
  for (long i = 0; i % 1000 != 0 || now_seconds() < deadline; ++i) {
    const gossamer_status st = gossamer_step(s->agent, params, grads, kParams);
    if (st == GOSSAMER_OK) {
      ++s->ok;
    } else if (busy_refusal(st)) {
      ++s->refused;
    } else {
      s->last = st;
      snprintf(s->last_message, sizeof s->last_message, "%s", gossamer_last_error_message());
      return NULL;
    }
  }
  s->last = GOSSAMER_OK;
  return NULL;
}

static void step_loop_against_make_optimizer(void) {
  char rendezvous[512];
  snprintf(rendezvous, sizeof rendezvous, "%s/rv-steps", scratch);
  const char* overrides[] = {"transport.kind=socket", "transport.host=127.0.0.1", "run.metrics=false"};
  gossamer_agent* a = NULL;
  CHECK(gossamer_agent_create("world_size: 1\nalgorithm:\n  name: allreduce_sgd\n", 1, overrides, 3, 0, 1,
                              rendezvous, &a) == GOSSAMER_OK);
  if (a == NULL) return;
  CHECK(gossamer_make_optimizer(a, kTensors, 2) == GOSSAMER_OK);
  stepper s = {a, 0, 0, GOSSAMER_OK, ""};
  atomic_init(&s.ok, 0);
  pthread_t t;
  if (pthread_create(&t, NULL, step_loop, &s) != 0) {
    perror("pthread_create");
    exit(2);
  }
  long made = 0, refused = 0, other = 0;
  /* 300 calls, and on until steps ran between optimizers made (60 s at most). */
  const double deadline = now_seconds() + 60;
  for (int i = 0; (i < 300 || atomic_load(&s.ok) == 0 || made == 0) && now_seconds() < deadline; ++i) {
    const gossamer_status st = gossamer_make_optimizer(a, kTensors, 2);
    if (st == GOSSAMER_OK)
      ++made;
    else if (busy_refusal(st))
      ++refused;
    else
      ++other;
    int n = 0;
    CHECK(gossamer_agent_world_size(a, &n) == GOSSAMER_OK && n == 1); /* any thread, any time */
  }
  CHECK(other == 0);
  CHECK(made > 0 && atomic_load(&s.ok) > 0); /* the two took turns, at least once */
  /* Closed while the loop runs: its next call finds the agent closed, or a
   * step in flight is cancelled. */
  CHECK(gossamer_agent_close(a) == GOSSAMER_OK);
  pthread_join(t, NULL);
  CHECK((s.last == GOSSAMER_E_INVALID_ARGUMENT &&
         strstr(s.last_message, "not a live gossamer_agent") != NULL) ||
        s.last == GOSSAMER_E_CANCELLED);
  fprintf(stderr, "steps: %ld ok, %ld refused, ended by %s: %s; make_optimizer: %ld made, %ld refused\n",
          atomic_load(&s.ok), s.refused, gossamer_status_name(s.last), s.last_message, made, refused);
  CHECK(gossamer_step(a, NULL, NULL, 0) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "not a live gossamer_agent") != NULL);
}

/* ---- a call waiting in a barrier ---------------------------------------------------------- */

typedef struct {
  const char* config;
  const char* rendezvous;
  int rank;
  gossamer_agent* agent;
} maker;

static void* make_agent(void* arg) {
  maker* m = arg;
  if (gossamer_agent_create(m->config, 1, NULL, 0, m->rank, 2, m->rendezvous, &m->agent) != GOSSAMER_OK)
    fprintf(stderr, "rank %d: %s\n", m->rank, gossamer_last_error_message());
  return NULL;
}

typedef struct {
  gossamer_agent* agent;
  double deadline;
  gossamer_status status;
  atomic_int done;
} waiter;

/* gossamer_barrier on the agent, tried again while the main thread's probe
 * holds the agent (it is refused then), until the deadline. */
static void* wait_in_barrier(void* arg) {
  waiter* w = arg;
  gossamer_status s;
  do {
    s = gossamer_barrier(w->agent);
  } while (busy_refusal(s) && now_seconds() < w->deadline);
  w->status = s;
  atomic_store(&w->done, 1);
  return NULL;
}

/* Probes the agent with gossamer_view until the refusal says another
 * thread's call runs, or the waiter is done, or 60 s pass. Returns 1 once
 * refused: the waiter is then inside gossamer_barrier. */
static int until_busy(gossamer_agent* a, waiter* w) {
  uint64_t number = 0;
  int members[2];
  size_t count = 0;
  const double deadline = now_seconds() + 60;
  while (now_seconds() < deadline && !atomic_load(&w->done)) {
    const gossamer_status s = gossamer_view(a, &number, members, 2, &count);
    if (busy_refusal(s)) return strstr(gossamer_last_error_message(), "gossamer_barrier") != NULL;
    CHECK(s == GOSSAMER_OK);
    sleep_ms(1);
  }
  fprintf(stderr, "the barrier did not start within 60 s (or returned: %s)\n",
          atomic_load(&w->done) ? gossamer_status_name(w->status) : "no");
  return 0;
}

static void start_waiter(waiter* w, gossamer_agent* a, pthread_t* t) {
  w->agent = a;
  w->deadline = now_seconds() + 60;
  w->status = GOSSAMER_E_ERROR;
  atomic_store(&w->done, 0);
  if (pthread_create(t, NULL, wait_in_barrier, w) != 0) {
    perror("pthread_create");
    exit(2);
  }
}

static void calls_while_a_barrier_waits(void) {
  /* timeout_seconds 120: the barrier waits for rank 1 far longer than this test needs. */
  const char* config =
      "world_size: 2\ntransport:\n  kind: socket\n  host: 127.0.0.1\n  timeout_seconds: 120\n"
      "membership:\n  enabled: false\nalgorithm:\n  name: allreduce_sgd\nrun:\n  metrics: false\n";
  char rendezvous[512];
  snprintf(rendezvous, sizeof rendezvous, "%s/rv-barrier", scratch);
  maker makers[2] = {{config, rendezvous, 0, NULL}, {config, rendezvous, 1, NULL}};
  pthread_t threads[2];
  for (int r = 0; r < 2; ++r)
    if (pthread_create(&threads[r], NULL, make_agent, &makers[r]) != 0) {
      perror("pthread_create");
      exit(2);
    }
  for (int r = 0; r < 2; ++r) pthread_join(threads[r], NULL);
  gossamer_agent *a0 = makers[0].agent, *a1 = makers[1].agent;
  CHECK(a0 != NULL && a1 != NULL);
  if (a0 == NULL || a1 == NULL) {
    gossamer_agent_close(a0);
    gossamer_agent_close(a1);
    return;
  }

  /* Rank 0 waits in a barrier that rank 1 has not entered. */
  waiter w;
  pthread_t t;
  start_waiter(&w, a0, &t);
  const int busy = until_busy(a0, &w);
  CHECK(busy);
  if (busy) {
    const size_t tensors[1] = {4};
    float params[4] = {0, 0, 0, 0}, grads[4] = {1, 1, 1, 1};
    CHECK(busy_refusal(gossamer_make_optimizer(a0, tensors, 1)));
    CHECK(strstr(gossamer_last_error_message(), "gossamer_make_optimizer while gossamer_barrier runs") !=
          NULL);
    CHECK(busy_refusal(gossamer_recover(a0)));
    CHECK(strstr(gossamer_last_error_message(), "gossamer_recover while gossamer_barrier runs") != NULL);
    CHECK(busy_refusal(gossamer_step(a0, params, grads, 4)));
    CHECK(busy_refusal(gossamer_allreduce(a0, params, 4, GOSSAMER_FLOAT32, GOSSAMER_SUM)));
    CHECK(busy_refusal(gossamer_broadcast(a0, params, 4, GOSSAMER_FLOAT32, 0)));
    CHECK(busy_refusal(gossamer_reduce_gradients(a0, grads, 4)));
    CHECK(busy_refusal(gossamer_mix_parameters(a0, params, 4)));
    CHECK(busy_refusal(gossamer_flush(a0, params, 4)));
    uint64_t taken = 0;
    CHECK(busy_refusal(gossamer_steps(a0, &taken)));
    int skips = -1;
    CHECK(busy_refusal(gossamer_skips_local_step(a0, &skips)));
    CHECK(params[0] == 0 && grads[0] == 1 && taken == 0 && skips == -1); /* nothing written */
    int n = -1;
    CHECK(gossamer_agent_rank(a0, &n) == GOSSAMER_OK && n == 0);
    CHECK(gossamer_agent_world_size(a0, &n) == GOSSAMER_OK && n == 2);
    char record[64];
    size_t length = 1;
    CHECK(gossamer_metrics_poll(a0, record, sizeof record, &length) == GOSSAMER_OK && length == 0);
    CHECK(!atomic_load(&w.done)); /* still waiting for rank 1 */
  }
  CHECK(gossamer_barrier(a1) == GOSSAMER_OK); /* releases rank 0's */
  pthread_join(t, NULL);
  CHECK(w.status == GOSSAMER_OK);
  /* Nothing was replaced: rank 0 has no optimizer; with membership off, recover says so. */
  uint64_t steps = 0;
  CHECK(gossamer_steps(a0, &steps) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "no optimizer") != NULL);
  CHECK(gossamer_recover(a0) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "on another thread") == NULL);

  /* A watchdog's close while rank 0 waits: the barrier is cancelled, at once. */
  start_waiter(&w, a0, &t);
  if (until_busy(a0, &w)) {
    const double closed_at = now_seconds();
    CHECK(gossamer_agent_close(a0) == GOSSAMER_OK);
    pthread_join(t, NULL);
    CHECK(w.status == GOSSAMER_E_CANCELLED);
    CHECK(now_seconds() - closed_at < 60);
  } else {
    CHECK(0);
    CHECK(gossamer_barrier(a1) == GOSSAMER_OK);
    pthread_join(t, NULL);
    gossamer_agent_close(a0);
  }
  int rank = -1;
  CHECK(gossamer_agent_rank(a0, &rank) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_close(a0) == GOSSAMER_E_INVALID_ARGUMENT);
  gossamer_agent_close(a1); /* its peer is gone: the close's status is not this test's */
}

int main(void) {
  if (make_scratch("gossamer-c-threads") != 0) return 2;
  step_loop_against_make_optimizer();
  calls_while_a_barrier_waits();
  return finish("gossamer C API threads");
}
