#!/usr/bin/env bash
# Every function declared EM_API in include/ember/*.h must be exported by the shared library
# (a definition compiled without its header's declaration gets the default hidden visibility).
# Usage: scripts/check_exports.sh path/to/libember.so
set -euo pipefail
cd "$(dirname "$0")/.."
lib=${1:?usage: $0 libember.so}
declared=$(grep -ho 'EM_API[^;(]*(' include/ember/*.h | sed -E 's/.*[ *]([a-z_0-9]+)\($/\1/' |
  grep '^em_' | sort -u)
exported=$(nm -D --defined-only "$lib" | awk '{print $3}' | sort -u)
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
if [ -n "$missing" ]; then
  echo "declared EM_API but not exported by $lib:" >&2
  echo "$missing" >&2
  exit 1
fi
echo "all $(echo "$declared" | wc -l) EM_API functions are exported by $lib"
