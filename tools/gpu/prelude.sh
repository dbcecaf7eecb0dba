# Sourced first by the GPU scripts (run THERE): `. "$(dirname "$0")/prelude.sh" [NAME]`.
# Goes to the repo root, sets B (the carried build), the library path (env.sh) and the kernel
# cache; with NAME, also a fresh results folder D=/tmp/NAME, REAL_OUT (the device tool's $OUT,
# where the scripts put their archive), at() and pack_out().
set -u
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
B=.gpu/build
. tools/gpu/env.sh
export LIVEFUSE_CACHE_DIR=/tmp/lf-kcache PYTHONUNBUFFERED=1
# One GPT-2 small f16 decode process as issue 20 measures it (random weights, prompt 32, 256 new
# tokens, 4 runs); the caller adds --cache and --json.
GPT2_DECODE=("$B/tools/generate/livefuse-generate" --random 1 --preset gpt2 --dtype f16 --device cuda
             --prompt-len 32 --steps 256 --runs 4 --quiet)
if [ -n "${1:-}" ]; then
  REAL_OUT=${OUT:-$PWD/gpu-out}
  D=/tmp/$1
  rm -rf "$D"; mkdir -p "$D" "$REAL_OUT"
  START=$(date +%s)
  PACK_NAME=$1
  # at LABEL: a part's heading with the seconds since the start; pack_out: $D archived as
  # $REAL_OUT/NAME.tgz (after each part: a call cut short still brings back what ran).
  at() { echo "== $1 ($(( $(date +%s) - START )) s)"; }
  pack_out() { tar -czf "$REAL_OUT/$PACK_NAME.tgz" -C "$D" . 2>/dev/null; }
fi
# bert_compares "DTYPE:BATCHES:SEQ ...": bert_compare (below) for each configuration, each under a
# heading; the calling script's at() and pack_out() (each configuration packed as it ends).
bert_compares() {
  local cfg dt batch seq
  for cfg in $1; do
    IFS=: read -r dt batch seq <<< "$cfg"
    at "BERT vs PyTorch: $dt batch $batch seq $seq"
    bert_compare "$dt" "$batch" "$seq"
    pack_out
  done
}
# gpt_compare: bench/gpt/compare.py for GPT-2 f16 and Llama-1B bf16 (prompt 32, 256 tokens, 4
# livefuse runs, PyTorch's peers in the same run; GPT_COMPARE_S, default 300 s), its JSON and log
# in $D as gpt_compare.*, the table printed.
gpt_compare() {
  timeout -s KILL "${GPT_COMPARE_S:-300}" python3 bench/gpt/compare.py "$B/tools/generate/livefuse-generate" \
    --models gpt2,llama --dtype gpt2:f16,llama:bf16 --skip hf_generate --prompt 32 --steps 256 --timeout 150 \
    --hf-iters 1 --livefuse-runs 4 --workdir /tmp/lf-gpt --json "$D/gpt_compare.json" > "$D/gpt_compare.log" 2>&1
  echo "compare.py rc=$?"
  tail -24 "$D/gpt_compare.log"
}
# bert_median NAME DTYPE BATCH [ENV...]: one livefuse-bert process (BERT-base, random weights,
# seq 128, 200 iterations after 3 s of warm-up; ENV its settings), its log and JSON in $D as NAME;
# prints its median ms a forward, or "failed" and the log's last lines.
bert_median() {
  local name=$1 dt=$2 batch=$3; shift 3
  env "$@" timeout -k 5 90 "$B/tools/bert/livefuse-bert" --random 1 --preset base --dtype "$dt" --device cuda \
    --batch "$batch" --seq 128 --iters 200 --warmup-ms 3000 --quiet --json "$D/$name.json" > "$D/$name.log" 2>&1
  python3 -c "import json,sys; print(round(json.load(open(sys.argv[1]))['timing']['median_ms'], 4))" \
    "$D/$name.json" 2>/dev/null || echo "failed: $(tail -2 "$D/$name.log" | tr '\n' ' ')"
}
# run_users: the user programs in the three modes (tools/gpu/users.sh, RUNS=1, EXIT_RUNS=2), their
# log in $D/users.
run_users() {
  RUNS=1 EXIT_RUNS=2 timeout -s KILL "${USERS_S:-200}" bash tools/gpu/users.sh "$B" "$D/users" > /dev/null 2>&1
  cat "$D/users/users.log"
}
# run_suites "test_x[:filter] ...": each test binary (with a doctest -tc filter) under a
# SUITE_S (150 s) limit, its log in $D/<binary>.log, its case counts and first errors printed.
run_suites() {
  local s t filter
  for s in $1; do
    IFS=: read -r t filter <<< "$s"
    timeout -s KILL "${SUITE_S:-150}" "$B/tests/$t" ${filter:+-tc="$filter"} > "$D/$t.log" 2>&1
    echo "$t ${filter:+$filter }rc=$? $(grep 'test cases' "$D/$t.log")"
    grep -B2 -A8 "ERROR" "$D/$t.log" | head -30
  done
}
# attention_bench [ARGS]: livefuse-bench-attention-decode --iters 100 ARGS (log and JSON in $D,
# named $BENCH_NAME: attention_decode; BENCH_ENV: a VAR=value setting for the process, e.g.
# $BASE_LD), then the decoder shapes' lines and their graph columns.
attention_bench() {
  local n=${BENCH_NAME:-attention_decode}
  env ${BENCH_ENV:-} timeout -s KILL 240 "$B/bench/livefuse-bench-attention-decode" --iters 100 --json "$D/$n.json" "$@" \
    > "$D/$n.log" 2>&1
  echo "attention bench $* rc=$?"
  grep -E "^(gpt2|llama-gqa|gqa d 128) |in a graph|all PASS|FAIL" "$D/$n.log" | grep -v "batch\|view\|strided" \
    | sed -E 's/\|.*(PASS|FAIL)/ \1/' | cut -c1-250
}
# setting_ab VAR ROUNDS: decode processes alternating VAR=1 | VAR=0 (tools/gpu/ab_generate.sh;
# Llama-1B bf16 and GPT-2 f16, concat cache, 256 tokens x 3 runs), appended to $D/ab.log.
setting_ab() {
  local m
  for m in llama-1b:bf16 gpt2:f16; do
    echo "== $m concat, $1=1 | 0 alternating"
    AB_A="$1=1" AB_B="$1=0" MODEL=${m%%:*} DTYPE=${m##*:} ROUNDS=$2 STEPS=256 RUNS=3 \
      timeout -s KILL 300 bash tools/gpu/ab_generate.sh 2>&1 | tee -a "$D/ab.log"
  done
}
# setting_sweep VAR: the context sweep's end points (Llama-1B bf16 concat, 128 and 4096 keys)
# with VAR=1, then VAR=0, appended to $D/sweep.log.
setting_sweep() {
  local v
  for v in 1 0; do
    echo "== sweep, Llama-1B bf16 concat, $1=$v"
    env "$1=$v" SWEEP_LENS="128 4096" SWEEP_MODES="on:concat" timeout -s KILL 200 bash tools/gpu/sweep.sh 2>&1 | tee -a "$D/sweep.log"
  done
}
# base_library BINARY: unpacks the base library carried beside the build (.gpu/base.so.xz, or
# .gz: another tree's liblivefuse.so) into $B/base and sets BASE_LD, the environment setting that
# loads it first; checks that BINARY then loads it, and loads at all. Exits when it cannot.
base_library() {
  mkdir -p "$B/base"
  if [ -f .gpu/base.so.xz ]; then xz -dc .gpu/base.so.xz; else gunzip -c .gpu/base.so.gz; fi \
    > "$B/base/liblivefuse.so" || { echo "no .gpu/base.so.xz or .gpu/base.so.gz"; exit 1; }
  BASE_LD="LD_LIBRARY_PATH=$PWD/$B/base:${LD_LIBRARY_PATH:-}"
  env "$BASE_LD" ldd "$1" | grep livefuse
  env "$BASE_LD" "$1" --help >/dev/null 2>&1 || { echo "base library does not load"; exit 1; }
}
# report_plans REPORT [GROUP]: a LIVEFUSE_REPORT's counters of GROUP (none if empty) and its plans
# of 10 ops or more: state, ops, the sampled plan and eager medians (us).
report_plans() {
  python3 -c "import json,sys; r=json.load(open(sys.argv[1])); g=sys.argv[2]
if g: print({k: v for k, v in r['counters'].items() if k.startswith(g)})
for p in r['plans']:
    s = p.get('sampling') or {}
    if len(p['ops']) >= 10: print(f\"plan {p['id']} {p['state']} {len(p['ops'])} ops: fused {s.get('fused_median_us')} us vs eager {s.get('eager_median_us')}\")" \
    "$1" "${2:-}" 2>&1 | tail -8
}
# bert_compare DTYPE BATCH SEQ: bench/bert/compare.py (PyTorch peers in the same run) under a
# COMPARE_S (200 s) limit, JSON and log in $D; prints its status and its table.
bert_compare() {
  local name="$1_b${2//,/_}_s$3"
  timeout -k 5 "${COMPARE_S:-200}" python3 bench/bert/compare.py "$B/tools/bert/livefuse-bert" --dtype "$1" \
    --batch "$2" --seq "$3" --iters 100 --livefuse-warmup-ms 3000 --timeout 100 --workdir /tmp/lf-bert \
    --json "$D/bert_compare_$name.json" > "$D/bert_$name.log" 2>&1
  echo "compare.py rc=$?"
  tail -10 "$D/bert_$name.log"
}
