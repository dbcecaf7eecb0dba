#!/usr/bin/env bash
# What sessions without a GPU left to run on one (run THERE after tools/gpu/pack.sh). Each part
# prints its verdict line; failing logs are copied to $OUT. PENDING_PARTS picks parts (default
# "1 2 3 4", ~8-10 min on an H100: more than one call may take -- split it, e.g. "1 2 4" then "3").
#  1. The fuzzes' GPU cases with their stops (plan runs stopped part-way), failures (a plan run
#     failing outright) and switches, new seeds:
#     encoder serving (PENDING_BERT programs), decode loops (PENDING_DECODE), random programs
#     (the differential fuzz: LIVEFUSE_FUZZ_PROGRAMS / 10 on the GPU); reports in $OUT/fr.
#  2. The decode fuzz under LIVEFUSE_GEMV_NORM=2: the norm chain's values are bound now, so no
#     capture may be discarded for held memory (the fuzz checks the counter).
#  3. Every suite (test_runtime's capture-memory cases included) and the user programs.
#  4. The persistent decode labs (tools/gpu/lab/decode_persistent.sh), JSON in $OUT: the GEMV
#     chain's and the whole step's deep forms (tile groups in flight) and the barrier of flags.
. "$(dirname "$0")/../prelude.sh" lf-pending
nvidia-smi -L
mkdir -p "$REAL_OUT/fr"
fuzz() {  # fuzz NAME BINARY CASE ENV...
  local name=$1 bin=$2 tc=$3
  shift 3
  env "$@" LIVEFUSE_FUZZ_REPORT_DIR="$REAL_OUT/fr" timeout -s KILL "${PENDING_FUZZ_S:-200}" \
    "$B/tests/$bin" -tc="$tc" > "$D/$name.log" 2>&1
  local rc=$?
  echo "[$name] rc=$rc ($(( $(date +%s) - START )) s): $(grep -oE '(programs|[0-9]+ programs).*' "$D/$name.log" | head -1 | cut -c1-200)"
  [ $rc = 0 ] || { grep -E "ERROR|again" "$D/$name.log" | cut -c1-300 | head -12; cp "$D/$name.log" "$REAL_OUT/"; }
}
part1() {
  echo "== 1. fuzzes with stops, failures and switches"
  fuzz bert test_bert "bert fuzz on the GPU*" LIVEFUSE_FUZZ_BERT_PROGRAMS=${PENDING_BERT:-300} LIVEFUSE_FUZZ_BERT_FIRST=40000
  fuzz decode test_decoder "decoder fuzz on the GPU*" LIVEFUSE_FUZZ_DECODE_PROGRAMS=${PENDING_DECODE:-200} LIVEFUSE_FUZZ_DECODE_FIRST=40000
  fuzz differential test_replacement "differential: random programs*GPU*" LIVEFUSE_FUZZ_PROGRAMS=2000
}
part2() {
  echo "== 2. GEMV_NORM=2"
  fuzz decode_gemv_norm2 test_decoder "decoder fuzz on the GPU*" LIVEFUSE_GEMV_NORM=2 LIVEFUSE_FUZZ_DECODE_PROGRAMS=100
}
part3() {
  echo "== 3. suites and users"
  SUITE_S=${PENDING_SUITE_S:-240} run_suites "test_runtime test_ops test_planner test_monitor test_inspect test_bert test_decoder test_replacement"
  mkdir -p "$D/users"
  RUNS=1 EXIT_RUNS=1 EXIT_GDB=0 timeout -s KILL 240 bash tools/gpu/users.sh "$B" "$D/users" 2>&1 | tail -12
}
part4() {
  echo "== 4. labs"
  OUT=$REAL_OUT DP_REPS=${DP_REPS:-50} timeout -s KILL 300 bash tools/gpu/lab/decode_persistent.sh
}
for part in ${PENDING_PARTS:-1 2 3 4}; do "part$part"; done
echo "== done ($(( $(date +%s) - START )) s)"
