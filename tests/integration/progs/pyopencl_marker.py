"""PyOpenCL with its own binary cache on (its default): after each miss in
that cache it appends "\\n\\n__constant int pyopencl_defeat_cache_<uuid4> =
0;" to the source it builds (pyopencl/cache.py), so that no driver cache can
serve it. Prints what the application can see of each program: results, the
program's queries (its source, kernels, build status, options, log), each
kernel's arguments and work-group facts. Each build's own random name is
printed as <own> (another as <other>, the neutral one as <zeros>), so a run under clshim, whose
binaries were built from the marker's neutral form, must print exactly what
a plain run prints (tests/integration/test_pyopencl_marker.sh).
    pyopencl_marker.py         programs that build
    pyopencl_marker.py fail    a program that fails because of its marker
"""
import hashlib
import os
import re
import sys

assert "PYOPENCL_NO_CACHE" not in os.environ, "this needs PyOpenCL's own cache on"

import numpy as np
import pyopencl as cl
import pyopencl.array as cla
from pyopencl.elementwise import ElementwiseKernel

MARKER = re.compile(r"\n\n__constant int pyopencl_defeat_cache_([0-9a-f]{32}) = 0;\Z")
NAME = re.compile(r"pyopencl_defeat_cache_([0-9a-f]{32})")
DRIVER_FILE = re.compile(r"\S*tempfile_\w+\.cl")  # PoCL compiles from a temporary file of its own
PY_FILE = re.compile(r"\(source saved as \S+\)")  # PyOpenCL's copy of a source that failed
ADDRESS = re.compile(r"at 0x[0-9a-f]+")  # a Python object's, in PyOpenCL's messages

ctx = cl.Context(cl.get_platforms()[0].get_devices()[:1])
dev = ctx.devices[0]
queue = cl.CommandQueue(ctx)
n = 4099


def masked(text, own):
    text = PY_FILE.sub("(source saved as <file>)", DRIVER_FILE.sub("<file>", text))
    text = ADDRESS.sub("at <address>", text)
    kind = lambda name: "own" if name == own else "zeros" if name == "0" * 32 else "other"
    return NAME.sub(lambda m: "pyopencl_defeat_cache_<%s>" % kind(m.group(1)), text)


def query(what, fn):
    try:
        return repr(fn())
    except cl.Error as e:
        return "error %s" % e.code


def show(tag, prg):
    src = prg.get_info(cl.program_info.SOURCE)
    m = MARKER.search(src)
    own = m.group(1) if m else None
    print(tag, "source: marker", "appended" if m else "absent", "length", len(src),
          "sha", hashlib.sha256(masked(src, own).encode()).hexdigest()[:16])
    print(tag, "kernels:", prg.get_info(cl.program_info.NUM_KERNELS), prg.get_info(cl.program_info.KERNEL_NAMES))
    b = cl.program_build_info
    for name in ("STATUS", "OPTIONS", "BINARY_TYPE", "GLOBAL_VARIABLE_TOTAL_SIZE"):
        print(tag, name.lower() + ":", query(name, lambda: prg.get_build_info(dev, getattr(b, name))))
    print(tag, "log:", repr(masked(prg.get_build_info(dev, b.LOG), own)))
    for k in sorted(prg.all_kernels(), key=lambda k: k.function_name):
        # Not CL_KERNEL_ATTRIBUTES: PoCL 3.1 answers "" for every kernel of a
        # program made from a binary, any hit's, marker or not.
        nargs = k.get_info(cl.kernel_info.NUM_ARGS)
        print(tag, "kernel", k.function_name, "args", nargs)
        for a in range(nargs):
            print(tag, "  arg", a, *(query(i, lambda: k.get_arg_info(a, getattr(cl.kernel_arg_info, i)))
                                     for i in ("NAME", "TYPE_NAME", "ADDRESS_QUALIFIER", "TYPE_QUALIFIER")))
        w = cl.kernel_work_group_info
        print(tag, "  work-group", *(query(i, lambda: k.get_work_group_info(getattr(w, i), dev))
                                     for i in ("WORK_GROUP_SIZE", "COMPILE_WORK_GROUP_SIZE", "LOCAL_MEM_SIZE",
                                               "PRIVATE_MEM_SIZE", "PREFERRED_WORK_GROUP_SIZE_MULTIPLE")))


if sys.argv[1:] == ["fail"]:
    # The marker itself is what fails here (the pragma makes its warning an
    # error): a build of the source without it would succeed.
    src = """#pragma clang diagnostic error "-Wmissing-variable-declarations"
    __kernel void k(__global int *o) { o[get_global_id(0)] = 1; }"""
    try:
        cl.Program(ctx, src).build()
        print("fail: built")
    except cl.RuntimeError as e:
        print("fail: code", e.code, "message", repr(masked(str(e), None)))
    sys.exit(0)

two = cl.Program(ctx, """
__kernel void axpb(__global const float *x, __global float *y, const float a) {
    size_t i = get_global_id(0);
    y[i] = a * x[i] + B;
}
__kernel __attribute__((reqd_work_group_size(1, 1, 1))) void twice(__global float *y) {
    y[get_global_id(0)] *= 2.0f;
}
""").build(options=["-cl-kernel-arg-info", "-DB=1.5f"])
show("two", two)
x = cla.to_device(queue, (np.arange(n, dtype=np.float32) % 101) * 0.25)
y = cla.empty_like(x)
two.axpb(queue, (n,), None, x.data, y.data, np.float32(3))
two.twice(queue, (n,), (1,), y.data)
print("two: result %.4f" % float(cla.sum(y).get()))

# The compiler's words about the marker itself: its name in the log is the
# application's own.
warned = cl.Program(ctx, """#pragma clang diagnostic warning "-Wmissing-variable-declarations"
__kernel void neg(__global float *y) { y[get_global_id(0)] = -y[get_global_id(0)]; }
""").build()
show("warned", warned)
warned.neg(queue, (n,), None, y.data)
print("warned: result %.4f" % float(cla.sum(y).get()))

# PyOpenCL's generated programs (cla.sum above is one too).
axpy = ElementwiseKernel(ctx, "float a, float *x, float *y", "y[i] = a * x[i] + y[i]", "axpy")
axpy(np.float32(0.5), x, y)
print("generated: elementwise %.4f, max %.4f, dot %.4f"
      % (float(cla.sum(y).get()), float(cla.max(y).get()), float(cla.dot(x, y).get())))
