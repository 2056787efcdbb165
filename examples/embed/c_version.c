/* Links the installed libgossamer_c through the package's gossamer::c and
 * checks that the library's C API version is the header's: prints
 * "gossamer C API version V (library V, Gossamer X.Y.Z)" and exits 0, or
 * exits 1 when they differ. */
#include <stdio.h>

#include "gossamer/gossamer.h"

int main(void) {
  const int library = gossamer_c_api_version();
  printf("gossamer C API version %d (library %d, Gossamer %s)\n", GOSSAMER_C_API_VERSION, library,
         gossamer_version());
  return library == GOSSAMER_C_API_VERSION ? 0 : 1;
}
