#!/usr/bin/env bash
# Holds the layer rules of docs/architecture.md against the code: a folder of src/ may not
# include a header of a folder it must not use, nor call a function (or read a variable) that
# such a folder defines. Calls are read from the library's object files in a build, so a call
# made through a macro counts too. Exits non-zero, naming file and symbol, on any breach.
# Usage: scripts/check_layers.sh [BUILD_DIR]   (default: build)
set -euo pipefail
cd "$(dirname "$0")/.."
export LC_ALL=C
objs=${1:-build}/CMakeFiles/ember_obj.dir/src
[ -d "$objs" ] || { echo "no object files under $objs: build first" >&2; exit 2; }

# folder: the folders it must not use (src/backends/registry.c, which registers every backend
# with core, belongs to no backend)
rules=(
  "core:ops compile backends io models generate testing bench dist serve train kernels_hub diffusion"
  "ops:compile backends io models generate testing bench dist serve train diffusion"
  "io:compile backends models generate testing bench dist serve train diffusion"
  "backends/cpu:backends/pjrt ops compile io models generate testing bench dist serve train diffusion"
  "backends/pjrt:backends/cpu ops compile io models generate testing bench dist serve train diffusion"
  "compile:backends io models generate testing bench dist serve train diffusion"
  "dist:compile backends io models generate testing bench serve train diffusion"
  "generate:serve train testing bench"
  "serve:backends compile testing bench"
  "train:backends serve testing bench"
  "kernels_hub:compile models generate testing bench dist serve train diffusion"
  "diffusion:backends generate serve train testing bench kernels_hub"
)

# the objects of the sources that exist (a build folder keeps those of removed files)
objects() { (cd "$objs" && find "$1" -name '*.c.o' | sort) | while read -r o; do
  o=${o#./}
  if [ -f "src/${o%.o}" ]; then echo "$o"; fi
done; }
# which file defines each global symbol (folder-relative object paths)
defs=$(for o in $(objects .); do
  nm --defined-only "$objs/$o" | awk -v f="$o" '$2 ~ /[TDBRC]/ {print $3, f}'
done | sort -k1,1)

bad=0
for rule in "${rules[@]}"; do
  from=${rule%%:*}
  for to in ${rule#*:}; do
    # includes
    if hits=$(grep -rn --include='*.c' --include='*.h' --include='*.inc' "#include \"$to/" "src/$from"); then
      echo "$hits" | sed "s/^/layer: src\/$from must not include src\/$to: /"
      bad=1
    fi
    # calls and variables
    refs=$(for o in $(objects "$from"); do
      nm --undefined-only "$objs/$o" | awk -v f="$o" '{print $2, f}'
    done | sort -k1,1)
    hits=$(join <(echo "$refs") <(echo "$defs") | awk -v to="$to/" 'index($3, to) == 1 {
      print "layer: src/" $2 " uses " $1 " of src/" $3 }' | sed 's/\.o\b//g')
    if [ -n "$hits" ]; then
      echo "$hits"
      bad=1
    fi
  done
done
[ "$bad" = 0 ] && echo "layers: every rule of docs/architecture.md holds (${#rules[@]} folders checked)"
exit "$bad"
