"""XLA's FFI call frame, read in numba: what own processors' kernels
(:mod:`analysis.select.singlekernels`) take from it.

A handler of XLA's typed FFI (``XLA_FFI_Error* handler(XLA_FFI_CallFrame*)``:
:data:`HANDLER_SIG`) gets one pointer; the structs behind it are laid out in
``xla/ffi/api/c_api.h`` (installed with jaxlib: ``jaxlib/include/xla/ffi/api/c_api.h``),
API version :data:`API_MAJOR`.:data:`API_MINOR`, read here by 8-byte words (every field
is a pointer, a ``size_t`` or an ``int64_t``, but the enums, 4-byte ints at the start of
a word):

- ``XLA_FFI_CallFrame``: ``struct_size`` (word 0), ``extension_start`` (1), ``api`` (2),
  ``ctx`` (3), ``stage`` (4: byte 32), then ``args`` (an ``XLA_FFI_Args``, words 5-9)
  and ``rets`` (an ``XLA_FFI_Rets``, words 10-14), ``attrs``, ``future``;
- ``XLA_FFI_Args`` / ``XLA_FFI_Rets``: ``struct_size``, ``extension_start``, ``size``,
  ``types``, then the array of pointers to the buffers: frame words 7 / 12 (their
  counts) and 9 / 14 (:func:`buffer`'s ``which``);
- ``XLA_FFI_Buffer``: ``struct_size``, ``extension_start``, ``dtype``, ``data`` (word
  3), ``rank`` (4), ``dims`` (5: ``rank`` int64s);
- at registration XLA calls the handler with an ``XLA_FFI_Metadata_Extension`` in
  ``extension_start`` (an ``XLA_FFI_Extension_Base``: ``struct_size``, ``type`` at byte
  8, ``next``; then ``metadata``, word 3), whose ``XLA_FFI_Metadata`` (``struct_size``,
  then ``api_version`` ``{struct_size, extension_start, major, minor}``: the ints at
  bytes 24 and 28, then ``traits`` at 32) the handler fills (:func:`metadata`).

A newer XLA FFI API that moves a field breaks these offsets: the kernels' tests
(``tests/test_soft_fast_kernels.py``) compare every kernel with the JAX recursion.
Each reader is compiled once and called, not inlined (:func:`_called`); a handler links
their machine code, so its cache is keyed by this file too
(``singlekernels``' ``depends``).
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba import types
from numba.extending import intrinsic

from analysis._compat.numba import guard_cache

__all__: list[str] = []  # internal to analysis.select.singlekernels

# XLA FFI C API constants (xla/ffi/api/c_api.h)
EXTENSION_METADATA = 1  # XLA_FFI_Extension_Metadata
STAGE_EXECUTE = 3  # XLA_FFI_ExecutionStage_EXECUTE
API_MAJOR, API_MINOR = 0, 3  # XLA_FFI_API_MAJOR, XLA_FFI_API_MINOR

#: A handler's signature: a call frame's pointer in, an error's pointer out (NULL: success).
HANDLER_SIG = types.voidptr(types.voidptr)


def _called(fn):  # noqa: ANN001, ANN202
    """A reader called once per kernel call, compiled once and called, not inlined: numba
    runs its bytecode passes again at every inlined call (~90 here per handler; the three
    handlers of a first pass 14.7 -> 11.3 s of CPU); its cache the package's (checked
    files)."""
    kernel = nb.njit(cache=True, nogil=True)(fn)
    guard_cache(kernel._cache)
    return kernel


@intrinsic
def ptr(typingctx, addr):
    """An ``int64`` address as a ``void*``."""
    sig = types.voidptr(types.int64)

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.voidptr))

    return sig, codegen


@intrinsic
def address(typingctx, p):
    """A ``void*`` as an ``int64`` address."""
    sig = types.int64(types.voidptr)

    def codegen(context, builder, signature, args):
        return builder.ptrtoint(args[0], context.get_value_type(types.int64))

    return sig, codegen


@_called
def word(addr, i):
    """The ``i``-th 8-byte word at ``addr`` (a pointer, a size_t or an int64)."""
    return nb.carray(ptr(addr + 8 * i), (1,), np.int64)[0]


@_called
def int32(addr):
    """The 4-byte int at ``addr`` (an enum)."""
    return nb.carray(ptr(addr), (1,), np.int32)[0]


@_called
def metadata(frame):
    """True when XLA asks for the handler's metadata (at registration): the API version
    written, traits none."""
    ext = word(frame, 1)  # XLA_FFI_CallFrame.extension_start
    if ext != 0 and int32(ext + 8) == EXTENSION_METADATA:  # XLA_FFI_Extension_Base.type
        meta = word(ext, 3)  # XLA_FFI_Metadata_Extension.metadata
        out = nb.carray(ptr(meta + 24), (3,), np.int32)  # api_version.{major,minor}, traits
        out[0] = API_MAJOR
        out[1] = API_MINOR
        out[2] = 0
        return True
    return False


@_called
def executing(fa):
    """True when XLA asks the handler to run (not for its metadata, nor another stage)."""
    return not metadata(fa) and int32(fa + 32) == STAGE_EXECUTE


@_called
def buffer(frame, which, i):
    """``(data address, rank, dims address)`` of argument (``which`` 9) or result
    (``which`` 14) ``i``: XLA_FFI_Args.args / XLA_FFI_Rets.rets at those words of the
    call frame, each an XLA_FFI_Buffer {size, ext, dtype, data, rank, dims}."""
    buf = word(word(frame, which), i)
    return word(buf, 3), word(buf, 4), word(buf, 5)


@_called
def f64(frame, which, i, lanes):
    """Buffer ``i`` as a float64 array: 1-d, or 2-d ``(lanes, size)`` when ``lanes``."""
    data, rank, dims = buffer(frame, which, i)
    n = word(dims, rank - 1)
    b = word(dims, 0) if lanes else 1
    return nb.carray(ptr(data), (b, n), np.float64)


@_called
def i64(frame, which, i):
    """Buffer ``i`` as a 1-d int64 array."""
    data, rank, dims = buffer(frame, which, i)
    return nb.carray(ptr(data), (word(dims, 0),), np.int64)
