"""Zero-copy exchange with numpy, torch, jax ... through DLPack (the array API's protocol).

Export: `Tensor.__dlpack__` hands out a capsule whose DLTensor points at the tensor's own
storage; the capsule holds one reference to the Ember tensor, dropped by the consumer's call to
the deleter (or by the capsule's destructor when nobody consumed it). Import: `from_dlpack(x)`
wraps the producer's memory with em_from_host_borrowed, whose release callback calls the
producer's deleter when the last Ember reference goes. Both the legacy ("dltensor") and the
versioned ("dltensor_versioned", DLPack 1.x) capsules are spoken. CPU memory only: Ember's PJRT
devices keep their buffers inside the plugin, which exposes no DLPack."""
import ctypes
import threading

from ._ffi import ffi, lib

ffi.cdef("""
typedef struct { int32_t device_type; int32_t device_id; } DLDevice;
typedef struct { uint8_t code; uint8_t bits; uint16_t lanes; } DLDataType;
typedef struct {
    void *data; DLDevice device; int32_t ndim; DLDataType dtype;
    int64_t *shape; int64_t *strides; uint64_t byte_offset;
} DLTensor;
typedef struct DLManagedTensor {
    DLTensor dl_tensor; void *manager_ctx; void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;
typedef struct { uint32_t major; uint32_t minor; } DLPackVersion;
typedef struct DLManagedTensorVersioned {
    DLPackVersion version; void *manager_ctx;
    void (*deleter)(struct DLManagedTensorVersioned *self);
    uint64_t flags; DLTensor dl_tensor;
} DLManagedTensorVersioned;
""")

CPU = 1  # kDLCPU
_READ_ONLY = 1  # DLPACK_FLAG_BITMASK_READ_ONLY
_INT, _UINT, _FLOAT, _BFLOAT, _BOOL = 0, 1, 2, 4, 6
_CODES = {"f32": (_FLOAT, 32), "f64": (_FLOAT, 64), "f16": (_FLOAT, 16), "bf16": (_BFLOAT, 16),
          "i64": (_INT, 64), "i32": (_INT, 32), "i16": (_INT, 16), "i8": (_INT, 8),
          "u8": (_UINT, 8), "bool": (_BOOL, 8)}
_NAMES = {v: k for k, v in _CODES.items()}

_api = ctypes.pythonapi
# The destructor gets the dying capsule as a raw pointer: a py_object argument would take a new
# reference to an object whose count already reached zero.
_Destructor = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_raw_is_valid = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_IsValid", _api))
_raw_get_pointer = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", _api))
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, _Destructor]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]

# What an exported capsule keeps alive until its deleter runs: address -> (struct, arrays,
# the retained em_tensor). A dict under a lock because consumers free from any thread.
_live = {}
_live_lock = threading.Lock()


def _drop(addr):
    with _live_lock:
        entry = _live.pop(addr, None)
    if entry is not None:
        lib.em_tensor_release(entry[-1])


@ffi.callback("void(DLManagedTensor *)")
def _delete_legacy(m):
    _drop(int(ffi.cast("uintptr_t", m)))


@ffi.callback("void(DLManagedTensorVersioned *)")
def _delete_versioned(m):
    _drop(int(ffi.cast("uintptr_t", m)))


def _capsule_destructor(kind):
    name = kind.encode()

    def destroy(capsule):
        # still under its first name: nobody consumed it, so the deleter is ours to call
        if _raw_is_valid(capsule, name):
            p = _raw_get_pointer(capsule, name)
            m = ffi.cast("DLManagedTensor *" if kind == "dltensor"
                         else "DLManagedTensorVersioned *", p)
            m.deleter(m)
    return _Destructor(destroy)


_destroy_legacy = _capsule_destructor("dltensor")
_destroy_versioned = _capsule_destructor("dltensor_versioned")


def _fill(dl, c, t, data):
    """Fills DLTensor dl for Ember tensor t; returns the arrays it points at."""
    name = ffi.string(lib.em_dtype_name(lib.em_tensor_dtype(t))).decode()
    n = lib.em_tensor_ndim(t)
    shape = ffi.new("int64_t[]", [lib.em_tensor_shape(t)[i] for i in range(n)] or [0])
    strides = ffi.new("int64_t[]", [lib.em_tensor_strides(t)[i] for i in range(n)] or [0])
    dl.data = data
    dl.device.device_type, dl.device.device_id = CPU, 0
    dl.ndim = n
    dl.dtype.code, dl.dtype.bits = _CODES[name]
    dl.dtype.lanes = 1
    dl.shape, dl.strides, dl.byte_offset = shape, strides, 0
    return shape, strides


def export(c, t, versioned):
    """A DLPack capsule for CPU tensor t (an em_tensor *), holding a new reference to it."""
    dev = ffi.string(lib.em_device_name(lib.em_tensor_device(t))).decode()
    if not dev.startswith("cpu"):
        raise BufferError(f"DLPack export needs a CPU tensor; this one is on {dev} "
                          "(move it with .to('cpu'))")
    name = ffi.string(lib.em_dtype_name(lib.em_tensor_dtype(t))).decode()
    if name not in _CODES:
        raise BufferError(f"DLPack has no type for Ember's {name} (cast it first)")
    data = lib.em_tensor_data(c, t)  # materialises fused work; NULL for an empty tensor
    if data == ffi.NULL and lib.em_tensor_numel(t) > 0:
        from . import _raise
        _raise(c)
    if versioned:
        m = ffi.new("DLManagedTensorVersioned *")
        m.version.major, m.version.minor = 1, 0
        m.deleter = _delete_versioned
        m.flags = 0
    else:
        m = ffi.new("DLManagedTensor *")
        m.deleter = _delete_legacy
    arrays = _fill(m.dl_tensor, c, t, data)
    addr = int(ffi.cast("uintptr_t", m))
    with _live_lock:
        _live[addr] = (m, arrays, lib.em_tensor_retain(t))
    if versioned:
        return _api.PyCapsule_New(addr, b"dltensor_versioned", _destroy_versioned)
    return _api.PyCapsule_New(addr, b"dltensor", _destroy_legacy)


@ffi.callback("void(void *)")
def _release_imported(user):
    """em_from_host_borrowed's release: the producer's deleter, once Ember is done."""
    kind = _imported.pop(int(ffi.cast("uintptr_t", user)), None)
    if kind == "versioned":
        m = ffi.cast("DLManagedTensorVersioned *", user)
    else:
        m = ffi.cast("DLManagedTensor *", user)
    if m.deleter != ffi.NULL:
        m.deleter(m)


_imported = {}  # managed-tensor address -> "legacy" | "versioned" (dict ops are atomic)


def _capsule_of(x):
    """The producer's capsule: versioned when it speaks DLPack 1.x, else the legacy one."""
    try:
        return x.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer from before the array API's max_version keyword
        return x.__dlpack__()


def import_(c, x, adopt, copy):
    """An em_tensor * over the memory of DLPack producer x (zero copy unless it must copy)."""
    if hasattr(x, "__dlpack_device__"):
        kind, index = x.__dlpack_device__()
        if int(kind) != CPU:
            raise BufferError(f"ember.from_dlpack takes CPU memory; this is device type "
                              f"{int(kind)}:{index} (kDLCPU is 1)")
    capsule = _capsule_of(x)
    if _api.PyCapsule_IsValid(capsule, b"dltensor_versioned"):
        p = _api.PyCapsule_GetPointer(capsule, b"dltensor_versioned")
        m = ffi.cast("DLManagedTensorVersioned *", p)
        kind, used, read_only = "versioned", b"used_dltensor_versioned", bool(m.flags & _READ_ONLY)
    elif _api.PyCapsule_IsValid(capsule, b"dltensor"):
        p = _api.PyCapsule_GetPointer(capsule, b"dltensor")
        m = ffi.cast("DLManagedTensor *", p)
        kind, used, read_only = "legacy", b"used_dltensor", False
    else:
        raise BufferError("__dlpack__ returned no unused DLPack capsule")
    dl = m.dl_tensor
    if dl.device.device_type != CPU:
        raise BufferError(f"ember.from_dlpack takes CPU memory (device type "
                          f"{dl.device.device_type})")
    key = (dl.dtype.code, dl.dtype.bits)
    if dl.dtype.lanes != 1 or key not in _NAMES:
        raise BufferError(f"DLPack type code {dl.dtype.code}, {dl.dtype.bits} bits, "
                          f"{dl.dtype.lanes} lanes has no Ember dtype")
    from . import _dtype
    dtype = _dtype(_NAMES[key])
    n = dl.ndim
    shape = [dl.shape[i] for i in range(n)]
    numel = 1
    for s in shape:
        numel *= s
    if dl.strides != ffi.NULL and numel > 1:
        want, expect = 1, []
        for s in reversed(shape):
            expect.append(want)
            want *= s
        expect.reverse()
        if any(shape[i] != 1 and dl.strides[i] != expect[i] for i in range(n)):
            copy = True  # Ember wraps only row-major memory; a strided view is copied
    nbytes = numel * dl.dtype.bits // 8
    data = ffi.cast("char *", dl.data) + dl.byte_offset if dl.data != ffi.NULL else ffi.NULL
    cshape = ffi.new("int64_t[]", shape or [1])
    _api.PyCapsule_SetName(capsule, used)  # from here on the deleter is ours to call
    if copy or read_only:
        try:
            if copy and dl.strides != ffi.NULL and numel > 1:
                import numpy as np
                # numpy knows how to gather a strided view; it copies into row-major order
                flat = _strided_copy(np, data, shape, [dl.strides[i] for i in range(n)],
                                     dl.dtype.bits // 8)
                data = ffi.cast("char *", flat.ctypes.data)
            return adopt(c, lib.em_from_host_(c, b"python", 0, dtype, n, cshape, data))
        finally:
            if m.deleter != ffi.NULL:
                m.deleter(m)
    user = ffi.cast("void *", m)
    _imported[int(ffi.cast("uintptr_t", user))] = kind
    t = lib.em_from_host_borrowed_(c, b"python", 0, dtype, n, cshape, data, nbytes,
                                   _release_imported, user)
    if t == ffi.NULL:
        _imported.pop(int(ffi.cast("uintptr_t", user)), None)
        if m.deleter != ffi.NULL:
            m.deleter(m)
    return adopt(c, t)


def _strided_copy(np, data, shape, strides, esize):
    """A row-major copy of a strided view (strides in elements, as DLPack gives them)."""
    lo = sum((s - 1) * st for s, st in zip(shape, strides) if st < 0)
    hi = sum((s - 1) * st for s, st in zip(shape, strides) if st > 0)
    raw = np.frombuffer(ffi.buffer(ffi.cast("char *", data) + lo * esize, (hi - lo + 1) * esize),
                        dtype=np.uint8)
    view = np.lib.stride_tricks.as_strided(
        raw[-lo * esize:], shape=tuple(shape) + (esize,),
        strides=tuple(st * esize for st in strides) + (1,))
    return np.ascontiguousarray(view)
