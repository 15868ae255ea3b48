"""pyopencl_smoke.py: a small but real PyOpenCL program for `make check`
(the full PyOpenCL test suite runs in `make compat`). PyOpenCL loads its
extension module with RTLD_LOCAL, the trap that once crashed Python under an
LD_PRELOAD shim; it also builds many generated kernels (elementwise,
reductions, scans), several with -D options. Prints deterministic results."""
import numpy as np
import pyopencl as cl
import pyopencl.array as cla
import pyopencl.clrandom as clrandom
from pyopencl.elementwise import ElementwiseKernel
from pyopencl.reduction import ReductionKernel
from pyopencl.scan import GenericScanKernel

ctx = cl.Context(cl.get_platforms()[0].get_devices())
queue = cl.CommandQueue(ctx)
n = 1 << 14
a = cla.to_device(queue, np.arange(n, dtype=np.float32) * 0.5)
b = cla.to_device(queue, np.linspace(0, 1, n).astype(np.float32))

for scale in (2, 3):
    src = """
    __kernel void axpb(__global const float *x, __global float *y) {
        size_t i = get_global_id(0);
        y[i] = SCALE * x[i] + 1.0f;
    }"""
    prg = cl.Program(ctx, src).build(options=["-DSCALE=%d.0f" % scale])
    out = cla.empty_like(a)
    prg.axpb(queue, (n,), None, a.data, out.data)
    print("program SCALE=%d: %.1f" % (scale, float(cla.sum(out).get())))

lin = ElementwiseKernel(ctx, "float *x, float *y, float *z", "z[i] = 2*x[i] + y[i]*y[i]", "lincomb")
z = cla.empty_like(a)
lin(a, b, z)
print("elementwise: %.4f" % float(cla.sum(z).get()))

dot = ReductionKernel(ctx, np.float32, neutral="0", reduce_expr="a+b", map_expr="x[i]*y[i]",
                      arguments="__global const float *x, __global const float *y")
print("reduction: %.4f" % float(dot(a, b).get()))

scan = GenericScanKernel(ctx, np.int32, arguments="__global int *ary", input_expr="ary[i]",
                         scan_expr="a+b", neutral="0", output_statement="ary[i] = item;")
ints = cla.to_device(queue, np.ones(n, dtype=np.int32))
scan(ints)
print("scan last: %d" % int(ints[-1].get()))

print("array ops: %.4f %.4f" % (float(cla.max(a).get()), float((a * b + 1).get().mean())))
r = clrandom.rand(queue, (1024,), np.float32, a=0, b=1)
print("random in range: %s" % bool(((r.get() >= 0) & (r.get() <= 1)).all()))
