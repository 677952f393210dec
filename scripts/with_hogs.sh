#!/usr/bin/env bash
# Run a command with N CPU hogs beside it: `scripts/with_hogs.sh 2 make pytest`.
#
# Each hog is a pure-Python busy loop (one core's worth of demand, at normal priority). They are
# started before the command and killed by their pids when it ends, however it ends (a failure,
# Ctrl-C). Prints the command's wall time and the 1-minute load average before and after, for
# the note: the suite must pass with two hogs running (issue 37), and its tests that measure time
# must answer honestly for a host this busy.
set -u
if [ $# -lt 2 ] || ! [[ $1 =~ ^[0-9]+$ ]]; then
  echo "usage: $0 NUM_HOGS COMMAND [ARGS...]" >&2
  exit 2
fi
num_hogs=$1
shift
hogs=()
stop_hogs() {
  for pid in "${hogs[@]}"; do kill "$pid" 2>/dev/null; done
  for pid in "${hogs[@]}"; do wait "$pid" 2>/dev/null; done
  hogs=()
}
trap stop_hogs EXIT
trap 'exit 130' INT TERM
for _ in $(seq "$num_hogs"); do
  python3 -c 'while True: pass' &
  hogs+=("$!")
done
load_before=$(cut -d' ' -f1 /proc/loadavg)
started=$(date +%s)
"$@"
status=$?
echo "with_hogs: ${num_hogs} hogs; '$*' exited ${status} after $(($(date +%s) - started)) s;" \
  "1-min load ${load_before} -> $(cut -d' ' -f1 /proc/loadavg)" >&2
exit $status
