/* mpi_allreduce: the reference for bench/allreduce.cpp. Times MPI_Allreduce
 * (float32 sum, in place) with the same sizes and the same method, and prints
 * one JSON object per size on stdout (rank 0). scripts/bench-allreduce.sh runs
 * it under mpirun, once with Open MPI's default transports (shared memory
 * between processes of one host) and once with --mca btl self,tcp.
 *
 *   mpirun -np 4 mpi_allreduce [--sizes 4096,1048576 | --min-bytes 4 --max-bytes 268435456 --factor 4]
 *       [--reps 200] [--min-reps 5] [--warmup 5] [--budget 1.0] [--transport LABEL]
 *
 * Per size: one call on known inputs (rank r, element i holds r + 1 + i % 13),
 * checked element by element on every rank; its time (max over ranks) sizes the
 * rest: warm-ups (at most --warmup in all, about a quarter of --budget), then
 * repetitions (--min-reps .. --reps, about --budget seconds): refill the
 * vector, MPI_Barrier, time one MPI_Allreduce with MPI_Wtime. The per-rank
 * times are reduced with MPI_MAX to rank 0; the reported time is the median
 * over repetitions. algbw = bytes / time, busbw = algbw * 2 (n-1) / n, GB/s. */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64

static int rank_, world_;

static void die(const char* msg) {
  fprintf(stderr, "mpi_allreduce rank %d: error: %s\n", rank_, msg);
  MPI_Abort(MPI_COMM_WORLD, 1);
  exit(1);
}

static int cmpDouble(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* Linear interpolation between order statistics (sorts v). */
static double quantile(double* v, int n, double q) {
  qsort(v, (size_t)n, sizeof *v, cmpDouble);
  const double pos = q * (n - 1);
  const int lo = (int)floor(pos);
  const int hi = lo + 1 < n ? lo + 1 : n - 1;
  return v[lo] + (pos - lo) * (v[hi] - v[lo]);
}

static double timedCall(float* data, size_t count) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  MPI_Allreduce(MPI_IN_PLACE, data, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return MPI_Wtime() - t0;
}

static void check(const float* data, size_t count, int pattern, const char* label) {
  const int n = world_;
  for (size_t i = 0; i < count; ++i) {
    const float expected = pattern ? (float)(n * (n + 1) / 2 + n * (int)(i % 13)) : (float)n;
    if (data[i] != expected) {
      char msg[256];
      snprintf(msg, sizeof msg, "WRONG RESULT (%s): %zu floats, element %zu is %g, expected %g", label, count, i,
               (double)data[i], (double)expected);
      die(msg);
    }
  }
}

static double clampd(double v, double lo, double hi) { return v < lo ? lo : (v > hi ? hi : v); }

int main(int argc, char** argv) {
  size_t sizes[MAX_SIZES];
  int nsizes = 0;
  size_t minBytes = 4, maxBytes = (size_t)256 << 20;
  int factor = 4, reps = 200, minReps = 5, warmup = 5;
  double budget = 1.0;
  const char* transport = "default";

  MPI_Init(&argc, &argv);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_);

  for (int i = 1; i < argc; ++i) {
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) die("every option takes a value");
    if (!strcmp(argv[i], "--sizes")) {
      char* copy = strdup(v);
      for (char* tok = strtok(copy, ","); tok; tok = strtok(NULL, ",")) {
        if (nsizes == MAX_SIZES) die("too many sizes");
        sizes[nsizes++] = strtoull(tok, NULL, 10);
      }
      free(copy);
    } else if (!strcmp(argv[i], "--min-bytes")) {
      minBytes = strtoull(v, NULL, 10);
    } else if (!strcmp(argv[i], "--max-bytes")) {
      maxBytes = strtoull(v, NULL, 10);
    } else if (!strcmp(argv[i], "--factor")) {
      factor = atoi(v);
    } else if (!strcmp(argv[i], "--reps")) {
      reps = atoi(v);
    } else if (!strcmp(argv[i], "--min-reps")) {
      minReps = atoi(v);
    } else if (!strcmp(argv[i], "--warmup")) {
      warmup = atoi(v);
    } else if (!strcmp(argv[i], "--budget")) {
      budget = atof(v);
    } else if (!strcmp(argv[i], "--transport")) {
      transport = v;
    } else {
      die("unknown option (see the comment at the top of bench/mpi_allreduce.c)");
    }
    ++i;
  }
  if (nsizes == 0) {
    if (factor < 2 || minBytes == 0) die("bad --factor or --min-bytes");
    for (size_t b = minBytes; b <= maxBytes && nsizes < MAX_SIZES; b *= (size_t)factor) sizes[nsizes++] = b;
  }
  if (reps < 1 || minReps < 1 || warmup < 0 || budget <= 0) die("bad --reps, --min-reps, --warmup or --budget");
  if (reps < minReps) reps = minReps;
  size_t maxSize = 0;
  for (int s = 0; s < nsizes; ++s) {
    if (sizes[s] == 0 || sizes[s] % sizeof(float)) die("sizes must be positive multiples of 4 bytes");
    if (sizes[s] / sizeof(float) > 0x7fffffff) die("size above MPI's int count");
    if (sizes[s] > maxSize) maxSize = sizes[s];
  }

  float* data = malloc(maxSize);
  double* times = malloc(sizeof(double) * (size_t)reps);
  double* slowest = malloc(sizeof(double) * (size_t)reps);
  if (!data || !times || !slowest) die("out of memory");

  for (int s = 0; s < nsizes; ++s) {
    const size_t count = sizes[s] / sizeof(float);
    /* 1. The checked call. */
    for (size_t i = 0; i < count; ++i) data[i] = (float)(rank_ + 1 + (int)(i % 13));
    double first = timedCall(data, count);
    check(data, count, 1, transport);
    MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    const double estimate = first > 1e-7 ? first : 1e-7;
    /* 2. Warm-ups, 3. repetitions (every rank computes the same counts). */
    const int warmups = (int)clampd(floor(0.25 * budget / estimate), 0, warmup > 0 ? warmup - 1 : 0);
    const int nreps = (int)clampd(floor(budget / estimate), minReps, reps);
    for (int i = 0; i < warmups; ++i) {
      for (size_t k = 0; k < count; ++k) data[k] = 1.0f;
      timedCall(data, count);
    }
    for (int i = 0; i < nreps; ++i) {
      for (size_t k = 0; k < count; ++k) data[k] = 1.0f;
      times[i] = timedCall(data, count);
    }
    check(data, count, 0, transport);
    MPI_Reduce(times, slowest, nreps, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
    if (rank_ == 0) {
      const double p10 = quantile(slowest, nreps, 0.1), p90 = quantile(slowest, nreps, 0.9);
      const double t = quantile(slowest, nreps, 0.5);
      const double algbw = (double)sizes[s] / t / 1e9;
      printf(
          "{\"impl\": \"openmpi\", \"algorithm\": \"default\", \"transport\": \"%s\", \"world_size\": %d, "
          "\"bytes\": %zu, \"seconds\": %.9g, \"algbw\": %.9g, \"busbw\": %.9g, \"reps\": %d, "
          "\"seconds_p10\": %.9g, \"seconds_p90\": %.9g}\n",
          transport, world_, sizes[s], t, algbw, algbw * 2.0 * (world_ - 1) / world_, nreps, p10, p90);
      fflush(stdout);
    }
  }
  free(data);
  free(times);
  free(slowest);
  MPI_Finalize();
  return 0;
}
