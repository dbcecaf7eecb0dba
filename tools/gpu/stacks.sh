#!/usr/bin/env bash
# Runs a command THERE (the GPU machine); if it is still running after AFTER_S seconds (60), prints
# every thread's stack (cuda-gdb attaches: there is no gdb there) and kills it. For a test that
# never finishes within its limit: which call it is stuck in, not just that it was killed.
# Usage: AFTER_S=90 bash tools/gpu/stacks.sh LOG command args...
set -u
log=$1; shift
"$@" > "$log" 2>&1 &
pid=$!
for _ in $(seq 1 "${AFTER_S:-60}"); do
  kill -0 "$pid" 2>/dev/null || { wait "$pid"; exit $?; }
  sleep 1
done
echo "stacks.sh: still running after ${AFTER_S:-60} s: $*" | tee -a "$log"
timeout -s KILL 60 cuda-gdb -q -batch -p "$pid" -ex "set pagination off" -ex "thread apply all bt 25" \
  >> "$log" 2>&1 || echo "stacks.sh: cuda-gdb failed" >> "$log"
kill -KILL "$pid" 2>/dev/null
wait "$pid"
exit 137
