/* The main job's model trained from C through the C ABI alone: a 784-128-10
 * MLP (ReLU, softmax cross-entropy) on Fashion-MNIST, as gossamer-train's
 * quickstart (examples/configs/quickstart-crossover.yaml: Crossover-SGD with
 * 4 segments, batch 32 per rank, lr 0.01, momentum 0.9, pixels scaled to
 * [0, 1] and standardized by the training set's mean and deviation, an IID
 * shard per rank, weights uniform in +-sqrt(6 / fan-in), +-sqrt(1 / fan-in)
 * for the last layer, biases 0). The forward and backward passes are plain C;
 * each step hands the flat gradient to gossamer_step, which applies the
 * algorithm's SGD and exchange.
 *
 *   train_fashion_mnist CONFIG RANK WORLD_SIZE RENDEZVOUS DATA_DIR EPOCHS [TRAIN_LIMIT]
 *
 * WORLD_SIZE 0 keeps the config's world_size (as gossamer_agent_create);
 * the shards follow the agent's world size either way.
 *
 * CONFIG is a YAML file (the quickstart's works: the keys gossamer_c does
 * not know, model: and data:, are refused, so pass a copy without them or
 * use "-" for the quickstart's algorithm and training keys). At the end each
 * rank averages its model with the others' (allreduce) and prints one line:
 *   {"rank": R, "steps": S, "test_accuracy": A}
 * with A the averaged model's accuracy on the 10,000 test images. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "gossamer/gossamer.h"

enum { kInputs = 784, kHidden = 128, kClasses = 10, kBatch = 32 };

static const char* kQuickstart =
    "seed: 42\n"
    "transport:\n  kind: zmq\n  host: 127.0.0.1\n  protocol: tcp\n  timeout_seconds: 30\n"
    "topology:\n  kind: fair_roulette\n"
    "algorithm:\n  name: crossover_sgd\n  segments: 4\n  interval: 1\n"
    "training:\n  learning_rate: 0.01\n  momentum: 0.9\n"
    "run:\n  metrics: false\n";

typedef struct {
  int count;
  float* images; /* count x 784 */
  uint8_t* labels;
} dataset;

static void die(const char* what) {
  fprintf(stderr, "train_fashion_mnist: %s\n", what);
  exit(1);
}

static uint32_t be32(const unsigned char* b) {
  return ((uint32_t)b[0] << 24) | ((uint32_t)b[1] << 16) | ((uint32_t)b[2] << 8) | b[3];
}

/* Reads a gzip'd IDX file of unsigned bytes with `dims` dimensions, each
 * item `item` bytes (784 for 28x28 images, 1 for labels), into a malloc'd
 * buffer after its header; dies on a header that says otherwise. */
static unsigned char* read_idx(const char* path, int dims, size_t item, uint32_t* count) {
  gzFile f = gzopen(path, "rb");
  if (f == NULL) die(path);
  unsigned char header[16];
  const int header_bytes = 4 + 4 * dims;
  if (gzread(f, header, (unsigned)header_bytes) != header_bytes) die(path);
  if (header[0] != 0 || header[1] != 0 || header[2] != 0x08 || header[3] != (unsigned char)dims) {
    fprintf(stderr, "train_fashion_mnist: %s: not an IDX file of %d-dimensional unsigned bytes\n", path,
            dims);
    exit(1);
  }
  *count = be32(header + 4);
  size_t got_item = 1;
  for (int d = 1; d < dims; ++d) {
    const uint32_t extent = be32(header + 4 + 4 * d);
    if (extent == 0 || extent > item) die("an IDX dimension does not match Fashion-MNIST's");
    got_item *= extent;
  }
  if (got_item != item || *count == 0 || *count > 10000000u) {
    fprintf(stderr, "train_fashion_mnist: %s: %u items of %zu bytes, expected up to 10^7 of %zu\n", path,
            (unsigned)*count, got_item, item);
    exit(1);
  }
  const size_t bytes = (size_t)*count * item;
  unsigned char* out = malloc(bytes);
  if (out == NULL) die("out of memory");
  size_t got = 0;
  while (got < bytes) {
    const unsigned chunk = bytes - got > (1u << 30) ? (1u << 30) : (unsigned)(bytes - got);
    const int n = gzread(f, out + got, chunk);
    if (n <= 0) die(path);
    got += (size_t)n;
  }
  gzclose(f);
  return out;
}

/* A whole decimal argument in [lo, hi], or the program dies naming it. */
static int int_arg(const char* text, const char* name, long lo, long hi) {
  char* end = NULL;
  errno = 0;
  const long v = strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) {
    fprintf(stderr, "train_fashion_mnist: %s '%s' is not a whole number in [%ld, %ld]\n", name, text, lo, hi);
    exit(2);
  }
  return (int)v;
}

static dataset load(const char* dir, const char* images, const char* labels, int limit) {
  char path[1024];
  uint32_t n_images = 0, n_labels = 0;
  snprintf(path, sizeof path, "%s/%s", dir, images);
  unsigned char* pixels = read_idx(path, 3, kInputs, &n_images);
  snprintf(path, sizeof path, "%s/%s", dir, labels);
  dataset d;
  d.labels = read_idx(path, 1, 1, &n_labels);
  if (n_images != n_labels) die("image and label counts differ");
  for (uint32_t k = 0; k < n_labels; ++k)
    if (d.labels[k] >= kClasses) die("a label outside 0..9");
  d.count = limit > 0 && (uint32_t)limit < n_images ? limit : (int)n_images;
  d.images = malloc((size_t)d.count * kInputs * sizeof(float));
  if (d.images == NULL) die("out of memory");
  for (size_t k = 0; k < (size_t)d.count * kInputs; ++k) d.images[k] = (float)pixels[k] / 255.0f;
  free(pixels);
  return d;
}

/* splitmix64: the seeded generator of the initial weights and the shuffles. */
static uint64_t next_random(uint64_t* state) {
  uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static double uniform01(uint64_t* state) { return (double)(next_random(state) >> 11) * 0x1p-53; }
static void shuffle(int* v, int n, uint64_t* state) {
  for (int i = n - 1; i > 0; --i) {
    const int j = (int)(uniform01(state) * (i + 1));
    const int t = v[i];
    v[i] = v[j];
    v[j] = t;
  }
}

/* The flat model: W1 (784 x 128, element (i, o) at i + 784 o), b1 (128), W2
 * (128 x 10, (h, k) at h + 128 k), b2 (10): the layout of gossamer-train's MLP. */
enum {
  kW1 = 0,
  kB1 = kW1 + kInputs * kHidden,
  kW2 = kB1 + kHidden,
  kB2 = kW2 + kHidden * kClasses,
  kParams = kB2 + kClasses
};

static void init_model(float* p, uint64_t seed) {
  const double b1 = sqrt(6.0 / kInputs), b2 = sqrt(1.0 / kHidden);
  for (int k = 0; k < kInputs * kHidden; ++k) p[kW1 + k] = (float)((2 * uniform01(&seed) - 1) * b1);
  for (int k = 0; k < kHidden * kClasses; ++k) p[kW2 + k] = (float)((2 * uniform01(&seed) - 1) * b2);
  memset(p + kB1, 0, kHidden * sizeof(float));
  memset(p + kB2, 0, kClasses * sizeof(float));
}

/* Logits of one image; `hidden` receives the ReLU layer. */
static void forward(const float* p, const float* x, float* hidden, float* logits) {
  for (int o = 0; o < kHidden; ++o) {
    const float* w = p + kW1 + (size_t)kInputs * o;
    float z = p[kB1 + o];
    for (int i = 0; i < kInputs; ++i) z += x[i] * w[i];
    hidden[o] = z > 0 ? z : 0;
  }
  for (int k = 0; k < kClasses; ++k) {
    const float* w = p + kW2 + kHidden * k;
    float z = p[kB2 + k];
    for (int h = 0; h < kHidden; ++h) z += hidden[h] * w[h];
    logits[k] = z;
  }
}

/* Adds the mean cross-entropy gradient of one image (weight 1 / batch) to g. */
static void backward(const float* p, const float* x, int label, float* g) {
  float hidden[kHidden], logits[kClasses], dz[kClasses], dh[kHidden];
  forward(p, x, hidden, logits);
  float top = logits[0];
  for (int k = 1; k < kClasses; ++k) top = logits[k] > top ? logits[k] : top;
  float sum = 0;
  for (int k = 0; k < kClasses; ++k) sum += (dz[k] = expf(logits[k] - top));
  for (int k = 0; k < kClasses; ++k) dz[k] = (dz[k] / sum - (k == label ? 1.0f : 0.0f)) / kBatch;
  for (int h = 0; h < kHidden; ++h) dh[h] = 0;
  for (int k = 0; k < kClasses; ++k) {
    float* gw = g + kW2 + kHidden * k;
    const float* w = p + kW2 + kHidden * k;
    for (int h = 0; h < kHidden; ++h) {
      gw[h] += hidden[h] * dz[k];
      dh[h] += w[h] * dz[k];
    }
    g[kB2 + k] += dz[k];
  }
  for (int o = 0; o < kHidden; ++o) {
    if (hidden[o] <= 0) continue;
    float* gw = g + kW1 + (size_t)kInputs * o;
    for (int i = 0; i < kInputs; ++i) gw[i] += x[i] * dh[o];
    g[kB1 + o] += dh[o];
  }
}

static double accuracy(const float* p, const dataset* d) {
  int right = 0;
  float hidden[kHidden], logits[kClasses];
  for (int n = 0; n < d->count; ++n) {
    forward(p, d->images + (size_t)kInputs * n, hidden, logits);
    int best = 0;
    for (int k = 1; k < kClasses; ++k) best = logits[k] > logits[best] ? k : best;
    right += best == d->labels[n];
  }
  return (double)right / d->count;
}

static void check(gossamer_status s, const char* call) {
  if (s == GOSSAMER_OK) return;
  fprintf(stderr, "train_fashion_mnist: %s: %s: %s\n", call, gossamer_status_name(s),
          gossamer_last_error_message());
  exit(1);
}

int main(int argc, char** argv) {
  if (argc < 7) {
    fprintf(stderr, "usage: %s CONFIG|- RANK WORLD_SIZE RENDEZVOUS DATA_DIR EPOCHS [TRAIN_LIMIT]\n", argv[0]);
    return 2;
  }
  const int rank_arg = int_arg(argv[2], "RANK", 0, 1 << 20),
            world_arg = int_arg(argv[3], "WORLD_SIZE", 0, 1 << 20);
  const int epochs = int_arg(argv[6], "EPOCHS", 1, 1 << 20);
  const int limit = argc > 7 ? int_arg(argv[7], "TRAIN_LIMIT", 0, 1 << 30) : 0;
  dataset train = load(argv[5], "train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz", limit);
  dataset test = load(argv[5], "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", 0);
  /* Standardize by the training set's pixel mean and deviation. */
  double mean = 0, var = 0;
  const size_t pixels = (size_t)train.count * kInputs;
  for (size_t k = 0; k < pixels; ++k) mean += train.images[k];
  mean /= (double)pixels;
  for (size_t k = 0; k < pixels; ++k) var += (train.images[k] - mean) * (train.images[k] - mean);
  const float m = (float)mean, scale = (float)(1.0 / sqrt(var / (double)pixels));
  for (size_t k = 0; k < pixels; ++k) train.images[k] = (train.images[k] - m) * scale;
  for (size_t k = 0; k < (size_t)test.count * kInputs; ++k) test.images[k] = (test.images[k] - m) * scale;

  const int is_text = strcmp(argv[1], "-") == 0;
  gossamer_agent* agent = NULL;
  check(gossamer_agent_create(is_text ? kQuickstart : argv[1], is_text, NULL, 0, rank_arg, world_arg, argv[4],
                              &agent),
        "gossamer_agent_create");
  /* The job's rank and world size as the agent has them: WORLD_SIZE 0 is the config's. */
  int rank = 0, world = 0;
  check(gossamer_agent_rank(agent, &rank), "gossamer_agent_rank");
  check(gossamer_agent_world_size(agent, &world), "gossamer_agent_world_size");
  const size_t tensors[4] = {kInputs * kHidden, kHidden, kHidden * kClasses, kClasses};
  check(gossamer_make_optimizer(agent, tensors, 4), "gossamer_make_optimizer");

  static float params[kParams], grads[kParams];
  init_model(params, 42);
  /* An IID shard per rank: one seeded permutation of the training set, cut in world-size parts. */
  int* order = malloc((size_t)train.count * sizeof(int));
  if (order == NULL) die("out of memory");
  for (int n = 0; n < train.count; ++n) order[n] = n;
  uint64_t rng = 42;
  shuffle(order, train.count, &rng);
  const int shard = train.count / world;
  int* mine = order + (size_t)shard * rank;
  uint64_t local = 1000 + (uint64_t)rank;
  const int steps_per_epoch = shard / kBatch;
  for (int e = 0; e < epochs; ++e) {
    shuffle(mine, shard, &local);
    for (int s = 0; s < steps_per_epoch; ++s) {
      memset(grads, 0, sizeof grads);
      for (int b = 0; b < kBatch; ++b) {
        const int n = mine[s * kBatch + b];
        backward(params, train.images + (size_t)kInputs * n, train.labels[n], grads);
      }
      check(gossamer_step(agent, params, grads, kParams), "gossamer_step");
    }
  }
  check(gossamer_flush(agent, params, kParams), "gossamer_flush");
  check(gossamer_allreduce(agent, params, kParams, GOSSAMER_FLOAT32, GOSSAMER_AVERAGE), "gossamer_allreduce");
  uint64_t steps = 0;
  check(gossamer_steps(agent, &steps), "gossamer_steps");
  printf("{\"rank\": %d, \"steps\": %llu, \"test_accuracy\": %.4f}\n", rank, (unsigned long long)steps,
         accuracy(params, &test));
  check(gossamer_agent_close(agent), "gossamer_agent_close");
  free(order);
  free(train.images);
  free(train.labels);
  free(test.images);
  free(test.labels);
  return 0;
}
