/* What an agent costs a process, measured through the C ABI: resident memory
 * (VmRSS), threads and sockets of this process before any agent, with an
 * idle agent, and while it trains a model of P float32 parameters with
 * gossamer_step (beyond the model's own params and grads, 8P bytes).
 *
 *   footprint TRANSPORT RANK WORLD_SIZE RENDEZVOUS [PARAMETERS] [STEPS]
 *
 * TRANSPORT is a transport.kind (zmq, socket). Prints one JSON object:
 *   {"transport", "rank", "world_size", "parameters", "steps",
 *    "base": {"rss_kib", "threads", "sockets"}, "idle": {...}, "training": {...}}
 * "training" is measured after the steps, with the model still allocated;
 * its rss_kib minus the model's 8P bytes is what training adds.
 * Each also has "mapped_kib": the Rss of the /proc/self/smaps entries that
 * overlap the program's own mappings (/proc/self/maps). Natively the two
 * files list the same mappings and it equals VmRSS; under qemu-user, where
 * VmRSS is the emulator's process, /proc/self/maps lists only the
 * program's mappings and smaps is the host's, so it is the program's own
 * memory. */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gossamer/gossamer.h"

typedef struct {
  long rss_kib;
  long mapped_kib;
  int threads;
  int sockets;
} usage;

/* VmRSS (KiB) and Threads from one read of /proc/self/status; -1 if absent. */
static void read_status(long* rss_kib, long* threads) {
  FILE* f = fopen("/proc/self/status", "r");
  char line[256];
  *rss_kib = *threads = -1;
  while (f != NULL && fgets(line, sizeof line, f) != NULL) {
    if (strncmp(line, "VmRSS:", 6) == 0) *rss_kib = atol(line + 6);
    if (strncmp(line, "Threads:", 8) == 0) *threads = atol(line + 8);
  }
  if (f != NULL) fclose(f);
}

static int count_sockets(void) {
  DIR* d = opendir("/proc/self/fd");
  int sockets = 0;
  struct dirent* e;
  char path[512], target[256];
  while (d != NULL && (e = readdir(d)) != NULL) {
    snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
    const ssize_t len = readlink(path, target, sizeof target - 1);
    if (len <= 0) continue;
    target[len] = '\0';
    sockets += strncmp(target, "socket:", 7) == 0;
  }
  if (d != NULL) closedir(d);
  return sockets;
}

/* The address ranges of /proc/self/maps, at most `most`; how many, or -1. */
static int own_ranges(unsigned long (*ranges)[2], int most) {
  FILE* f = fopen("/proc/self/maps", "r");
  if (f == NULL) return -1;
  char line[512];
  int n = 0;
  while (n < most && fgets(line, sizeof line, f) != NULL)
    if (sscanf(line, "%lx-%lx", &ranges[n][0], &ranges[n][1]) == 2) ++n;
  fclose(f);
  return n;
}

/* The Rss (KiB) of the /proc/self/smaps entries that overlap a range of
 * /proc/self/maps; -1 on error. */
static long mapped_resident_kib(void) {
  static unsigned long ranges[4096][2];
  const int n = own_ranges(ranges, 4096);
  FILE* f = n < 0 ? NULL : fopen("/proc/self/smaps", "r");
  if (f == NULL) return -1;
  char line[512];
  long kib = 0;
  int own = 0;
  while (fgets(line, sizeof line, f) != NULL) {
    unsigned long begin = 0, end = 0;
    if (sscanf(line, "%lx-%lx", &begin, &end) == 2) { /* an entry's first line */
      own = 0;
      for (int i = 0; i < n && !own; ++i) own = begin < ranges[i][1] && ranges[i][0] < end;
    } else if (own && strncmp(line, "Rss:", 4) == 0) {
      kib += atol(line + 4);
    }
  }
  fclose(f);
  return kib;
}

static usage measure(void) {
  usage u;
  long threads = -1;
  read_status(&u.rss_kib, &threads);
  u.mapped_kib = mapped_resident_kib();
  u.threads = (int)threads;
  u.sockets = count_sockets();
  return u;
}

static void print_usage(const char* name, usage u, const char* after) {
  printf("\"%s\": {\"rss_kib\": %ld, \"mapped_kib\": %ld, \"threads\": %d, \"sockets\": %d}%s", name,
         u.rss_kib, u.mapped_kib, u.threads, u.sockets, after);
}

int main(int argc, char** argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s TRANSPORT RANK WORLD_SIZE RENDEZVOUS [PARAMETERS] [STEPS]\n", argv[0]);
    return 2;
  }
  const int rank = atoi(argv[2]), world = atoi(argv[3]);
  const size_t parameters = argc > 5 ? (size_t)atol(argv[5]) : 100000;
  const int steps = argc > 6 ? atoi(argv[6]) : 200;
  const usage base = measure();
  char kind[64];
  snprintf(kind, sizeof kind, "transport.kind=%s", argv[1]);
  const char* overrides[] = {kind, "transport.host=127.0.0.1", "run.metrics=false"};
  gossamer_agent* agent = NULL;
  if (gossamer_agent_create("algorithm:\n  name: crossover_sgd\n", 1, overrides, 3, rank, world, argv[4],
                            &agent) != GOSSAMER_OK) {
    fprintf(stderr, "footprint: %s\n", gossamer_last_error_message());
    return 1;
  }
  if (gossamer_barrier(agent) != GOSSAMER_OK) return 1;
  sleep(1); /* idle: the agent's threads settle */
  const usage idle = measure();
  float* params = calloc(parameters, sizeof(float));
  float* grads = calloc(parameters, sizeof(float));
  if (params == NULL || grads == NULL) return 1;
  const size_t tensors[1] = {parameters};
  if (gossamer_make_optimizer(agent, tensors, 1) != GOSSAMER_OK) return 1;
  for (int s = 0; s < steps; ++s) {
    for (size_t k = 0; k < parameters; ++k) grads[k] = (float)((k + (size_t)s + (size_t)rank) % 7) - 3.0f;
    if (gossamer_step(agent, params, grads, parameters) != GOSSAMER_OK) {
      fprintf(stderr, "footprint: %s\n", gossamer_last_error_message());
      return 1;
    }
  }
  const usage training = measure();
  printf("{\"transport\": \"%s\", \"rank\": %d, \"world_size\": %d, \"parameters\": %zu, \"steps\": %d, ",
         argv[1], rank, world, parameters, steps);
  print_usage("base", base, ", ");
  print_usage("idle", idle, ", ");
  print_usage("training", training, "}\n");
  fflush(stdout);
  gossamer_barrier(agent);
  gossamer_agent_close(agent);
  free(params);
  free(grads);
  return 0;
}
