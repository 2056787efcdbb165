/* What the C ABI's test programs share: CHECK, which counts and prints a
 * failed condition with the library's last error, and a scratch directory
 * under $TMPDIR (or /tmp) made at the start and removed at the end.
 * Header-only, for one test program per process (the state is static). */
#ifndef GOSSAMER_C_CHECKS_H
#define GOSSAMER_C_CHECKS_H

#include <stdio.h>
#include <stdlib.h>

#include "gossamer/gossamer.h"

static int failures = 0;

#define CHECK(cond)                                                                              \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: CHECK(%s) failed; last error %s: %s\n", __FILE__, __LINE__, #cond, \
              gossamer_status_name(gossamer_last_error()), gossamer_last_error_message());       \
      ++failures;                                                                                \
    }                                                                                            \
  } while (0)

/* The scratch directory's path (make_scratch fills it). */
static char scratch[256];

/* Makes scratch, "$TMPDIR/<prefix>-XXXXXX"; returns 0, or -1 (printed). */
static int make_scratch(const char* prefix) {
  const char* tmp = getenv("TMPDIR");
  snprintf(scratch, sizeof scratch, "%s/%s-XXXXXX", tmp != NULL && *tmp ? tmp : "/tmp", prefix);
  if (mkdtemp(scratch) == NULL) {
    perror("mkdtemp");
    return -1;
  }
  return 0;
}

/* Removes scratch and returns the program's exit status: 0 when every
 * check held (saying so with `name`), else 1. */
static int finish(const char* name) {
  char command[600];
  snprintf(command, sizeof command, "rm -rf '%s'", scratch);
  if (system(command) != 0) fprintf(stderr, "could not remove %s\n", scratch);
  if (failures == 0) printf("%s: every check passed\n", name);
  return failures == 0 ? 0 : 1;
}

#endif
