"""One process of bench/pyopencl_arrays.sh: numerical code as it is written
with PyOpenCL arrays, unmodified (it knows nothing of clshim). MODE (env):
  arrays   array expressions, several elementwise operations per step:
           y = s*x + c; z = y*y - 0.5; w = z*y + x (5 kernels per step,
           temporaries from a memory pool, as PyOpenCL's examples do)
  three    three ElementwiseKernels per step (y = s*x + c; z = y*y;
           w = z - 0.5f), the program of issue 33 item 5
  refused  a step whose kernels automatic fusion must refuse (a
           neighbour-reading stencil after a pointwise kernel)
N (env) floats. Runs WARM steps, then BLOCKS blocks of STEPS steps each
ended by queue.finish(); prints the median time per step (us) of the
blocks and a hash of the result, which must be equal with and without
fusion; with TOTAL=1 also the time of all timed steps (ms), learning and
the fused program's build included when WARM=0; with ISSUE=1 also the
median time per step the host spent issuing the steps (us, up to the
block's queue.finish(): a step can take no less wherever fusion leaves
the application's own calls as they are).
"""
import hashlib
import os
import time

os.environ.setdefault("PYOPENCL_NO_CACHE", "1")  # build from source: clshim sees the programs

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.tools as clt
from pyopencl.elementwise import ElementwiseKernel

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
n = int(os.environ.get("N", 1 << 16))
mode = os.environ.get("MODE", "arrays")
warm, blocks, steps = (int(os.environ.get(k, d)) for k, d in (("WARM", 40), ("BLOCKS", 9), ("STEPS", 10)))
pool = clt.MemoryPool(clt.ImmediateAllocator(q))
x = cla.to_device(q, ((np.arange(n, dtype=np.float32) % 977) / 977.0).astype(np.float32), allocator=pool)
s, c = np.float32(1.5), np.float32(0.25)

if mode == "three":
    k1 = ElementwiseKernel(ctx, "float *x, float *y, float s, float c", "y[i] = s * x[i] + c", "k_scale")
    k2 = ElementwiseKernel(ctx, "float *x, float *y", "y[i] = x[i] * x[i]", "k_square")
    k3 = ElementwiseKernel(ctx, "float *x, float *y", "y[i] = x[i] - 0.5f", "k_shift")
    y, z, w = (cla.empty_like(x) for _ in range(3))

    def step():
        k1(x, y, s, c)
        k2(y, z)
        k3(z, w)
        return w
elif mode == "refused":
    k1 = ElementwiseKernel(ctx, "float *x, float *y, float s, float c", "y[i] = s * x[i] + c", "k_scale")
    blur = ElementwiseKernel(ctx, "float *y, float *z, long m",
                             "z[i] = (y[i > 0 ? i - 1 : i] + y[i] + y[i + 1 < m ? i + 1 : i]) / 3.0f", "k_blur")
    y, z = cla.empty_like(x), cla.empty_like(x)

    def step():
        k1(x, y, s, c)
        blur(y, z, np.int64(n))
        return z
else:
    def step():
        y = s * x + c
        z = y * y - 0.5
        return z * y + x

for _ in range(warm):
    out = step()
q.finish()
times, issue = [], []
for _ in range(blocks):
    t0 = time.perf_counter()
    for _ in range(steps):
        out = step()
    t1 = time.perf_counter()
    q.finish()
    times.append((time.perf_counter() - t0) / steps)
    issue.append((t1 - t0) / steps)
times.sort()
issue.sort()
total = sum(times) * steps  # the timed steps, compiles of a first fusion included (TOTAL=1 prints it, ms)
print("%.1f %s%s%s" % (times[len(times) // 2] * 1e6, hashlib.sha256(out.get().tobytes()).hexdigest()[:16],
                       " %.2f" % (total * 1e3) if os.environ.get("TOTAL") == "1" else "",
                       " issue %.1f" % (issue[len(issue) // 2] * 1e6) if os.environ.get("ISSUE") == "1" else ""))
