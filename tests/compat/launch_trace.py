"""launch_trace.py -- records PyOpenCL's kernel launches (a pytest plugin).

make compat's "armed" mode (tests/compat/run.sh) builds a fusion plan naming
every kernel PyOpenCL's suite launches. PyOpenCL generates its kernels (and
their names) at run time, so the names come from a first run of the suite
with this plugin loaded (`-p launch_trace`, this directory on PYTHONPATH):
every kernel launch appends "QUEUE KERNEL_NAME" to the file named by
COMPAT_LAUNCH_TRACE, QUEUE being the queue's cl_command_queue handle in hex.
plan_from_trace.py turns the file into a plan. Outside pytest (make
check's quick part):  python3 launch_trace.py SCRIPT [ARGS...]  runs the
PyOpenCL program SCRIPT with the same recording.

Every launch of the suite goes through pyopencl._cl.enqueue_nd_range_kernel
(Kernel.__call__ and the generated invokers look it up there at call time;
pyopencl.enqueue_nd_range_kernel is the same function, re-exported), so
wrapping that one function sees them all. The wrapper forwards its arguments
unchanged; the only extra OpenCL calls are the handle and name queries.
"""
import os

_trace = None


def _wrap(real):
    def enqueue_nd_range_kernel(queue, kernel, *args, **kwargs):
        try:
            _trace.write("%x %s\n" % (queue.int_ptr, kernel.function_name))
        except Exception:  # noqa: BLE001 -- never change what the test sees
            pass
        return real(queue, kernel, *args, **kwargs)
    enqueue_nd_range_kernel.__wrapped__ = real
    return enqueue_nd_range_kernel


def install(path):
    """Starts recording into `path` (once per process)."""
    global _trace
    if _trace is not None:
        return
    import pyopencl
    import pyopencl._cl as _cl
    _trace = open(path, "w", buffering=1 << 20)
    wrapped = _wrap(_cl.enqueue_nd_range_kernel)
    _cl.enqueue_nd_range_kernel = wrapped
    pyopencl.enqueue_nd_range_kernel = wrapped


def pytest_configure(config):
    path = os.environ.get("COMPAT_LAUNCH_TRACE")
    if path:
        install(path)


def pytest_unconfigure(config):
    if _trace is not None:
        _trace.flush()


if __name__ == "__main__":
    import runpy
    import sys
    install(os.environ["COMPAT_LAUNCH_TRACE"])
    sys.argv = sys.argv[1:]
    try:
        runpy.run_path(sys.argv[0], run_name="__main__")
    finally:
        _trace.flush()
