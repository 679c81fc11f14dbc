"""Ember from Python, in the Hugging Face API's shape:

    import ember
    tok = ember.AutoTokenizer.from_pretrained("path/or/hub-id")
    model = ember.AutoModelForCausalLM.from_pretrained("path/or/hub-id/or/file.gguf", device_map="cpu")
    out = model.generate(tok("Hello")["input_ids"], max_new_tokens=20)
    print(tok.decode(out[0]))

Each Python thread gets its own Ember context (errors are per context, as in C); tensors and
models can be shared between threads. Errors raise EmberError with Ember's message (op, shapes,
device, file:line)."""
import json
import sys
import threading

from ._ffi import ffi, lib
from . import _dlpack

__all__ = ["EmberError", "Tensor", "tensor", "from_dlpack", "ops", "AutoTokenizer",
           "AutoModel", "AutoModelForCausalLM", "SentenceTransformer", "compile", "version", "Trainer", "TrainStep", "train"]

_HERE = b"python"


class EmberError(RuntimeError):
    """An error Ember reported: `status` is its status name, the message says what and where."""

    def __init__(self, message, status=""):
        super().__init__(message)
        self.status = status


_local = threading.local()


def _ctx():
    c = getattr(_local, "ctx", None)
    if c is None:
        c = lib.em_ctx_create()
        if c == ffi.NULL:
            raise MemoryError("em_ctx_create failed")
        c = ffi.gc(c, lib.em_ctx_free)
        _local.ctx = c
    return c


def _raise(c):
    e = lib.em_ctx_error(c)
    msg = ffi.string(e.message).decode("utf-8", "replace")
    status = ffi.string(lib.em_status_str(e.status)).decode()
    lib.em_ctx_clear_error(c)
    raise EmberError(msg, status)


def _check(c, result=None):
    """Raises when the context holds an error (or result is NULL); returns result."""
    if lib.em_ctx_status(c) != 0 or (result is not None and result == ffi.NULL):
        if lib.em_ctx_status(c) == 0:
            raise EmberError("Ember returned nothing and recorded no error")
        _raise(c)
    return result


def version():
    return ffi.string(lib.em_version()).decode()


def _dtype(name):
    """An em_dtype from "bfloat16", "bf16", "float32", "torch.float32", numpy dtypes ..."""
    if name is None:
        return -1  # EM_DTYPE_AUTO, a macro cffi does not see
    if isinstance(name, int):
        return name
    s = str(name).replace("torch.", "")
    alias = {"bfloat16": "bf16", "float32": "f32", "float": "f32", "float16": "f16",
             "half": "f16", "float64": "f64", "double": "f64", "int64": "i64", "long": "i64",
             "int32": "i32", "int": "i32", "int16": "i16", "int8": "i8", "uint8": "u8",
             "bool": "bool"}
    s = alias.get(s, s)
    out = ffi.new("em_dtype *")
    if not lib.em_dtype_parse(s.encode(), out):
        raise ValueError(f"unknown dtype {name!r}")
    return out[0]


def _dtype_name(d):
    return ffi.string(lib.em_dtype_name(d)).decode()


_NUMPY = {"f32": "float32", "f64": "float64", "f16": "float16", "i64": "int64", "i32": "int32",
          "i16": "int16", "i8": "int8", "u8": "uint8", "bool": "bool"}


class Tensor:
    """An Ember tensor (owns one reference to it)."""

    __slots__ = ("_t", "__weakref__")

    def __init__(self, ptr):
        self._t = ffi.gc(ptr, lib.em_tensor_release)

    @classmethod
    def _adopt(cls, c, ptr):
        """Takes a tensor an op returned (owned by c's scope) into Python's hands."""
        _check(c, ptr)
        return cls(lib.em_detach(c, ptr))

    @property
    def dtype(self):
        return _dtype_name(lib.em_tensor_dtype(self._t))

    @property
    def shape(self):
        n = lib.em_tensor_ndim(self._t)
        s = lib.em_tensor_shape(self._t)
        return tuple(s[i] for i in range(n))

    @property
    def ndim(self):
        return lib.em_tensor_ndim(self._t)

    @property
    def device(self):
        return ffi.string(lib.em_device_name(lib.em_tensor_device(self._t))).decode()

    def numel(self):
        return lib.em_tensor_numel(self._t)

    def __len__(self):
        return self.shape[0] if self.ndim else 0

    def to(self, device):
        c = _ctx()
        d = _check(c, lib.em_device_get(c, device.encode()))
        return Tensor._adopt(c, lib.em_to_(c, _HERE, 0, self._t, d))

    def numpy(self):
        import numpy as np
        c = _ctx()
        name = self.dtype
        if name in ("bf16",) or name not in _NUMPY:
            a = np.empty(self.shape, dtype=np.float32)
            if lib.em_to_host_f32(c, self._t, ffi.cast("float *", a.ctypes.data), a.size) != 0:
                _raise(c)
            return a
        a = np.empty(self.shape, dtype=_NUMPY[name])
        if lib.em_to_host(c, self._t, ffi.cast("void *", a.ctypes.data), a.nbytes) != 0:
            _raise(c)
        return a

    def tolist(self):
        c = _ctx()
        n = self.numel()
        name = self.dtype
        if name in ("i64", "i32", "i16", "i8", "u8", "bool"):
            buf = ffi.new("int64_t[]", max(n, 1))
            t = Tensor._adopt(c, lib.em_cast_(c, _HERE, 0, self._t, _dtype("i64"))) \
                if name != "i64" else self
            if lib.em_to_host(c, t._t, buf, n * 8) != 0:
                _raise(c)
            flat = [int(buf[i]) for i in range(n)]
        else:
            buf = ffi.new("float[]", max(n, 1))
            if lib.em_to_host_f32(c, self._t, buf, n) != 0:
                _raise(c)
            flat = [float(buf[i]) for i in range(n)]
        return _nest(flat, self.shape)

    def item(self):
        c = _ctx()
        v = ffi.new("double *")
        if lib.em_item(c, self._t, v) != 0:
            _raise(c)
        return v[0]

    def __repr__(self):
        buf = ffi.new("char[]", 96)
        return f"ember.Tensor({ffi.string(lib.em_tensor_sig(self._t, buf, 96)).decode()}, " \
               f"device={self.device})"

    def __getitem__(self, i):
        if isinstance(i, int):
            n = self.shape[0]
            if i < 0:
                i += n
            if not 0 <= i < n:
                raise IndexError(f"index {i} out of range for dimension of size {n}")
            c = _ctx()
            row = Tensor._adopt(c, lib.em_slice_(c, _HERE, 0, self._t, 0, i, i + 1, 1))
            return ops.squeeze(row, 0)
        raise TypeError("ember.Tensor indexing takes an int (more with ember.ops)")

    def _bin(self, name, other, swap=False):
        a, b = (other, self) if swap else (self, other)
        return getattr(ops, name)(a, b)

    def __add__(self, o): return self._bin("add", o)
    def __radd__(self, o): return self._bin("add", o, True)
    def __sub__(self, o): return self._bin("sub", o)
    def __rsub__(self, o): return self._bin("sub", o, True)
    def __mul__(self, o): return self._bin("mul", o)
    def __rmul__(self, o): return self._bin("mul", o, True)
    def __truediv__(self, o): return self._bin("div", o)
    def __rtruediv__(self, o): return self._bin("div", o, True)
    def __matmul__(self, o): return self._bin("matmul", o)
    def __neg__(self): return ops.neg(self)

    def __dlpack__(self, *, stream=None, max_version=None, dl_device=None, copy=None):
        """A DLPack capsule over this CPU tensor's memory (no copy unless copy=True)."""
        if dl_device is not None and tuple(int(v) for v in dl_device) != (_dlpack.CPU, 0):
            raise BufferError(f"ember.Tensor exports to the CPU only, not {dl_device}")
        t = _copy(self) if copy else self
        versioned = max_version is not None and int(max_version[0]) >= 1
        return _dlpack.export(_ctx(), t._t, versioned)

    def __dlpack_device__(self):
        dev = self.device
        if not dev.startswith("cpu"):
            raise BufferError(f"DLPack export needs a CPU tensor; this one is on {dev}")
        return (_dlpack.CPU, 0)


def _nest(flat, shape):
    if not shape:
        return flat[0]
    if len(shape) == 1:
        return flat
    step = len(flat) // shape[0] if shape[0] else 0
    return [_nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]


def _flatten(x):
    """Nested lists -> (flat list, shape), rejecting ragged lists."""
    if isinstance(x, (list, tuple)):
        if not x:
            return [], (0,)
        parts = [_flatten(v) for v in x]
        shape = parts[0][1]
        if any(p[1] != shape for p in parts):
            raise ValueError("ragged nested list: every row must have the same shape")
        return [v for p in parts for v in p[0]], (len(x),) + shape
    return [x], ()


def tensor(data, dtype=None, device=None):
    """A new tensor holding a copy of `data` (an ember.Tensor, a numpy array, a torch tensor or
    nested lists of numbers), on `device` (default: the CPU)."""
    if isinstance(data, Tensor):
        t = data
        if dtype is not None:
            t = ops.cast(t, _dtype(dtype))
        return t.to(device) if device else t
    c = _ctx()
    if hasattr(data, "detach") and hasattr(data, "cpu"):  # torch
        data = data.detach().cpu().numpy()
    if hasattr(data, "__array_interface__"):  # numpy
        import numpy as np
        a = np.ascontiguousarray(data)
        names = {v: k for k, v in _NUMPY.items()}
        if a.dtype.name not in names:
            raise TypeError(f"numpy dtype {a.dtype} has no Ember dtype")
        d = _dtype(names[a.dtype.name])
        shape = ffi.new("int64_t[]", list(a.shape) or [1])
        ptr = lib.em_from_host_(c, _HERE, 0, d, a.ndim, shape, ffi.cast("void *", a.ctypes.data))
        t = Tensor._adopt(c, ptr)
    else:
        flat, shp = _flatten(data)
        isint = all(isinstance(v, (bool, int)) for v in flat)
        if not all(isinstance(v, (bool, int, float)) for v in flat):
            raise TypeError("ember.tensor takes numbers, nested lists of numbers, numpy or torch")
        d = _dtype("i64" if isint else "f32")
        buf = ffi.new("int64_t[]" if isint else "float[]", flat or [0])
        shape = ffi.new("int64_t[]", list(shp) or [1])
        t = Tensor._adopt(c, lib.em_from_host_(c, _HERE, 0, d, len(shp), shape, buf))
    if dtype is not None and _dtype(dtype) != lib.em_tensor_dtype(t._t):
        t = ops.cast(t, _dtype(dtype))
    return t.to(device) if device and device != "cpu" else t


def _copy(x):
    """A new CPU tensor with x's values in its own storage."""
    c = _ctx()
    src = x.to("cpu") if not x.device.startswith("cpu") else x
    src = ops.contiguous(src)
    data = lib.em_tensor_data(c, src._t)
    _check(c)
    shape = ffi.new("int64_t[]", list(src.shape) or [1])
    return Tensor._adopt(c, lib.em_from_host_(c, _HERE, 0, lib.em_tensor_dtype(src._t),
                                              src.ndim, shape, data))


def from_dlpack(x, copy=None):
    """An ember.Tensor sharing the memory of `x` (a numpy array, a torch tensor, anything with
    `__dlpack__` on the CPU): no copy, as torch.from_dlpack. `copy=True` copies; read-only
    arrays and strided views are copied (Ember wraps only writable row-major memory)."""
    if isinstance(x, Tensor):
        return _copy(x) if copy else x
    if not hasattr(x, "__dlpack__"):
        raise TypeError(f"ember.from_dlpack: {type(x).__name__} has no __dlpack__")
    return _dlpack.import_(_ctx(), x, Tensor._adopt, bool(copy))


class _Ops:
    """The op table's eager ops as functions, generated from the C declarations (every
    `em_tensor *em_NAME_(em_ctx *, const char *, int, ...)`): tensors, numbers, sequences for
    (ndim, shape) pairs, strings for dtypes and names."""

    def __init__(self):
        self._names = []
        for name in dir(lib):
            if not (name.startswith("em_") and name.endswith("_")):
                continue
            try:
                ft = ffi.typeof(getattr(lib, name))
            except (AttributeError, TypeError, ffi.error):
                continue
            args = [a.cname for a in ft.args]
            if ft.result.cname != "em_tensor *" or args[:3] != ["em_ctx *", "char *", "int"]:
                continue
            py = name[3:-1]
            setattr(self, py, self._make(name, py, args[3:]))
            self._names.append(py)

    def __dir__(self):
        return list(self._names)

    @staticmethod
    def _make(cname, py, args):
        fn = getattr(lib, cname)

        def call(*values):
            c = _ctx()
            out, keep, i = [], [], 0
            vals = list(values)
            k = 0
            while k < len(args):
                a = args[k]
                if i >= len(vals):
                    raise TypeError(f"ember.ops.{py}: takes {_arity(args)} arguments "
                                    f"({', '.join(args)}), got {len(vals)}")
                v = vals[i]
                i += 1
                if a == "em_tensor *" and v is None:  # optional inputs (a bias)
                    out.append(ffi.NULL)
                elif a == "em_tensor *":
                    if not isinstance(v, Tensor):
                        v = tensor(v) if not isinstance(v, (int, float)) else \
                            Tensor._adopt(c, lib.em_scalar_(c, _HERE, 0, float(v), _dtype(
                                "f32" if isinstance(v, float) else "i64")))
                    keep.append(v)
                    out.append(v._t)
                elif a == "int" and k + 1 < len(args) and args[k + 1] == "int64_t *":
                    seq = list(v) if isinstance(v, (list, tuple)) else [v]
                    arr = ffi.new("int64_t[]", seq or [0])
                    keep.append(arr)
                    out += [len(seq), arr]
                    k += 1
                elif a == "em_dtype":
                    out.append(_dtype(v))
                elif a == "char *":
                    s = ffi.new("char[]", v.encode()) if isinstance(v, str) else v
                    keep.append(s)
                    out.append(s)
                else:
                    out.append(v)
                k += 1
            if i != len(vals):
                raise TypeError(f"ember.ops.{py}: too many arguments ({len(vals)}; C takes "
                                f"{', '.join(args)})")
            f = sys._getframe(1)
            while f.f_back is not None and f.f_code.co_filename == __file__:
                f = f.f_back  # the user's line, not the operator method's
            return Tensor._adopt(c, fn(c, _where(f.f_code.co_filename), f.f_lineno, *out))

        call.__name__ = py
        call.__doc__ = f"ember.ops.{py}: {cname}({', '.join(['em_ctx *', 'file', 'line'] + args)})"
        return call


_files = {}
_files_lock = threading.Lock()


def _where(filename):
    """A C string for a Python file name that lives as long as the module (errors keep the
    pointer: the C side stores file names as static strings)."""
    p = _files.get(filename)
    if p is None:
        with _files_lock:
            p = _files.setdefault(filename, ffi.new("char[]", filename.encode("utf-8", "replace")))
    return p


def _arity(args):
    return len(args) - sum(1 for k in range(1, len(args))
                           if args[k] == "int64_t *" and args[k - 1] == "int")


ops = _Ops()


class compile:
    """`ember.compile(fn)`: fn written with ember ops, traced once per input signature (dtypes,
    shapes, device) into one program — a CPU plan or one PJRT executable — as em_compile does
    in C. Call it with tensors; it returns a Tensor or a tuple of them, like fn. Inside fn the
    inputs are symbolic: reading their values (`.numpy()`, `.item()`) is an error. Not
    thread-safe: one per thread, as in C."""

    _SIG = "int(em_ctx *, em_tensor * const *, int, int64_t *, int, em_tensor **, int, void *)"

    def __init__(self, fn, name=None):
        self._fn = fn
        self._error = None
        self._tuple = False
        self._cb = ffi.callback(self._SIG, self._trace)
        c = _ctx()
        label = ffi.new("char[]", (name or getattr(fn, "__name__", "fn")).encode())
        self._f = ffi.gc(_check(c, lib.em_compile(c, label, self._cb, ffi.NULL)),
                         lib.em_compiled_free)

    def _trace(self, c, inp, n_in, statics, n_statics, out, max_out, user):
        try:
            args = [Tensor(lib.em_tensor_retain(inp[i])) for i in range(n_in)]
            res = self._fn(*args)
            self._tuple = isinstance(res, (tuple, list))
            outs = list(res) if self._tuple else [res]
            if len(outs) > max_out or not all(isinstance(t, Tensor) for t in outs):
                raise TypeError(f"ember.compile: {getattr(self._fn, '__name__', 'fn')} must "
                                f"return a Tensor or a tuple of at most {max_out} Tensors")
            for i, t in enumerate(outs):  # the contract: outputs live in the caller's scope
                out[i] = lib.em_adopt(c, lib.em_tensor_retain(t._t))
            return len(outs)
        except BaseException as e:  # noqa: BLE001 - re-raised by __call__
            self._error = e
            if lib.em_ctx_status(c) == 0:
                lib.em_ctx_fail(c, lib.EM_ERR_INVALID_ARG, b"compile", b"%s",
                                ffi.new("char[]", f"{type(e).__name__}: {e}".encode()))
            return -1

    def __call__(self, *tensors):
        c = _ctx()
        ins = [t if isinstance(t, Tensor) else tensor(t) for t in tensors]
        arr = ffi.new("em_tensor *[]", [t._t for t in ins] or [ffi.NULL])
        outs = ffi.new("em_tensor *[]", 16)
        self._error = None
        lib.em_scope_push(c)
        try:
            n = lib.em_compiled_call(c, self._f, arr, len(ins), ffi.NULL, 0, outs, 16)
            if n < 0:
                err = self._error
                self._error = None
                if err is not None:
                    lib.em_ctx_clear_error(c)
                    raise err
                _raise(c)
            res = [Tensor._adopt(c, outs[i]) for i in range(n)]
        finally:
            lib.em_scope_pop(c)
        return tuple(res) if self._tuple or n != 1 else res[0]

    def stats(self):
        """The C counters (calls, compiles, last_reason, kernels ...) as a dict."""
        st = ffi.new("em_compile_stats *")
        lib.em_compiled_stats(self._f, st)
        return {k: (ffi.string(getattr(st, k)).decode() if k in ("last_reason", "backend")
                    else getattr(st, k)) for k in dir(st)}


# ---- tokenizers ----

class BatchEncoding(dict):
    """What a tokenizer call returns: input_ids and attention_mask (as transformers)."""

    def __getattr__(self, k):
        try:
            return self[k]
        except KeyError:
            raise AttributeError(k) from None


class AutoTokenizer:
    """A tokenizer.json (or a model folder / Hub id / GGUF file holding one)."""

    def __init__(self, ptr):
        self._tok = ffi.gc(ptr, lib.em_tokenizer_free)
        self.padding_side = "left"

    @classmethod
    def from_pretrained(cls, path):
        """A tokenizer.json, a folder or Hub id holding one, or a GGUF file (its metadata)."""
        c = _ctx()
        path = str(path)
        if path.endswith(".gguf"):
            g = _check(c, lib.em_gguf_open(c, path.encode()))
            try:
                return cls(_check(c, lib.em_tokenizer_from_gguf(c, g)))
            finally:
                lib.em_gguf_free(g)
        return cls(_check(c, lib.em_tokenizer_load(c, path.encode())))

    def _special(self, which):
        p = lib.em_tokenizer_special_token(self._tok, which)
        return None if p == ffi.NULL else ffi.string(p).decode()

    @property
    def eos_token_id(self):
        v = lib.em_tokenizer_special_id(self._tok, lib.EM_SPECIAL_EOS)
        return None if v < 0 else v

    @property
    def pad_token_id(self):
        v = lib.em_tokenizer_special_id(self._tok, lib.EM_SPECIAL_PAD)
        return None if v < 0 else v

    def __len__(self):
        return lib.em_tokenizer_vocab_size(self._tok)

    def encode(self, text, add_special_tokens=True):
        c = _ctx()
        b = text.encode("utf-8")
        ids = ffi.new("em_token **")
        n = ffi.new("size_t *")
        if lib.em_tokenizer_encode(c, self._tok, b, len(b), add_special_tokens, ids, n) != 0:
            _raise(c)
        try:
            return [ids[0][i] for i in range(n[0])]
        finally:
            lib.em_free(ids[0])

    def __call__(self, text, add_special_tokens=True, padding=False, return_tensors=None):
        single = isinstance(text, str)
        rows = [self.encode(t, add_special_tokens) for t in ([text] if single else text)]
        masks = [[1] * len(r) for r in rows]
        if padding or return_tensors:
            n = max((len(r) for r in rows), default=0)
            pad = self.pad_token_id if self.pad_token_id is not None else 0
            for k, r in enumerate(rows):
                extra = n - len(r)
                if self.padding_side == "left":
                    rows[k], masks[k] = [pad] * extra + r, [0] * extra + masks[k]
                else:
                    rows[k], masks[k] = r + [pad] * extra, masks[k] + [0] * extra
        if return_tensors:
            return BatchEncoding(input_ids=tensor(rows), attention_mask=tensor(masks))
        if single:
            return BatchEncoding(input_ids=rows[0], attention_mask=masks[0])
        return BatchEncoding(input_ids=rows, attention_mask=masks)

    def decode(self, ids, skip_special_tokens=False):
        if isinstance(ids, Tensor):
            ids = ids.tolist()
        c = _ctx()
        arr = ffi.new("em_token[]", list(ids) or [0])
        n = ffi.new("size_t *")
        p = _check(c, lib.em_tokenizer_decode(c, self._tok, arr, len(ids), skip_special_tokens, n))
        try:
            return ffi.unpack(p, n[0]).decode("utf-8")
        finally:
            lib.em_free(p)

    def batch_decode(self, rows, skip_special_tokens=False):
        if isinstance(rows, Tensor):
            rows = rows.tolist()
        return [self.decode(r, skip_special_tokens) for r in rows]

    def apply_chat_template(self, messages, add_generation_prompt=True, tokenize=True, **extra):
        c = _ctx()
        p = _check(c, lib.em_chat_template_apply(c, self._tok, json.dumps(messages).encode(),
                                                  add_generation_prompt,
                                                  json.dumps(extra).encode() if extra else ffi.NULL))
        try:
            text = ffi.string(p).decode("utf-8")
        finally:
            lib.em_free(p)
        return self.encode(text, add_special_tokens=False) if tokenize else text


# ---- models ----

class CausalLMOutput:
    def __init__(self, logits):
        self.logits = logits


_KINDS = {"cpu": "cpu", "xla": "xla:0", "cuda": "cuda:0", "tpu": "tpu:0"}


def _load_model(path, device_map, dtype, moe_impl, offline):
    """em_model_load with transformers' from_pretrained arguments; returns (model, kept buffers)."""
    c = _ctx()
    o = ffi.new("em_model_options *", lib.em_model_default_options())
    o.progress = False
    keep = []
    if isinstance(device_map, dict):
        s = ",".join(f"{k}={_KINDS.get(str(v), str(v))}" for k, v in device_map.items())
        keep.append(ffi.new("char[]", s.encode()))
        o.device_map = keep[-1]
    elif device_map == "auto":
        keep.append(ffi.new("char[]", b"auto"))
        o.device_map = keep[-1]
    elif device_map is not None:
        keep.append(ffi.new("char[]", _KINDS.get(device_map, device_map).encode()))
        o.device = keep[-1]
    if dtype is not None and dtype != "auto":
        o.dtype = _dtype(dtype)
    if moe_impl is not None:
        impl = ffi.new("em_moe_impl *")
        if not lib.em_moe_impl_parse(moe_impl.encode(), impl):
            raise ValueError(f"moe_impl {moe_impl!r}: ragged, loop or dense")
        o.moe_impl = impl[0]
    if offline is not None:
        o.offline = offline
    return _check(c, lib.em_model_load(c, str(path).encode(), o)), keep


def _device_map(m):
    buf = ffi.new("char[]", 4096)
    lib.em_model_device_map(m, buf, 4096)
    text = ffi.string(buf).decode()
    out = {}
    for part in filter(None, text.replace(",", "\n").split("\n")):
        k, _, v = part.partition("=")
        out[k.strip()] = v.strip()
    return out


def _ids_tensor(x, name):
    """[B, T] i64 from an ember/numpy/torch tensor or nested lists (a 1-D input is one row)."""
    t = x if isinstance(x, Tensor) else tensor(x, dtype="i64")
    if t.dtype != "i64":
        t = ops.cast(t, _dtype("i64"))
    if t.ndim == 1:
        t = ops.reshape(t, [1, t.shape[0]])
    if t.ndim != 2:
        raise ValueError(f"{name} must be [batch, seq], got shape {list(t.shape)}")
    return t


def _mask_tensor(mask):
    if mask is None:
        return None
    t = mask if isinstance(mask, Tensor) else tensor(mask)
    return ops.cast(t, _dtype("bool"))


class BaseModelOutput:
    def __init__(self, last_hidden_state):
        self.last_hidden_state = last_hidden_state


class AutoModel:
    """An encoder (BERT family: all-MiniLM-L6-v2 ...): `model(input_ids, attention_mask)`
    gives `last_hidden_state` [B, T, H] as transformers' AutoModel does. Decoders are loaded
    with AutoModelForCausalLM."""

    def __init__(self, ptr, keep):
        self._m = ffi.gc(ptr, lib.em_model_free)
        self._keep = keep

    @classmethod
    def from_pretrained(cls, path, device_map=None, dtype=None, offline=None):
        m, keep = _load_model(path, device_map, dtype, None, offline)
        if lib.em_model_is_causal_lm(m):
            lib.em_model_free(m)
            raise EmberError(f"{path} is a causal language model: load it with "
                             "ember.AutoModelForCausalLM")
        return cls(m, keep)

    @property
    def hf_device_map(self):
        return _device_map(self._m)

    def __call__(self, input_ids, attention_mask=None, token_type_ids=None):
        c = _ctx()
        ids = _ids_tensor(input_ids, "input_ids")
        mask = _mask_tensor(attention_mask)
        types = _ids_tensor(token_type_ids, "token_type_ids") if token_type_ids is not None \
            else None
        out = lib.em_model_encode(c, self._m, ids._t, mask._t if mask else ffi.NULL,
                                  types._t if types else ffi.NULL)
        return BaseModelOutput(Tensor._adopt(c, out))


class SentenceTransformer:
    """sentence-transformers' `SentenceTransformer(dir).encode(texts)` for mean-pooling,
    normalising models such as all-MiniLM-L6-v2: a numpy array [len(texts), hidden]."""

    def __init__(self, path, device=None, offline=None):
        self.model = AutoModel.from_pretrained(path, device_map=device, offline=offline)
        self.tokenizer = AutoTokenizer.from_pretrained(path)

    def encode(self, sentences):
        import numpy as np
        single = isinstance(sentences, str)
        texts = [sentences] if single else list(sentences)
        c = _ctx()
        hidden = lib.em_model_config_get(self.model._m).hidden_size
        out = np.zeros((len(texts), hidden), dtype=np.float32)
        if texts:
            cs = [ffi.new("char[]", t.encode()) for t in texts]
            arr = ffi.new("char *[]", cs)
            if lib.em_embed_texts(c, self.model._m, self.tokenizer._tok, arr, len(texts),
                                  ffi.cast("float *", out.ctypes.data)) != 0:
                _raise(c)
        return out[0] if single else out


class AutoModelForCausalLM:
    """A decoder language model: a Hub id, a checkpoint folder or a GGUF file."""

    def __init__(self, ptr, keep):
        self._m = ffi.gc(ptr, lib.em_model_free)
        self._keep = keep

    @classmethod
    def from_pretrained(cls, path, device_map=None, dtype=None, moe_impl=None, offline=None):
        m, keep = _load_model(path, device_map, dtype, moe_impl, offline)
        if not lib.em_model_is_causal_lm(m):
            lib.em_model_free(m)
            raise EmberError(f"{path} is not a causal language model (use the encoder API)")
        return cls(m, keep)

    @property
    def hf_device_map(self):
        return _device_map(self._m)

    def __call__(self, input_ids, attention_mask=None):
        c = _ctx()
        ids = _ids_tensor(input_ids, "input_ids")
        mask = _mask_tensor(attention_mask)
        out = lib.em_model_forward(c, self._m, ids._t, mask._t if mask else ffi.NULL, ffi.NULL,
                                   False)
        return CausalLMOutput(Tensor._adopt(c, out))

    def generate(self, input_ids, attention_mask=None, max_new_tokens=None, do_sample=None,
                 temperature=None, top_k=None, top_p=None, min_p=None, repetition_penalty=None,
                 eos_token_id=None, seed=None, streamer=None, pad_token_id=0):
        """Prompt plus new tokens per row, as transformers returns them (rows of a batch that
        stop early are padded with pad_token_id; left padding of the prompts is kept)."""
        c = _ctx()
        rows = input_ids.tolist() if isinstance(input_ids, Tensor) else \
            (input_ids.tolist() if hasattr(input_ids, "tolist") else list(input_ids))
        if rows and not isinstance(rows[0], (list, tuple)):
            rows = [rows]
        if attention_mask is not None:
            am = attention_mask.tolist() if hasattr(attention_mask, "tolist") else attention_mask
            if am and not isinstance(am[0], (list, tuple)):
                am = [am]
            prompts = [[t for t, k in zip(r, m) if k] for r, m in zip(rows, am)]
        else:
            prompts = [list(r) for r in rows]
        p = ffi.new("em_generate_params *", lib.em_generate_default_params(self._m))
        if max_new_tokens is not None:
            p.max_new_tokens = max_new_tokens
        if do_sample is not None:
            p.do_sample = do_sample
        for name, v in (("temperature", temperature), ("top_k", top_k), ("top_p", top_p),
                        ("min_p", min_p), ("repetition_penalty", repetition_penalty),
                        ("seed", seed)):
            if v is not None:
                setattr(p, name, v)
        keep = []
        if eos_token_id is not None:
            eos = eos_token_id if isinstance(eos_token_id, (list, tuple)) else [eos_token_id]
            arr = ffi.new("em_token[]", list(eos) or [0])
            keep.append(arr)
            p.eos_ids, p.n_eos_ids = arr, len(eos)
        if streamer is not None:
            def on_token(user, seq, tok, piece):
                streamer.put([tok])
                return True
            cb = ffi.callback("bool(void *, int, em_token, const char *)", on_token)
            keep.append(cb)
            p.on_token = cb
        arrays = [ffi.new("em_token[]", r or [0]) for r in prompts]
        ptrs = ffi.new("em_token *[]", arrays)
        lens = ffi.new("int64_t[]", [len(r) for r in prompts])
        res = ffi.new("em_generate_result *")
        if lib.em_generate(c, self._m, ffi.NULL, ptrs, lens, len(prompts), p, res) != 0:
            _raise(c)
        try:
            new = [[res.ids[b][i] for i in range(res.n_ids[b])] for b in range(res.batch)]
        finally:
            lib.em_generate_result_free(res)
        if streamer is not None and hasattr(streamer, "end"):
            streamer.end()
        width = max(len(n) for n in new) if new else 0
        return [list(r) + n + [pad_token_id] * (width - len(n)) for r, n in zip(rows, new)]


from ._train import Trainer, TrainStep, train  # noqa: E402 (needs the helpers above)
