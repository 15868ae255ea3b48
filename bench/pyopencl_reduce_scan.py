"""Reductions and scans as PyOpenCL programs write them, unmodified (the
program of issue 33 item 2 that automatic fusion must refuse before any
fused build): a dot product and a sum (ReductionKernel: a main kernel, then
a second stage over the partial results with another range and local
size), an inclusive and an exclusive scan (InclusiveScanKernel,
GenericScanKernel: an upsweep, a scan of the intervals in one work-group,
a final update), and a cumulative sum through pyopencl.array, each run
STEPS times (env, default 20) at N floats (env, default 1 Mi). Prints one
line per operation with a hash of its results, which must be the same
with and without clshim.
"""
import hashlib
import os

os.environ.setdefault("PYOPENCL_NO_CACHE", "1")  # build from source: clshim sees the programs

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.reduction import ReductionKernel
from pyopencl.scan import GenericScanKernel, InclusiveScanKernel, ExclusiveScanKernel

ctx = cl.create_some_context(interactive=False)
q = cl.CommandQueue(ctx)
n = int(os.environ.get("N", 1 << 20))
steps = int(os.environ.get("STEPS", 20))

x = cla.to_device(q, ((np.arange(n, dtype=np.float32) % 977) / 977.0).astype(np.float32))
y = cla.to_device(q, ((np.arange(n, dtype=np.float32) % 311) / 311.0).astype(np.float32))
ints = cla.to_device(q, (np.arange(n, dtype=np.int32) % 7).astype(np.int32))

dot = ReductionKernel(ctx, np.float32, neutral="0", reduce_expr="a+b", map_expr="x[i]*y[i]",
                      arguments="__global const float *x, __global const float *y")
total = ReductionKernel(ctx, np.int32, neutral="0", reduce_expr="a+b", map_expr="v[i]",
                        arguments="__global const int *v")
inclusive = InclusiveScanKernel(ctx, np.int32, "a+b", "0")
exclusive = ExclusiveScanKernel(ctx, np.int32, "a+b", "0")
generic = GenericScanKernel(ctx, np.int32, arguments="__global const int *src, __global int *dst",
                            input_expr="src[i] % 3", scan_expr="a+b", neutral="0",
                            output_statement="dst[i] = item;")


def digest(a):
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


h = {k: hashlib.sha256() for k in ("dot", "sum", "inclusive", "exclusive", "generic", "cumsum")}
out = cla.empty_like(ints)
for _ in range(steps):
    h["dot"].update(dot(x, y).get().tobytes())
    h["sum"].update(total(ints).get().tobytes())
    a = ints.copy()
    inclusive(a)
    h["inclusive"].update(a.get().tobytes())
    b = ints.copy()
    exclusive(b)
    h["exclusive"].update(b.get().tobytes())
    generic(ints, out)
    h["generic"].update(out.get().tobytes())
    h["cumsum"].update(cla.cumsum(ints).get().tobytes())
q.finish()
for k, v in h.items():
    print("%s %s" % (k, v.hexdigest()[:16]))
