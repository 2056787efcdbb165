# gdb script (scripts/repeat-kill.sh --hold-lock): stops the inferior the
# moment it is about to release a spin lock that lives in a /dev/shm mapping
# (a libfabric shm region lock), i.e. while it holds it; prints which region
# and the stack, keeps it stopped for $HOLD_SECONDS (0.5) so that the other
# ranks run into the lock, then SIGKILLs it there.
#   gdb -p PID -batch -x scripts/hold-shm-lock.py
import os
import time

import gdb

maps = []
for line in gdb.execute("info proc mappings", to_string=True).splitlines():
    parts = line.split()
    if len(parts) >= 5 and parts[0].startswith("0x") and "/dev/shm/" in line:
        maps.append((int(parts[0], 16), int(parts[1], 16), parts[-1]))
gdb.execute("break pthread_spin_unlock")
hits = 0
while True:
    gdb.execute("continue", to_string=True)
    hits += 1
    rdi = int(gdb.parse_and_eval("$rdi")) & 0xFFFFFFFFFFFFFFFF
    region = [m for m in maps if m[0] <= rdi < m[1]]
    if region:
        print("holding the spin lock at 0x%x in %s (offset 0x%x), after %d unlocks"
              % (rdi, region[0][2], rdi - region[0][0], hits))
        print(gdb.execute("bt 8", to_string=True))
        break
    if hits > 200000:
        print("no shared lock seen")
        break
time.sleep(float(os.environ.get("HOLD_SECONDS", "0.5")))
gdb.execute("kill")
