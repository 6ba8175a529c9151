#!/usr/bin/env python3
"""CUDA source -> PTX with NVRTC (libnvrtc through ctypes; no GPU needed).

    nvrtc-ptx.py LIBNVRTC KERNEL.cu OUT.ptx [NVRTC options ...]

The build log goes to stderr; a failed compile exits non-zero with NVRTC's error string.
Used by scripts/sass-report.sh and scripts/gpu/prepare.sh.
"""
import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
src = open(sys.argv[2], "rb").read()
opts = [o.encode() for o in sys.argv[4:]]
prog = ctypes.c_void_p()
assert lib.nvrtcCreateProgram(ctypes.byref(prog), src, b"kernel.cu", 0, None, None) == 0
arr = (ctypes.c_char_p * len(opts))(*opts)
rc = lib.nvrtcCompileProgram(prog, len(opts), arr)
n = ctypes.c_size_t()
lib.nvrtcGetProgramLogSize(prog, ctypes.byref(n))
log = ctypes.create_string_buffer(n.value)
lib.nvrtcGetProgramLog(prog, log)
if log.value.strip():
    sys.stderr.write(log.value.decode(errors="replace") + "\n")
if rc != 0:
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    sys.exit("NVRTC failed: " + lib.nvrtcGetErrorString(rc).decode())
lib.nvrtcGetPTXSize(prog, ctypes.byref(n))
ptx = ctypes.create_string_buffer(n.value)
lib.nvrtcGetPTX(prog, ptx)
open(sys.argv[3], "wb").write(ptx.value)
