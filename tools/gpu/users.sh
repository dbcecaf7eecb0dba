#!/usr/bin/env bash
# The user programs (tests/users; PROGS picks some) on the GPU machine: each in the three modes,
# RUNS (default 3) runs each,
# and EXIT_RUNS (default 5) exits with results pending per mode (status and stderr of each that
# fails in exit_failures.log, with its raw stack from USERS_CRASH_STACK; a backtrace of one by
# cuda-gdb unless EXIT_GDB=0).
# Usage: bash tools/gpu/users.sh BUILD_DIR OUT_DIR   (the environment set up as session.sh does)
set -u
B=$1
OUT=$2
mkdir -p "$OUT"
# Public headers only, the habits users have; a run passes only with eager's values, and with
# fusion on only when plans engaged (tests/users/user_util.hpp).
for prog in ${PROGS:-reachable_memory threads_and_exits kernel_errors}; do
  for mode in "LIVEFUSE=on" "LIVEFUSE=off" "LIVEFUSE=on LIVEFUSE_SAMPLE=0"; do
    for i in $(seq 1 "${RUNS:-3}"); do
      log="$OUT/users_${prog}_$(echo "$mode" | tr -c 'A-Za-z0-9\n' '_')_$i.log"
      env $mode timeout -k 5 60 "$B/tests/users/users_$prog" > "$log" 2>&1
      rc=$?
      echo "users_$prog [$mode] run $i rc=$rc $(grep -c '^FAIL' "$log") failures" >> "$OUT/users.log"
      # Passing runs' logs are dropped when there are many (RUNS=20 for the crash cases).
      [ "${RUNS:-3}" -gt 3 ] && [ $rc -eq 0 ] && rm -f "$log"
    done
  done
done
for mode in "LIVEFUSE=on" "LIVEFUSE=off" "LIVEFUSE=on LIVEFUSE_SAMPLE=0"; do
  bad=0
  for i in $(seq 1 "${EXIT_RUNS:-5}"); do
    env $mode USERS_CRASH_STACK=1 timeout -k 5 60 "$B/tests/users/users_threads_and_exits" --exit 3 > /dev/null 2> "$OUT/exit_err.log"
    rc=$?
    if [ $rc -ne 3 ]; then
      bad=$((bad + 1))
      # What a failing run said (its status and the end of its stderr): the gdb reruns below
      # may not fail again.
      { echo "[$mode] run $i rc=$rc"; tail -60 "$OUT/exit_err.log"; } >> "$OUT/exit_failures.log"
    fi
  done
  rm -f "$OUT/exit_err.log"
  echo "users exit-pending [$mode] $bad of ${EXIT_RUNS:-5} runs did not exit with 3" >> "$OUT/users.log"
  if [ $bad -gt 0 ] && [ "${EXIT_GDB:-1}" = 1 ] && command -v cuda-gdb > /dev/null; then
    # Where it dies: a backtrace of every thread from a run that does (up to 3 tries).
    for i in 1 2 3; do
      env $mode timeout -k 5 120 cuda-gdb -q -batch -ex run -ex "thread apply all bt 25" \
        --args "$B/tests/users/users_threads_and_exits" --exit 3 > "$OUT/exit_gdb_$i.log" 2>&1
      grep -q "SIGSEGV\|SIGABRT" "$OUT/exit_gdb_$i.log" && { grep -A40 "SIGSEGV\|SIGABRT" "$OUT/exit_gdb_$i.log" | head -60; break; }
    done
  fi
done
cat "$OUT/users.log"
for f in "$OUT"/users_*.log; do grep -q "^FAIL" "$f" && { echo "-- $f"; grep -v "^FAIL" "$f"; grep "^FAIL" "$f" | head -5; }; done

