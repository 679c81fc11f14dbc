#!/bin/sh
# `mpirun -np N ember generate ... --print-ids` (tensor/expert parallelism over N processes): the
# last line of stdout must be the expected ids (transformers' greedy ids) and stderr must hold a
# line of the placement report (fixed string NEED: the rule or the KV-head replication it must
# show). Only rank 0 prints the ids and the report.
# Usage: check_tp_generate_mpi.sh MPIEXEC N EXPECTED NEED EMBER GENERATE-ARGS...
mpiexec=$1 n=$2 want=$3 need=$4 ember=$5
shift 5
err=$(mktemp)
out=$("$mpiexec" --oversubscribe --timeout 120 -np "$n" "$ember" generate "$@" --print-ids \
  2>"$err")
rc=$?
cat "$err" >&2
echo "$out"
last=$(echo "$out" | tail -n 1)
reports=$(grep -c '^tensor parallelism: degree' "$err")
found=$(grep -cF -- "$need" "$err")
rm -f "$err"
[ "$rc" = 0 ] || { echo "mpirun exited $rc"; exit 1; }
[ "$last" = "$want" ] || { echo "got $last, want $want"; exit 1; }
[ "$reports" = 1 ] || { echo "$reports placement reports on stderr, want 1 (rank 0's)"; exit 1; }
[ "$found" -ge 1 ] || { echo "the placement report lacks '$need'"; exit 1; }
echo "ok"
