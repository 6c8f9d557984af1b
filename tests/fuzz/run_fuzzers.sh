#!/usr/bin/env bash
# Builds and runs reft's libFuzzer targets (docs/fuzzing.md). Used by the CTest tests of
# tests/fuzz (label "fuzz") and by hand:
#
#   run_fuzzers.sh build SRC DIR                configure + build the clang build in DIR
#   run_fuzzers.sh run SRC DIR TARGET SECONDS [libFuzzer args...]
#                                               run one fuzzer for SECONDS over its seed corpus
#   run_fuzzers.sh seeds SRC DIR [TARGET...]    rewrite tests/fuzz/corpus/<target>/ from the
#                                               fuzzers' seed-writer mode (keeps regress_*)
#
# Exit status: 0 fine, 1 build failure or a finding (crash, sanitizer report, leak, timeout,
# out-of-memory, failed property), 77 clang-14 / libclang-rt-14-dev missing (CTest: skipped).
# New inputs a run discovers go to DIR/work/TARGET/corpus, never into the committed corpus;
# a finding is saved as DIR/work/TARGET/crash-* (and printed in base64 when small).
# libFuzzer's full output is kept in DIR/work/TARGET/fuzz.log; a failure prints its tail.
# REFT_FUZZ_JOBS: build parallelism (default nproc). REFT_FUZZ_CC / REFT_FUZZ_CXX: compilers.
set -euo pipefail

usage() { sed -n '2,16p' "$0" >&2; exit 2; }
[ $# -ge 3 ] || usage
# The compilers (override for another clang; its libFuzzer runtime must be installed).
CC=${REFT_FUZZ_CC:-clang-14}
CXX=${REFT_FUZZ_CXX:-clang++-14}
have_toolchain() {
  command -v "$CXX" >/dev/null && command -v "$CC" >/dev/null &&
    [ -f "$("$CXX" -print-runtime-dir)/libclang_rt.fuzzer-x86_64.a" ]
}
if ! have_toolchain; then
  echo "SKIPPED: $CXX with its libFuzzer runtime is not installed" \
       "(tools/setup.sh installs clang-14 and libclang-rt-14-dev)"
  exit 77
fi
cmd=$1 src=$(cd "$2" && pwd) dir=$(mkdir -p "$3" && cd "$3" && pwd)
fuzzers=(local_frame_fuzzer segment_fuzzer config_fuzzer slot_meta_fuzzer aor_hyper_fuzzer
         peer_admin_fuzzer persist_manifest_fuzzer)

build() {
  local flags="-O1 -gline-tables-only -fno-omit-frame-pointer -fsanitize=address,undefined"
  flags+=" -fno-sanitize-recover=undefined -fsanitize=fuzzer-no-link"
  local t0=$SECONDS
  if [ ! -f "$dir/build.ninja" ]; then
    cmake -S "$src" -B "$dir" -G Ninja -DREFT_FUZZ_BUILD=ON -DCMAKE_BUILD_TYPE=Fuzz \
      -DCMAKE_C_COMPILER="$CC" -DCMAKE_CXX_COMPILER="$CXX" \
      "-DCMAKE_C_FLAGS_FUZZ=$flags" "-DCMAKE_CXX_FLAGS_FUZZ=$flags" \
      -DREFT_WITH_CUDA=OFF -DREFT_WITH_HIP=OFF -DREFT_WITH_PYTHON=OFF -DREFT_BUILD_BENCH=OFF \
      -DCMAKE_EXPORT_COMPILE_COMMANDS=OFF >"$dir.configure.log" 2>&1 ||
      { cat "$dir.configure.log"; echo "FAILED: configuring the clang build"; exit 1; }
  fi
  cmake --build "$dir" --target reft_fuzzers -j "${REFT_FUZZ_JOBS:-$(nproc)}"
  echo "fuzzers built in $((SECONDS - t0)) s: $dir/tests/fuzz"
}

run() {
  local target=$1 seconds=$2
  shift 2
  local exe="$dir/tests/fuzz/$target" seeds="$src/tests/fuzz/corpus/$target"
  local work="$dir/work/$target"
  [ -x "$exe" ] || { echo "FAILED: $exe missing (did fuzz_build fail?)"; exit 1; }
  [ -d "$seeds" ] || { echo "FAILED: no seed corpus $seeds"; exit 1; }
  rm -rf "$work" && mkdir -p "$work/corpus"
  # UBSan must abort (libFuzzer then reports the input); leaks are findings too. libFuzzer's
  # own default error exit code is 77, CTest's "skipped": use 1.
  export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=0:handle_abort=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
  export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
  # libFuzzer's progress lines (thousands) go to a log: CI keeps only the head and the tail of
  # a long output, and the lines that matter are the last ones (the report and the input).
  local rc=0 log="$work/fuzz.log"
  (cd "$work" && "$exe" -max_total_time="$seconds" -timeout=25 -rss_limit_mb=2560 \
      -error_exitcode=1 -timeout_exitcode=1 -print_final_stats=1 -print_funcs=0 \
      -artifact_prefix="$work/" "$@" corpus "$seeds") >"$log" 2>&1 || rc=$?
  grep -m1 '^INFO: Seed:' "$log" || true
  if [ $rc -ne 0 ]; then
    echo "--- the last 120 lines of libFuzzer's output ($log) ---"
    grep -v -E '^#[0-9]+[[:space:]]+(NEW|REDUCE|pulse|RELOAD)' "$log" | tail -n 120
    echo "FAILED: $target found a problem (exit $rc); reproduce with: $exe <input>"
    for f in "$work"/crash-* "$work"/leak-* "$work"/timeout-* "$work"/oom-* "$work"/slow-unit-*; do
      [ -f "$f" ] || continue
      echo "input $f ($(stat -c %s "$f") bytes)"
      [ "$(stat -c %s "$f")" -le 4096 ] && { echo "base64:"; base64 "$f"; }
    done
    exit 1
  fi
  grep -E '^stat::(number_of_executed_units|new_units_added|peak_rss_mb)' "$log" || true
  echo "OK: $target ran ${seconds}s over $(ls "$seeds" | wc -l) seeds without a finding"
}

seeds() {
  local targets=("$@")
  [ ${#targets[@]} -gt 0 ] || targets=("${fuzzers[@]}")
  for t in "${targets[@]}"; do
    local out="$src/tests/fuzz/corpus/$t"
    # Regression inputs of fixed bugs (regress_*) are kept; everything else is rewritten.
    mkdir -p "$out" && find "$out" -maxdepth 1 -type f ! -name 'regress_*' -delete
    REFT_FUZZ_WRITE_SEEDS="$out" "$dir/tests/fuzz/$t"
  done
}

case "$cmd" in
  build) build ;;
  run) [ $# -ge 5 ] || usage; shift 3; run "$@" ;;
  seeds) shift 3; seeds "$@" ;;
  *) usage ;;
esac
