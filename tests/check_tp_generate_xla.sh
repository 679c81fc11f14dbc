#!/bin/sh
# `ember generate --device xla --tp N --print-ids` on N devices of XLA's CPU plugin in one
# process: the last line of stdout must be the expected ids (transformers' greedy ids, the same
# list tp_generate_mpi2 checks). Exits 77 (skipped, loudly) when no XLA plugin is found.
# Usage: check_tp_generate_xla.sh EMBER MODEL_DIR N IDS EXPECTED [MORE ARGS, e.g. --compile]
ember=$1 model=$2 n=$3 ids=$4 want=$5
shift 5
err=$(mktemp)
out=$(EMBER_PJRT_OPTIONS=${EMBER_PJRT_OPTIONS:-cpu_device_count=$n} "$ember" generate \
  --model "$model" --ids "$ids" --max-new-tokens 16 --greedy --device xla --tp "$n" \
  --print-ids "$@" 2>"$err")
rc=$?
grep -v '^I0000\|^WARNING: All log' "$err" >&2
if grep -q "no device named 'xla" "$err"; then  # 'xla' or 'xla:0'
  rm -f "$err"
  echo "SKIPPED: no XLA PJRT plugin (install xla-cpu-pjrt or set EMBER_PJRT_XLA_PLUGIN)"
  exit 77
fi
rm -f "$err"
echo "$out"
last=$(echo "$out" | tail -n 1)
[ "$rc" = 0 ] || { echo "ember exited $rc"; exit 1; }
[ "$last" = "$want" ] || { echo "got $last, want $want"; exit 1; }
