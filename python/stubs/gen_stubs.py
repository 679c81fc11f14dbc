"""Writes the package's type stub: the hand-written classes of ember.pyi.in plus one signature
per eager op, generated from the same preprocessed public headers (_cdef.h) that the runtime
binds, so editors complete `ember.ops.NAME(...)` and the list cannot drift from the C API.
Usage: gen_stubs.py _cdef.h ember.pyi.in OUT.pyi"""
import re
import sys

# the C spelling of an argument -> its Python annotation
TYPES = {"em_tensor *": "TensorLike | None", "em_dtype": "DTypeLike", "int": "int",
         "int64_t": "int", "uint64_t": "int", "int32_t": "int", "bool": "bool", "float": "float",
         "double": "float", "const char *": "str", "char *": "str"}


def parse_args(text):
    """[(name, annotation)] for the parameters after (ctx, file, line); None if unbindable."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    out, k = [], 0
    while k < len(parts):
        m = re.match(r"(.*?)(\w+)$", parts[k])
        if not m:
            return None
        ctype, name = m.group(1).strip().replace(" *", " *"), m.group(2)
        ctype = re.sub(r"\s+", " ", ctype).replace("* ", "*").replace(" *", " *")
        nxt = parts[k + 1] if k + 1 < len(parts) else ""
        if ctype == "int" and re.match(r"const int64_t \*", nxt):
            shape = re.match(r"const int64_t \*\s*(\w+)", nxt).group(1)
            out.append((shape, "Sequence[int] | int"))
            k += 2
            continue
        ann = TYPES.get(ctype)
        if ann is None:
            return None
        out.append((name, ann))
        k += 1
    return out


def ops_from(cdef):
    flat = re.sub(r"\s+", " ", cdef)
    sig = re.compile(r"em_tensor \*em_(\w+)_\(em_ctx \*\w+, const char \*\w+, int \w+,? ?([^;]*?)\);")
    lines = []
    for name, args in sorted(sig.findall(flat)):
        parsed = parse_args(args)
        if parsed is None:  # a struct or array argument: passed through as cffi takes it
            lines.append(f"    def {name}(self, *args: Any) -> Tensor: ...")
            continue
        params = ", ".join(f"{n}: {a}" for n, a in parsed)
        lines.append(f"    def {name}(self{', ' if params else ''}{params}) -> Tensor: ...")
    return lines


def main(cdef_path, template_path, out_path):
    cdef = open(cdef_path).read()
    ops = ops_from(cdef)
    if len(ops) < 50:
        sys.exit(f"gen_stubs: only {len(ops)} ops parsed from {cdef_path}; the header layout "
                 "changed")
    text = open(template_path).read().replace("    # @OPS@\n", "\n".join(ops) + "\n")
    with open(out_path, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main(*sys.argv[1:4])
