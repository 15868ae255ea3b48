"""Runs bench/pyopencl_arrays.py (or another script, argv[1]) with PyOpenCL
told that the device has CUS (env) compute units, so that its elementwise
kernels take the ND-range they take on a GPU of that many: the fused
sources automatic fusion generates here (PoCL, with the analysis) are then
the ones that GPU's run looks up (bench/gpu-pack.sh primes them; the GPU
machine has no clang for the analysis). Only PyOpenCL's view changes: the
kernels run on this device as before."""
import os
import runpy
import sys

import pyopencl as cl

cus = int(os.environ["CUS"])
cl.Device.max_compute_units = property(lambda self: cus)
script = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                            "pyopencl_arrays.py")
sys.argv = [script] + sys.argv[2:]
runpy.run_path(script, run_name="__main__")
