#!/bin/sh
# Command-line checks of the ember tool (argument 1): option values are parsed strictly (a bad
# number is an error naming the option, exit status 2), and `ember devices` gives one line per
# missing device kind, the plugin search paths only with --verbose.
ember="$*"
fail=0
bad() { # expect exit status 2 and the option named on stderr: bad OPTION ARGS...
    opt=$1
    shift
    err=$($ember "$@" 2>&1 >/dev/null)
    rc=$?
    if [ $rc -ne 2 ] || ! printf '%s' "$err" | grep -q -- "$opt"; then
        echo "FAIL: ember $* -> status $rc, stderr: $err"
        fail=1
    else
        echo "ok: ember $* -> $err"
    fi
}
bad --max-new-tokens generate --model m --prompt p --max-new-tokens abc
bad --max-new-tokens generate --model m --prompt p --max-new-tokens -3
bad --max-new-tokens generate --model m --prompt p --max-new-tokens 12x
bad --temperature generate --model m --prompt p --temperature 1x
bad --top-p generate --model m --prompt p --top-p 2
bad --seed generate --model m --prompt p --seed -1
bad --bucket generate --model m --prompt p --compile --bucket 0
bad --top-k chat --model m --top-k -1
bad --max-new-tokens chat --model m --max-new-tokens ""
bad --repetition-penalty chat --model m --repetition-penalty nan
bad --steps bench decode --steps 0
bad --batches bench decode --batches 1,x
bad --launch-us bench moe --launch-us fast
bad --tp-shard bench moe --tp-shard 0
bad --tp-shard bench moe --tp-shard 8 --impls loop
bad --threads bench pool --threads 1,,2
bad --seconds bench tokenize --seconds -1
bad --layers make-checkpoint --out /nonexistent --layers 2x
bad --steps train-ddpm --data d.csv.gz --out o --steps 0
bad --channels train-ddpm --data d.csv.gz --out o --channels 16,x
bad --lr train-ddpm --data d.csv.gz --out o --lr fast
bad --ema-max-decay train-ddpm --data d.csv.gz --out o --ema --ema-max-decay 2
bad --data train-ddpm --out o
bad --num-images image --model m --seed 1 --out o.png --num-images 0
bad --upscale image --model m --seed 1 --out o.png --upscale 2x
bad --num-images image --model m --latents l.npy --out o.png --num-images 4

out=$($ember devices 2>&1) || { echo "FAIL: ember devices -> $out"; fail=1; }
echo "$out"
if printf '%s\n' "$out" | grep -q 'tried: '; then
    echo "FAIL: ember devices prints the plugin search paths without --verbose"
    fail=1
fi
if printf '%s\n' "$out" | grep '^(no ' | grep -qv 'pip install\|no TPU\|cannot\|has no\|PJRT'; then
    echo "FAIL: a missing device kind without the command that installs it"
    fail=1
fi
exit $fail
