/* Calls every entry point of gossamer/gossamer.h from strict C11, the error
 * paths included: NULL and out-of-range arguments, a YAML file with a
 * misspelt key (status, file, line and key), YAML text that does not parse,
 * and, in a 2-process job over the socket transport, a peer killed with
 * SIGKILL, which the survivor's next allreduce returns as
 * GOSSAMER_E_PEER_FAILURE naming the peer; in a 3-process job with the
 * membership service the survivors recover a view of two and go on; metrics
 * come by polling. Exit status 0 when every check
 * holds; each failed check is printed with its line. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "c_checks.h"
#include "gossamer/gossamer.h"

static const char* path_in(const char* name) {
  static char path[512];
  snprintf(path, sizeof path, "%s/%s", scratch, name);
  return path;
}

static void write_file(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  if (f == NULL) {
    perror(path);
    exit(2);
  }
  fputs(text, f);
  fclose(f);
}

/* Waits up to `seconds` for `child` and stores its status; after that,
 * kills it (SIGKILL) and reaps it. Returns `child` if it ended on its own,
 * -1 if it was killed or cannot be waited for. */
static pid_t wait_bounded(pid_t child, double seconds, int* status) {
  for (double waited = 0; waited < seconds; waited += 0.01) {
    const pid_t got = waitpid(child, status, WNOHANG);
    if (got == child) return child;
    if (got < 0) return -1;
    const struct timespec tick = {0, 10000000L};
    nanosleep(&tick, NULL);
  }
  fprintf(stderr, "child %d still running after %.0f s: killed\n", (int)child, seconds);
  kill(child, SIGKILL);
  waitpid(child, status, 0);
  return -1;
}

static void versions(void) {
  CHECK(gossamer_c_api_version() == GOSSAMER_C_API_VERSION);
  CHECK(strlen(gossamer_version()) >= 5);
  CHECK(strcmp(gossamer_status_name(GOSSAMER_E_PEER_FAILURE), "GOSSAMER_E_PEER_FAILURE") == 0);
  CHECK(strcmp(gossamer_status_name(GOSSAMER_E_BUSY), "GOSSAMER_E_BUSY") == 0);
  CHECK(strcmp(gossamer_status_name((gossamer_status)99), "unknown") == 0);
  CHECK(gossamer_last_error() == GOSSAMER_OK);
  CHECK(gossamer_last_error_peer() == -1);
}

static void null_arguments(void) {
  gossamer_agent* a = (gossamer_agent*)1;
  CHECK(gossamer_agent_create(NULL, 1, NULL, 0, 0, 1, scratch, &a) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(a == NULL);
  CHECK(strstr(gossamer_last_error_message(), "config is NULL") != NULL);
  CHECK(gossamer_agent_create("world_size: 1", 1, NULL, 0, 0, 1, scratch, NULL) ==
        GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_create("world_size: 1", 1, NULL, 3, 0, 1, scratch, &a) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_create("world_size: 2", 1, NULL, 0, 5, 0, scratch, &a) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "rank 5 outside [0, 2)") != NULL);
  CHECK(gossamer_barrier(NULL) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_allreduce(NULL, NULL, 0, GOSSAMER_FLOAT32, GOSSAMER_SUM) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_close(NULL) == GOSSAMER_OK);
  int rank = -1;
  CHECK(gossamer_agent_rank(NULL, &rank) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_last_error_peer() == -1);
}

static void bad_config(void) {
  /* A misspelt key on line 4 of a file. */
  const char* path = path_in("bad.yaml");
  write_file(path, "world_size: 1\ntransport:\n  kind: inproc\n  timeout_secnds: 3\n");
  gossamer_agent* a = NULL;
  CHECK(gossamer_agent_create(path, 0, NULL, 0, 0, 0, scratch, &a) == GOSSAMER_E_CONFIG);
  CHECK(a == NULL);
  CHECK(gossamer_last_error() == GOSSAMER_E_CONFIG);
  CHECK(strcmp(gossamer_last_error_file(), path) == 0);
  CHECK(gossamer_last_error_line() == 4);
  CHECK(strcmp(gossamer_last_error_key(), "transport.timeout_secnds") == 0);
  /* An override of an unknown key. */
  const char* overrides[] = {"algorithm.nme=sgp"};
  CHECK(gossamer_agent_create("world_size: 1", 1, overrides, 1, 0, 0, scratch, &a) == GOSSAMER_E_CONFIG);
  CHECK(strcmp(gossamer_last_error_key(), "algorithm.nme") == 0);
  CHECK(strcmp(gossamer_last_error_file(), "override 'algorithm.nme=sgp'") == 0);
  /* Text that is not YAML. */
  CHECK(gossamer_agent_create("world_size: [1", 1, NULL, 0, 0, 0, scratch, &a) == GOSSAMER_E_CONFIG);
  CHECK(strlen(gossamer_last_error_message()) > 0);
  CHECK(strcmp(gossamer_last_error_file(), "<config>") == 0);
  /* A file that does not exist. */
  CHECK(gossamer_agent_create(path_in("missing.yaml"), 0, NULL, 0, 0, 0, scratch, &a) != GOSSAMER_OK);
  /* A setting the algorithm refuses when it is built: d2 with overlap. */
  const char* d2[] = {"transport.kind=inproc", "run.metrics=false", "algorithm.name=d2",
                      "algorithm.mode=overlap"};
  CHECK(gossamer_agent_create("world_size: 1", 1, d2, 4, 0, 0, scratch, &a) == GOSSAMER_OK);
  const size_t sizes[] = {4};
  CHECK(gossamer_make_optimizer(a, sizes, 1) == GOSSAMER_E_CONFIG);
  CHECK(strcmp(gossamer_last_error_key(), "algorithm.mode") == 0);
  gossamer_agent_close(a);
}

/* Rank 1 (a child process) joins, takes part in one allreduce and kills
 * itself; rank 0's next allreduce fails with the peer named. */
static void killed_peer(void) {
  const char* config =
      "world_size: 2\ntransport:\n  kind: socket\n  host: 127.0.0.1\n  timeout_seconds: 10\n"
      "membership:\n  enabled: false\nrun:\n  metrics: false\n";
  char rendezvous[512];
  snprintf(rendezvous, sizeof rendezvous, "%s/rv-killed", scratch);
  fflush(NULL);
  const pid_t child = fork();
  if (child < 0) {
    perror("fork");
    exit(2);
  }
  const int rank = child == 0 ? 1 : 0;
  gossamer_agent* a = NULL;
  if (gossamer_agent_create(config, 1, NULL, 0, rank, 0, rendezvous, &a) != GOSSAMER_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, gossamer_last_error_message());
    if (child == 0) _exit(3);
    ++failures;
    int status = 0;
    kill(child, SIGKILL);
    wait_bounded(child, 30, &status);
    return;
  }
  float v[4] = {1.0f + (float)rank, 2.0f, 3.0f, 4.0f};
  const gossamer_status s = gossamer_allreduce(a, v, 4, GOSSAMER_FLOAT32, GOSSAMER_SUM);
  if (child == 0) {
    if (s != GOSSAMER_OK || v[0] != 3.0f) _exit(4);
    raise(SIGKILL); /* dies without closing anything */
    _exit(5);
  }
  CHECK(s == GOSSAMER_OK);
  CHECK(v[0] == 3.0f && v[3] == 8.0f);
  int status = 0;
  CHECK(wait_bounded(child, 30, &status) == child);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
  const gossamer_status after = gossamer_allreduce(a, v, 4, GOSSAMER_FLOAT32, GOSSAMER_SUM);
  CHECK(after == GOSSAMER_E_PEER_FAILURE);
  CHECK(gossamer_last_error() == GOSSAMER_E_PEER_FAILURE);
  CHECK(gossamer_last_error_peer() == 1);
  CHECK(strlen(gossamer_last_error_message()) > 0);
  gossamer_agent_close(a);
}

/* A 3-process job with the membership service on: rank 1 kills itself
 * after one allreduce; ranks 0 and 2 get GOSSAMER_E_PEER_FAILURE naming it,
 * agree on a view of the two of them with gossamer_recover, allreduce again
 * over it, and broadcast from global rank 2 (the view's second member; rank
 * 1, gone, is refused as a root). Rank 2 (a child) reports by its exit
 * status. */
static void recovered_job(void) {
  const char* config =
      "world_size: 3\ntransport:\n  kind: socket\n  host: 127.0.0.1\n  timeout_seconds: 10\n"
      "membership:\n  enabled: true\n  heartbeat_seconds: 0.1\n  suspect_seconds: 1.5\n"
      "run:\n  metrics: false\n";
  char rendezvous[512];
  snprintf(rendezvous, sizeof rendezvous, "%s/rv-recovered", scratch);
  fflush(NULL);
  pid_t children[2] = {-1, -1};
  int rank = 0;
  for (int c = 1; c <= 2; ++c) {
    children[c - 1] = fork();
    if (children[c - 1] < 0) {
      perror("fork");
      exit(2);
    }
    if (children[c - 1] == 0) {
      rank = c;
      break;
    }
  }
  gossamer_agent* a = NULL;
  if (gossamer_agent_create(config, 1, NULL, 0, rank, 0, rendezvous, &a) != GOSSAMER_OK) {
    fprintf(stderr, "rank %d: %s\n", rank, gossamer_last_error_message());
    if (rank != 0) _exit(3);
    ++failures;
    int status = 0;
    for (int c = 0; c < 2; ++c) {
      kill(children[c], SIGKILL);
      wait_bounded(children[c], 30, &status);
    }
    return;
  }
  double v[2] = {1.0, (double)rank};
  const gossamer_status first = gossamer_allreduce(a, v, 2, GOSSAMER_FLOAT64, GOSSAMER_SUM);
  if (rank == 1) raise(SIGKILL);
  /* Each step runs whatever the one before gave, so that both survivors
   * take part in the recovery and the last allreduce; `failed` names the
   * first step that did not hold. */
  const char* failed = NULL;
  if (!(first == GOSSAMER_OK && v[0] == 3.0 && v[1] == 3.0)) failed = "the first allreduce";
  v[0] = 1.0;
  gossamer_status s = gossamer_allreduce(a, v, 2, GOSSAMER_FLOAT64, GOSSAMER_SUM);
  /* The rank that sees the death names peer 1; one whose view another
   * survivor revoked first names none (-1). */
  const int peer = gossamer_last_error_peer();
  if (failed == NULL && !(s == GOSSAMER_E_PEER_FAILURE && (peer == 1 || peer == -1)))
    failed = "the allreduce after the kill";
  s = gossamer_recover(a);
  for (int tries = 1; s == GOSSAMER_E_PEER_FAILURE && tries < 5; ++tries) s = gossamer_recover(a);
  if (failed == NULL && s != GOSSAMER_OK) failed = "gossamer_recover";
  uint64_t number = 0;
  int members[3] = {-1, -1, -1};
  size_t count = 0;
  s = gossamer_view(a, &number, members, 3, &count);
  if (failed == NULL &&
      !(s == GOSSAMER_OK && number >= 1 && count == 2 && members[0] == 0 && members[1] == 2))
    failed = "the view after the recovery";
  if (failed == NULL &&
      !(gossamer_view(a, &number, members, 1, &count) == GOSSAMER_E_INVALID_ARGUMENT && count == 2))
    failed = "gossamer_view with too small a capacity";
  v[0] = 1.0;
  v[1] = (double)rank;
  s = gossamer_allreduce(a, v, 2, GOSSAMER_FLOAT64, GOSSAMER_SUM);
  if (failed == NULL && !(s == GOSSAMER_OK && v[0] == 2.0 && v[1] == 2.0))
    failed = "the allreduce over the new view";
  /* The root is a global rank, not a position in the view. */
  v[0] = v[1] = rank == 2 ? 7.0 : 0.0;
  s = gossamer_broadcast(a, v, 2, GOSSAMER_FLOAT64, 2);
  if (failed == NULL && !(s == GOSSAMER_OK && v[0] == 7.0 && v[1] == 7.0))
    failed = "the broadcast from global rank 2";
  s = gossamer_broadcast(a, v, 2, GOSSAMER_FLOAT64, 1);
  if (failed == NULL &&
      !(s == GOSSAMER_E_INVALID_ARGUMENT && strstr(gossamer_last_error_message(), "root 1")))
    failed = "the broadcast from rank 1, no longer a member";
  const int ok = failed == NULL;
  if (!ok)
    fprintf(stderr, "rank %d: %s failed; last error %s: %s\n", rank, failed,
            gossamer_status_name(gossamer_last_error()), gossamer_last_error_message());
  gossamer_agent_close(a);
  if (rank != 0) _exit(ok ? 0 : 4);
  CHECK(ok);
  int status = 0;
  CHECK(wait_bounded(children[0], 60, &status) == children[0] && WIFSIGNALED(status));
  CHECK(wait_bounded(children[1], 60, &status) == children[1] && WIFEXITED(status) &&
        WEXITSTATUS(status) == 0);
}

/* One rank: the collectives on every dtype, the optimizer calls, bad dtype,
 * op and lengths, and the agent from the launcher's variables. */
static void one_rank(void) {
  char rendezvous[512];
  snprintf(rendezvous, sizeof rendezvous, "%s/rv-one", scratch);
  const char* overrides[] = {"transport.kind=inproc", "run.metrics=false"};
  gossamer_agent* a = NULL;
  CHECK(gossamer_agent_create("world_size: 1\nalgorithm:\n  name: allreduce_sgd\n", 1, overrides, 2, 0, 1,
                              rendezvous, &a) == GOSSAMER_OK);
  if (a == NULL) return;
  int rank = -1, n = -1;
  CHECK(gossamer_agent_rank(a, &rank) == GOSSAMER_OK && rank == 0);
  CHECK(gossamer_agent_world_size(a, &n) == GOSSAMER_OK && n == 1);
  CHECK(gossamer_agent_rank(a, NULL) == GOSSAMER_E_INVALID_ARGUMENT);

  float f[3] = {1.5f, -2.0f, 0.25f};
  double d[2] = {3.0, 4.0};
  uint16_t half[2] = {0x3C00, 0x4000};  /* binary16 1.0, 2.0 */
  uint16_t bhalf[2] = {0x3F80, 0x4040}; /* bfloat16 1.0, 3.0 */
  CHECK(gossamer_allreduce(a, f, 3, GOSSAMER_FLOAT32, GOSSAMER_AVERAGE) == GOSSAMER_OK && f[0] == 1.5f);
  CHECK(gossamer_allreduce(a, d, 2, GOSSAMER_FLOAT64, GOSSAMER_MAX) == GOSSAMER_OK && d[1] == 4.0);
  CHECK(gossamer_allreduce(a, half, 2, GOSSAMER_FLOAT16, GOSSAMER_SUM) == GOSSAMER_OK && half[1] == 0x4000);
  CHECK(gossamer_allreduce(a, bhalf, 2, GOSSAMER_BFLOAT16, GOSSAMER_MIN) == GOSSAMER_OK &&
        bhalf[0] == 0x3F80);
  CHECK(gossamer_allreduce(a, f, 3, (gossamer_dtype)42, GOSSAMER_SUM) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "dtype 42") != NULL);
  CHECK(gossamer_allreduce(a, f, 3, GOSSAMER_FLOAT32, (gossamer_op)7) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_allreduce(a, NULL, 3, GOSSAMER_FLOAT32, GOSSAMER_SUM) == GOSSAMER_E_INVALID_ARGUMENT);
  /* Counts whose size in bytes would wrap around size_t. */
  CHECK(gossamer_allreduce(a, f, SIZE_MAX / 4 + 2, GOSSAMER_FLOAT32, GOSSAMER_SUM) ==
        GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "larger than any buffer") != NULL);
  CHECK(gossamer_allreduce(a, f, SIZE_MAX, GOSSAMER_FLOAT16, GOSSAMER_SUM) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_broadcast(a, d, SIZE_MAX / 8 + 3, GOSSAMER_FLOAT64, 0) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_broadcast(a, d, 2, GOSSAMER_FLOAT64, 0) == GOSSAMER_OK && d[0] == 3.0);
  CHECK(gossamer_broadcast(a, d, 2, GOSSAMER_FLOAT64, 3) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_barrier(a) == GOSSAMER_OK);
  uint64_t number = 99;
  int members[2] = {-1, -1};
  size_t count = 0;
  CHECK(gossamer_view(a, &number, members, 2, &count) == GOSSAMER_OK && number == 0 && count == 1 &&
        members[0] == 0);
  CHECK(gossamer_view(a, NULL, members, 2, &count) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_recover(NULL) == GOSSAMER_E_INVALID_ARGUMENT);

  /* The optimizer: AllReduce-SGD with the default SGD (lr 0.01, momentum 0.9). */
  uint64_t steps = 99;
  float params[5] = {1, 1, 1, 1, 1}, grads[5] = {1, 2, 3, 4, 5};
  CHECK(gossamer_step(a, params, grads, 5) == GOSSAMER_E_INVALID_ARGUMENT); /* before make_optimizer */
  CHECK(gossamer_steps(a, &steps) == GOSSAMER_E_INVALID_ARGUMENT);
  const size_t tensors[2] = {3, 2};
  CHECK(gossamer_make_optimizer(a, tensors, 0) == GOSSAMER_E_INVALID_ARGUMENT);
  /* Sizes that add up past any buffer, and more tensors than an array can hold. */
  const size_t huge[2] = {SIZE_MAX, 2};
  CHECK(gossamer_make_optimizer(a, huge, 2) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "add up to more than") != NULL);
  CHECK(gossamer_make_optimizer(a, tensors, SIZE_MAX / 8 + 3) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_make_optimizer(a, tensors, 2) == GOSSAMER_OK);
  CHECK(gossamer_step(a, params, grads, 5) == GOSSAMER_OK);
  CHECK(params[0] < 1.0f && params[4] < params[0]);
  CHECK(gossamer_step(a, params, grads, 4) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "count 4") != NULL);
  CHECK(gossamer_reduce_gradients(a, grads, 5) == GOSSAMER_OK && grads[2] == 3.0f);
  int skips = -1;
  CHECK(gossamer_skips_local_step(a, &skips) == GOSSAMER_OK && skips == 0); /* no view change */
  CHECK(gossamer_skips_local_step(a, NULL) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_mix_parameters(a, params, 5) == GOSSAMER_OK);
  CHECK(gossamer_flush(a, params, 5) == GOSSAMER_OK);
  CHECK(gossamer_steps(a, &steps) == GOSSAMER_OK && steps == 2);
  CHECK(gossamer_steps(a, NULL) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_close(a) == GOSSAMER_OK);
  /* A closed agent's handle is an error, not freed memory read or freed twice. */
  CHECK(gossamer_agent_rank(a, &rank) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "not a live gossamer_agent") != NULL);
  CHECK(gossamer_step(a, params, grads, 5) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_close(a) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(gossamer_agent_close((gossamer_agent*)scratch) == GOSSAMER_E_INVALID_ARGUMENT);
  gossamer_agent* const stale = a;

  /* Metrics by polling: an agent with run.metrics on queues its records. */
  char run_dir[600];
  snprintf(run_dir, sizeof run_dir, "run.dir=%s/run", scratch);
  const char* metrics_overrides[] = {"transport.kind=socket", "transport.host=127.0.0.1", run_dir,
                                     "run.metrics_every=1"};
  char rendezvous3[512];
  snprintf(rendezvous3, sizeof rendezvous3, "%s/rv-metrics", scratch);
  CHECK(gossamer_agent_create("world_size: 1\nalgorithm:\n  name: allreduce_sgd\n", 1, metrics_overrides, 4,
                              0, 1, rendezvous3, &a) == GOSSAMER_OK);
  if (a != NULL) {
    /* A later agent never gets a closed one's handle. */
    CHECK(a != stale);
    CHECK(gossamer_agent_rank(stale, &rank) == GOSSAMER_E_INVALID_ARGUMENT);
    CHECK(gossamer_make_optimizer(a, tensors, 2) == GOSSAMER_OK);
    CHECK(gossamer_step(a, params, grads, 5) == GOSSAMER_OK);
    char small[4], record[4096];
    size_t length = 0;
    CHECK(gossamer_metrics_poll(a, small, sizeof small, &length) == GOSSAMER_E_INVALID_ARGUMENT &&
          length > 4);
    CHECK(gossamer_metrics_poll(a, record, sizeof record, &length) == GOSSAMER_OK &&
          length == strlen(record));
    CHECK(strstr(record, "\"kind\":\"start\"") != NULL);
    int records = 1, steps_seen = 0;
    while (gossamer_metrics_poll(a, record, sizeof record, &length) == GOSSAMER_OK && length > 0) {
      ++records;
      steps_seen += strstr(record, "\"kind\":\"step\"") != NULL;
    }
    CHECK(length == 0 && record[0] == '\0');
    CHECK(steps_seen >= 1);
    CHECK(gossamer_metrics_poll(a, NULL, 0, &length) == GOSSAMER_OK && length == 0);
    CHECK(gossamer_agent_close(a) == GOSSAMER_OK);
  }

  /* From the launcher's variables: none set, then RANK/WORLD_SIZE/GOSSAMER_RENDEZVOUS by hand. */
  unsetenv("RANK");
  unsetenv("WORLD_SIZE");
  unsetenv("GOSSAMER_RENDEZVOUS");
  a = NULL;
  CHECK(gossamer_agent_from_env("world_size: 1", 1, overrides, 2, &a) == GOSSAMER_E_INVALID_ARGUMENT);
  CHECK(strstr(gossamer_last_error_message(), "launcher") != NULL);
  char rendezvous2[512];
  snprintf(rendezvous2, sizeof rendezvous2, "%s/rv-env", scratch);
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("GOSSAMER_RENDEZVOUS", rendezvous2, 1);
  /* The inproc fabric's rank 0 stays taken in this process: a second agent goes over the socket transport. */
  const char* socket_overrides[] = {"transport.kind=socket", "transport.host=127.0.0.1", "run.metrics=false"};
  CHECK(gossamer_agent_from_env("world_size: 4", 1, socket_overrides, 3, &a) == GOSSAMER_OK);
  if (a != NULL) {
    CHECK(gossamer_agent_world_size(a, &n) == GOSSAMER_OK && n == 1);
    CHECK(gossamer_agent_close(a) == GOSSAMER_OK);
  }
}

int main(void) {
  if (make_scratch("gossamer-c-api") != 0) return 2;
  versions();
  null_arguments();
  bad_config();
  killed_peer(); /* these fork: before this process starts any agent's threads */
  recovered_job();
  one_rank();
  return finish("gossamer C API");
}
