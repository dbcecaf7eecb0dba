#!/usr/bin/env bash
# The differential fuzzes' GPU cases (encoder serving, decode loops) under each switch in turn --
# the features off by default and the comparisons' off switches: a user who turns one on or off
# must still get eager's values. Run THERE after tools/gpu/pack.sh. A failing program's reruns and
# reports land in $OUT/fr/<switch> (tests/fuzz_util.hpp, diagnose).
# Usage (device tool): bash tools/gpu/lab/fuzz_flags.sh   [FF_BERT=120 FF_DECODE=80
#   FF_FLAGS="LIVEFUSE_GEMM_TUNE=1 ..." FF_S=90 (each fuzz's limit)]
. "$(dirname "$0")/../prelude.sh" lf-fuzz-flags
flags=${FF_FLAGS:-"LIVEFUSE_GEMM_TUNE=1 LIVEFUSE_DECODE_TC=1 LIVEFUSE_PDL=0 LIVEFUSE_GEMV_NORM=2
  LIVEFUSE_GEMV_PAIR=2 LIVEFUSE_ATTENTION=1 LIVEFUSE_JIT=nvrtc LIVEFUSE_FAMILY_GRAPH=0
  LIVEFUSE_FAMILY_RECORD=0 LIVEFUSE_DECODE_LEAN=0 LIVEFUSE_SEAM=0 LIVEFUSE_WRITE_BATCH=0
  LIVEFUSE_ATTENTION_APPEND=0 LIVEFUSE_SPLIT_K_ROWS=0 LIVEFUSE_CUDA_CACHE=0 LIVEFUSE_GEMV=0"}
nvidia-smi -L
for f in $flags; do
  tag=$(echo "$f" | tr -c 'A-Za-z0-9\n' _)
  mkdir -p "$REAL_OUT/fr/$tag"
  for t in bert decoder; do
    if [ $t = bert ]; then n=${FF_BERT:-120}; tc="bert fuzz on the GPU*"; var=LIVEFUSE_FUZZ_BERT_PROGRAMS
    else n=${FF_DECODE:-80}; tc="decoder fuzz on the GPU*"; var=LIVEFUSE_FUZZ_DECODE_PROGRAMS; fi
    log=$D/${t}_$tag.log
    env "$f" "$var=$n" LIVEFUSE_FUZZ_REPORT_DIR="$REAL_OUT/fr/$tag" timeout -s KILL "${FF_S:-90}" \
      "$B/tests/test_$t" -tc="$tc" > "$log" 2>&1
    rc=$?
    echo "[$f] $t rc=$rc ($(( $(date +%s) - START )) s): $(grep -oE '[0-9]+ programs, .*' "$log" | head -1 | cut -c1-160)"
    [ $rc = 0 ] && continue
    grep -E "ERROR|again|request|step [0-9]" "$log" | grep -v logged | cut -c1-300 | head -14
    cp "$log" "$REAL_OUT/"  # (the device tool brings back only a few files: the failing ones)
  done
done
echo "== done ($(( $(date +%s) - START )) s)"
