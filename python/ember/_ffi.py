"""The C library through cffi in ABI mode: the declarations are Ember's own public headers,
preprocessed when the package was built (_cdef.h), so there is no second copy of the API to keep
in step, and no compiled extension: one wheel serves every CPython version. cffi releases the
GIL around every C call, so model loading, generation and long ops let other threads run."""
import os

import cffi

_here = os.path.dirname(os.path.abspath(__file__))
ffi = cffi.FFI()
with open(os.path.join(_here, "_cdef.h")) as _f:
    ffi.cdef(_f.read())


def _find_library():
    env = os.environ.get("EMBER_LIBRARY")
    if env:
        return env
    for name in sorted(os.listdir(_here)):
        if name.startswith("libember.so"):
            return os.path.join(_here, name)
    raise ImportError(f"libember.so is not in {_here} (set EMBER_LIBRARY to its path)")


lib = ffi.dlopen(_find_library())
