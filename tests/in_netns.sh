#!/usr/bin/env bash
# in_netns.sh COMMAND [ARG...]: runs COMMAND in a network namespace of its
# own whose only interface is its loopback (up), so that launchers that
# listen on every address (Open MPI's and MPICH's daemons, torch's
# TCPStore) listen on nothing but 127.0.0.0/8. The namespace goes with the
# process. As root, `unshare --net`; otherwise inside a user namespace
# (`--user --map-root-user`). Fails, saying why, where neither can be made.
set -uo pipefail
if [ "$#" -eq 0 ]; then
  echo "usage: in_netns.sh COMMAND [ARG...]" >&2
  exit 2
fi
for tool in unshare ip; do
  if ! command -v "$tool" >/dev/null; then
    echo "in_netns.sh: $tool not found (util-linux, iproute2): cannot make a network namespace" >&2
    exit 1
  fi
done
if [ "$(id -u)" -eq 0 ]; then
  how=(unshare --net)
else
  how=(unshare --user --map-root-user --net)
fi
if ! "${how[@]}" true 2>/dev/null; then
  echo "in_netns.sh: '${how[*]}' is not allowed here: cannot make a network namespace" >&2
  exit 1
fi
exec "${how[@]}" -- bash -c 'ip link set lo up || exit 1; exec "$@"' in_netns "$@"
