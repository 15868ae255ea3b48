"""What fusing two PyOpenCL ElementwiseKernels gains or costs: run by
bench/pyopencl_fusion.sh, once plainly under the shim, once with the
plan scale_add+square_it, once with HAND=1 (the chain as one kernel).
Prints the best time per chain (20 chains per queue.finish(), 20
repetitions) for N floats (env N).
"""
import os
import time

os.environ.setdefault("PYOPENCL_NO_CACHE", "1")  # build from source: clshim sees the programs

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
n = int(os.environ.get("N", 1 << 20))
scale_add = ElementwiseKernel(ctx, "float *x, float *y, float s", "y[i] = x[i] * s + 1.0f", "scale_add")
square_it = ElementwiseKernel(ctx, "float *y, float *z", "z[i] = y[i] * y[i] - 0.5f", "square_it")
# HAND=1: the chain written by hand as one ElementwiseKernel (what fusion can reach)
both = ElementwiseKernel(ctx, "float *x, float *y, float *z, float s",
                         "y[i] = x[i] * s + 1.0f; z[i] = y[i] * y[i] - 0.5f", "both")


def chain():
    if os.environ.get("HAND") == "1":
        both(x, y, z, np.float32(0.5))
    else:
        scale_add(x, y, np.float32(0.5))
        square_it(y, z)


x = cla.to_device(q, np.ones(n, np.float32))
y = cla.empty_like(x)
z = cla.empty_like(x)
for _ in range(5):
    chain()
q.finish()
best = 1e9
for rep in range(20):
    t0 = time.perf_counter()
    for _ in range(20):
        chain()
    q.finish()
    best = min(best, (time.perf_counter() - t0) / 20)
print("%.1f" % (best * 1e6))
