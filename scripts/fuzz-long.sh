#!/usr/bin/env bash
# Runs every fuzz target for MINUTES minutes (default 10), two at a time, from the seed corpora,
# and reports runs, coverage and any crash. Needs the fuzz build (scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
minutes=${1:-10}
[ -d build-fuzz/fuzz ] || { CC=clang cmake -S . -B build-fuzz -G Ninja -DEMBER_FUZZ=ON -DEMBER_BUILD_TESTS=OFF >/dev/null; }
cmake --build build-fuzz >/dev/null
run() {
  local f=$1 name short corpus dict=()
  name=$(basename "$f"); short=${name#fuzz_}
  corpus=fuzz/corpus/$name; [ -d "$corpus" ] || corpus=fuzz/corpus/$short
  for d in "fuzz/$name.dict" "fuzz/$short.dict"; do [ -f "$d" ] && dict=(-dict="$d"); done
  mkdir -p "build-fuzz/long/$name"
  if "$f" -max_total_time=$((minutes * 60)) -rss_limit_mb=2048 -timeout=20 "${dict[@]}" \
      -artifact_prefix="build-fuzz/long/$name-" "build-fuzz/long/$name" "$corpus" \
      >"build-fuzz/long/$name.log" 2>&1; then
    echo "$name: $(grep -o 'Done [0-9]* runs in [0-9]* second(s)' "build-fuzz/long/$name.log" | tail -1), $(grep -o 'cov: [0-9]*' "build-fuzz/long/$name.log" | tail -1)"
  else
    echo "$name: FAILED"; tail -30 "build-fuzz/long/$name.log"; return 1
  fi
}
pids=(); status=0
for f in build-fuzz/fuzz/fuzz_*; do
  run "$f" & pids+=($!)
  if [ ${#pids[@]} -ge 2 ]; then wait "${pids[0]}" || status=1; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p" || status=1; done
exit $status
