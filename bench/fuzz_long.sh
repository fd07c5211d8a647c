#!/bin/sh
# Long libFuzzer runs that grow the committed seed corpora (docs/fuzzing.md, "Long runs").
#
#   bench/fuzz_long.sh [MINUTES_EACH [TARGET...]]
#
# Builds the fuzz targets in build-fuzz if needed (clang, configured as .ci/sanitize-and-fuzz
# does; needs clang and libclang-rt-14-dev), then runs each TARGET (default: decode_fuzz
# ini_fuzz push_line_fuzz) for MINUTES_EACH minutes (default: 60 in all, divided among them)
# on a scratch directory with fuzz/corpus/<dir> as its second corpus, so the committed seeds
# are read, never written, while fuzzing. Then it merges into fuzz/corpus/<dir> only the new
# inputs that add coverage (-merge=1) and prints how many files each corpus gained: review
# them with `git status fuzz/corpus` and commit them. A finding (crash-*, leak-*, timeout-*,
# oom-*) is kept in the scratch directory, whose path is printed; the exit status is then 1.
# Environment: FRUCTOSA_FUZZ_BUILD (build directory, default build-fuzz), FRUCTOSA_BUILD_JOBS
# (compile jobs, default nproc), FRUCTOSA_FUZZ_WORK (scratch directory, default a new one under
# ${TMPDIR:-/tmp}).
set -eu
cd "$(dirname "$0")/.."
root=$(pwd)
build=${FRUCTOSA_FUZZ_BUILD:-build-fuzz}
case $build in /*) ;; *) build=$root/$build ;; esac

if [ $# -gt 0 ]; then
  minutes=$1
  shift
fi
targets=${*:-decode_fuzz ini_fuzz push_line_fuzz}
count=$(echo "$targets" | wc -w)
minutes=${minutes:-$((60 / count))}
usage="usage: $0 [MINUTES_EACH [TARGET...]]: whole minutes, at least 1; targets decode_fuzz ini_fuzz push_line_fuzz"
case $minutes in
  '' | *[!0-9]* | 0) echo "$usage" >&2; exit 2 ;;
esac
for target in $targets; do
  case $target in
    decode_fuzz | ini_fuzz | push_line_fuzz) ;;
    *) echo "$usage" >&2; exit 2 ;;
  esac
done

# The same sanitizer settings as CI: stop at the first error; suppressions name third-party
# libraries only.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:detect_leaks=1:check_initialization_order=1:suppressions=$root/tests/sanitizers/asan.supp"
export LSAN_OPTIONS="suppressions=$root/tests/sanitizers/lsan.supp:print_suppressions=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:suppressions=$root/tests/sanitizers/ubsan.supp"

if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFRUCTOSA_BUILD_TESTS=OFF -DFRUCTOSA_FUZZ=ON \
    -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
fi
# shellcheck disable=SC2086
cmake --build "$build" -j"${FRUCTOSA_BUILD_JOBS:-$(nproc)}" --target $targets

work=${FRUCTOSA_FUZZ_WORK:-$(mktemp -d "${TMPDIR:-/tmp}/fructosa-fuzz.XXXXXX")}
mkdir -p "$work"
echo "fuzzing $targets, $minutes min each; scratch directory $work"

findings=0
summary=""
for target in $targets; do
  case $target in
    decode_fuzz) dir=decode max_len=4096 ;;
    ini_fuzz) dir=ini max_len=8192 ;;
    push_line_fuzz) dir=push max_len=4096 ;;
  esac
  seeds=$root/fuzz/corpus/$dir
  scratch=$work/$dir
  mkdir -p "$scratch/new"
  limits="-max_len=$max_len -timeout=10 -rss_limit_mb=2048"
  echo "== $target: $minutes min, log $scratch/fuzz.log"
  # shellcheck disable=SC2086
  if ! "$build/fuzz/$target" -max_total_time=$((minutes * 60)) $limits -print_final_stats=1 \
      -artifact_prefix="$scratch/" "$scratch/new" "$seeds" >"$scratch/fuzz.log" 2>&1; then
    findings=1
    echo "$target stopped on a finding:"
    grep -E '^(==[0-9]+==ERROR|SUMMARY)' "$scratch/fuzz.log" || tail -n 20 "$scratch/fuzz.log"
  fi
  grep -E '^stat::(number_of_executed_units|peak_rss_mb|new_units_added)' "$scratch/fuzz.log" || true

  before=$(find "$seeds" -type f | wc -l)
  # shellcheck disable=SC2086
  "$build/fuzz/$target" -merge=1 $limits "$seeds" "$scratch/new" >"$scratch/merge.log" 2>&1 ||
    { findings=1; echo "$target: the merge failed, see $scratch/merge.log"; }
  after=$(find "$seeds" -type f | wc -l)
  rm -rf "$scratch/new"
  summary="$summary
  fuzz/corpus/$dir: $before -> $after files (+$((after - before)))"
  for artifact in "$scratch"/crash-* "$scratch"/leak-* "$scratch"/timeout-* "$scratch"/oom-*; do
    if [ -e "$artifact" ]; then echo "finding: $artifact (reproduce: $build/fuzz/$target $artifact)"; fi
  done
done

echo "corpora:$summary"
echo "review and commit the new inputs: git status fuzz/corpus"
if [ "$findings" -ne 0 ]; then
  echo "findings and logs are in $work"
  exit 1
fi
echo "no finding; logs in $work"
