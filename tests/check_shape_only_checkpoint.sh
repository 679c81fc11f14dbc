#!/bin/sh
# `ember make-checkpoint --shape-only`: a valid checkpoint (the CPU loads it: the data reads as
# zeros) whose model.safetensors is a sparse hole of the weights' length, taking no disk.
set -e
EMBER="$1"
DIR=$(mktemp -d /tmp/ember_shape_only.XXXXXX)
trap 'rm -rf "$DIR"' EXIT
"$EMBER" make-checkpoint --preset tiny-qwen3 --shape-only --out "$DIR" 2> "$DIR/log"
grep -q "SHAPES ONLY" "$DIR/log" || { cat "$DIR/log"; echo "FAIL: no SHAPES ONLY line"; exit 1; }
grep -q "SHAPES ONLY" "$DIR/config.json" || { echo "FAIL: config.json not marked"; exit 1; }
test ! -e "$DIR/model.safetensors.index.json" || { echo "FAIL: an index for one file"; exit 1; }
size=$(stat -c %s "$DIR/model.safetensors")
used=$(( $(stat -c %b "$DIR/model.safetensors") * $(stat -c %B "$DIR/model.safetensors") ))
echo "model.safetensors: $size bytes, $used on disk"
test "$size" -gt 3000000 || { echo "FAIL: $size bytes is not the weights' length"; exit 1; }
test "$used" -lt 1000000 || { echo "FAIL: $used bytes on disk (not sparse)"; exit 1; }
# every reader takes it: the CPU loads and runs it (zeros)
"$EMBER" generate --model "$DIR" --ids 1,2,3 --max-new-tokens 1 --greedy --print-ids \
    > "$DIR/out" 2>&1 || { cat "$DIR/out"; echo "FAIL: the CPU does not load it"; exit 1; }
echo "ok"
