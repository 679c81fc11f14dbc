#!/bin/sh
# `ember bench diffusion` on its tiny preset without the peer (arguments: the ember tool, with
# its launcher): the table's columns and one row per size, the 3x3 conv, group norm and
# attention rows, the JSON lines, and its temporary folder removed; --ops-only (the op rows
# without the step); --compile's mode and compile lines. No timing is checked.
ember="$*"
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
fail() {
    echo "FAIL: $*"
    exit 1
}
out=$(TMPDIR=$tmp $ember bench diffusion --preset tiny --skip-peers --steps 1 2>"$tmp/err") ||
    fail "exit status $? ($(cat "$tmp/err"))"
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q '^cpu kernels: ' || fail "no machine line"
printf '%s\n' "$out" | grep -q '^diffusion: UNet2DConditionModel preset tiny (1.1 M parameters' ||
    fail "no model line"
printf '%s\n' "$out" | grep -q '^size  *latent  *ember s/step  *ember cpu-s  *diffusers s/step  *diffusers cpu-s  *speedup  *GFLOP/step  *of peak  *torch GFLOP  *max|diff|$' ||
    fail "the step table's header"
# a row per size: Ember's numbers positive, the peer's columns "-"
for s in 64:8x8 32:4x4; do
    printf '%s\n' "$out" | awk -v size="${s%%:*}" -v lat="${s##*:}" '
        $1 == size && $2 == lat && NF == 11 && $3 > 0 && $4 > 0 && $5 == "-" && $6 == "-" &&
        $7 == "-" && $8 > 0 && $9 ~ /%$/ && $10 == "-" && $11 == "-" { found = 1 }
        END { exit !found }' || fail "no well-formed row for size ${s%%:*}"
done
[ "$(printf '%s\n' "$out" | grep -c '^flops .* px (analytic, GFLOP): conv3x3 ')" -eq 2 ] ||
    fail "the FLOP breakdown lines"
printf '%s\n' "$out" | awk '
    $1 == "[2,32,8,8]" && NF == 7 && $2 > 0 && $3 > 0 && $4 ~ /%$/ && $5 == "-" { a = 1 }
    $1 == "[2,64,4,4]" && NF == 7 && $2 > 0 && $3 > 0 && $4 ~ /%$/ && $5 == "-" { b = 1 }
    END { exit !(a && b) }' || fail "the conv3x3 rows"
# group norm at the conv shapes (the tiny preset: 32 groups, eps 1e-05), GB/s and the fraction
# of the bandwidth bound; the attentions of the cross-attention block (64 px: 8x8 latents, 4 heads
# of 8) and of the mid block (4x4, 4 heads of 16), each self and cross (77 text states)
printf '%s\n' "$out" | grep -q '^group norm 32 \[N,C,H,W\]  *ember ms  *GB/s  *of bound  *torch ms  *of bound  *speedup$' ||
    fail "the group norm table's header"
printf '%s\n' "$out" | awk '
    $1 == "[2,32,8,8]" && NF == 7 && $2 > 0 && $3 > 0 && $4 ~ /%$/ && $5 == "-" { a++ }
    $1 == "[2,64,4,4]" && NF == 7 && $2 > 0 && $3 > 0 && $4 ~ /%$/ && $5 == "-" { b++ }
    END { exit !(a == 2 && b == 2) }' || fail "the group norm rows (after the conv rows)"
printf '%s\n' "$out" | grep -q '^group norm (eps 1e-05, affine): bytes = x read once + y written once; bound = the triad probe' ||
    fail "the group norm definition line"
printf '%s\n' "$out" | grep -q '^sdpa \[B,H,Tq,D\]x\[Tk\]  *ember ms  *GFLOP/s  *of peak  *torch ms  *of peak  *speedup$' ||
    fail "the attention table's header"
for s in '[2,4,64,8]x[64]' '[2,4,64,8]x[77]' '[2,4,16,16]x[16]' '[2,4,16,16]x[77]'; do
    printf '%s\n' "$out" | awk -v s="$s" '
        $1 == s && NF == 7 && $2 > 0 && $3 > 0 && $4 ~ /%$/ && $5 == "-" { found = 1 }
        END { exit !found }' || fail "no attention row $s"
done
printf '%s\n' "$out" | grep -q '^sdpa: no mask, scale 1/sqrt(D); FLOPs = 4\*B\*H\*Tq\*Tk\*D' ||
    fail "the attention definition line"
printf '%s\n' "$out" | grep -q '^fractions of the FP32 FMA peak [0-9.]* GFLOP/s (the higher of' ||
    fail "the peak line"
[ -z "$(ls -A "$tmp" | grep -v '^err$')" ] || fail "left behind: $(ls "$tmp")"
# (in bf16: the dtype named, the fractions of the bf16 dot peak; the step alone, then
# --ops-only: the op rows alone, no step line)
json=$(TMPDIR=$tmp $ember bench diffusion --preset tiny --skip-peers --steps 1 --sizes 32 --json \
    --dtype bf16 --no-conv 2>"$tmp/err") || fail "--json: exit status $?"
printf '%s\n' "$json"
printf '%s\n' "$json" | grep -q '^{"bench": "diffusion_step", "preset": "tiny", "dtype": "bf16", "ember_mode": "eager", "ember_compile_s": 0, "size": 32, "latent": \[2, 4, 4, 4\], "ember_s": [0-9.e-]*, "ember_cpu_s": .*"fraction_of_bf16_peak": [0-9.]*, "peer": null}$' ||
    fail "the JSON step line"
printf '%s\n' "$json" | grep -q '"bench": "diffusion_\(conv3x3\|group_norm\|attention\)"' &&
    fail "--no-conv: an op line"
json=$(TMPDIR=$tmp $ember bench diffusion --preset tiny --skip-peers --sizes 32 --json \
    --dtype bf16 --ops-only 2>"$tmp/err") || fail "--ops-only --json: exit status $?"
printf '%s\n' "$json"
printf '%s\n' "$json" | grep -q '"bench": "diffusion_step"' && fail "--ops-only: a step line"
[ "$(printf '%s\n' "$json" | grep -c '^{"bench": "diffusion_conv3x3", "shape": "\[2,[36][24],[24],[24]\]", "ms": [0-9.e-]*, "dtype": "bf16", ')" -eq 2 ] ||
    fail "the JSON conv line"
[ "$(printf '%s\n' "$json" | grep -c '^{"bench": "diffusion_group_norm", "shape": "\[2,[36][24],[24],[24]\]", "groups": 32, "eps": 1e-05, "dtype": "bf16", "ms": [0-9.e-]*, "bytes": [0-9.e+]*, "gbs": [0-9.e-]*, "bound_triad_gbs": [0-9.e-]*, "fraction_of_bandwidth": [0-9.]*}$')" -eq 2 ] ||
    fail "the JSON group norm lines"
printf '%s\n' "$json" | grep -q '^{"bench": "diffusion_attention", "kind": "self", "q": \[2, 4, 16, 8\], "tk": 16, "dtype": "bf16", "ms": [0-9.e-]*, "flops": 65536, "fraction_of_bf16_peak": [0-9.]*}$' ||
    fail "the JSON self-attention line"
printf '%s\n' "$json" | grep -q '^{"bench": "diffusion_attention", "kind": "cross", "q": \[2, 4, 4, 16\], "tk": 77, "dtype": "bf16", "ms": [0-9.e-]*, "flops": 157696, "fraction_of_bf16_peak": [0-9.]*}$' ||
    fail "the JSON cross-attention line"
[ "$(printf '%s\n' "$json" | grep -c '"bench": "diffusion_attention"')" -eq 4 ] ||
    fail "the JSON attention lines"
[ -z "$(ls -A "$tmp" | grep -v '^err$')" ] || fail "--ops-only: left behind: $(ls "$tmp")"
# --compile: Ember's step as one program, traced once per size (the bench fails otherwise)
out=$(TMPDIR=$tmp $ember bench diffusion --preset tiny --skip-peers --steps 2 --no-conv \
    --compile 2>"$tmp/err") || fail "--compile: exit status $? ($(cat "$tmp/err"))"
printf '%s\n' "$out"
printf '%s\n' "$out" | grep -q 'Ember compiled (one program per size)' || fail "--compile: mode"
[ "$(printf '%s\n' "$out" | grep -c '^compile [36][24] px: traced and planned in [0-9.]* ms')" -eq 2 ] ||
    fail "--compile: the compile lines"
json=$(TMPDIR=$tmp $ember bench diffusion --preset tiny --skip-peers --steps 1 --sizes 32 --json \
    --no-conv --compile 2>"$tmp/err") || fail "--compile --json: exit status $?"
printf '%s\n' "$json" | grep -q '"ember_mode": "compiled", "ember_compile_s": [0-9.e-]*, "size": 32' ||
    fail "--compile: the JSON step line"
# bad arguments: named, status 2
$ember bench diffusion --preset tiny --dtype f8 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "\-\-dtype 'f8': f32 or bf16" "$tmp/err" || fail "--dtype f8"
$ember bench diffusion --preset nope >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "unknown preset 'nope'" "$tmp/err" || fail "--preset nope"
$ember bench diffusion --preset tiny --sizes 36 >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "size 36 is not a multiple of 16" "$tmp/err" || fail "--sizes 36"
$ember bench diffusion --preset tiny --ops-only --no-conv >/dev/null 2>"$tmp/err"
[ $? -eq 2 ] && grep -q "\-\-ops-only with \-\-no-conv leaves nothing to time" "$tmp/err" ||
    fail "--ops-only --no-conv"
echo "ok"
