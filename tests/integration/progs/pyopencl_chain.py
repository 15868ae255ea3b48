"""PyOpenCL ElementwiseKernel chains for the fusion tests (run with the
system python3, which has python3-pyopencl). Plain PyOpenCL: it knows
nothing of clshim, so a run under a fusion plan must print exactly what a
run without the shim prints. ElementwiseKernel passes every array as a
base pointer plus a byte offset and loops over the elements with a
grid-stride loop, so the shape differs from the C tests' kernels.
    pyopencl_chain.py
"""
import hashlib
import os

os.environ.setdefault("PYOPENCL_NO_CACHE", "1")  # build from source: clshim sees the programs

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
n = 100_003  # not a multiple of any work-group size: several loop trips, a ragged end

scale_add = ElementwiseKernel(ctx, "float *x, float *y, float s", "y[i] = x[i] * s + 1.0f", "scale_add")
square_it = ElementwiseKernel(ctx, "float *y, float *z", "z[i] = y[i] * y[i] - 0.5f", "square_it")

x = cla.to_device(q, (np.arange(n, dtype=np.float32) % 977) / 7.0)
y = cla.zeros(q, n, np.float32)
z = cla.zeros(q, n, np.float32)


def digest(tag, arr):
    print(tag, hashlib.sha256(arr.get().tobytes()).hexdigest()[:16], flush=True)


for it in range(3):  # one shared buffer, offset 0 in both kernels
    scale_add(x, y, np.float32(0.5 + it))
    square_it(y, z)
digest("plain", z)

for it in range(3):  # the shared buffer sliced alike: equal byte offsets
    scale_add(x[8:], y[8:], np.float32(1.5))
    square_it(y[8:], z[8:])
digest("sliced", z)

for it in range(3):  # sliced differently: another element of y in each kernel
    scale_add(x[16:], y[16:], np.float32(2.5))
    square_it(y[8:-8], z[8:-8])
digest("shifted", z)
