/* clfault.c — a fault-injecting OpenCL "driver" layer for the driver-fault
 * tests. Preloaded after libclshim.so (LD_PRELOAD="libclshim.so
 * libclfault.so"), it is what the shim's RTLD_NEXT lookups find, so to the
 * shim the driver itself misbehaves; preloaded alone it gives the plain run
 * the same faults, to compare with. Built by test_driver_faults.sh.
 *   CLFAULT_REJECT_BINARY=1  clCreateProgramWithBinary fails: CL_INVALID_BINARY
 *   CLFAULT_BINARIES=1       clGetProgramInfo(CL_PROGRAM_BINARY_SIZES /
 *                            CL_PROGRAM_BINARIES) fails: CL_OUT_OF_HOST_MEMORY
 *   CLFAULT_BUILD=1          clBuildProgram fails: CL_OUT_OF_RESOURCES
 *   CLFAULT_SLOW_BINARIES_MS=N  clGetProgramInfo(CL_PROGRAM_BINARIES) takes
 *                            N ms more (a large program's code generation,
 *                            made deterministic)
 *   CLFAULT_SLOW_LOAD_MS=N   clCreateProgramWithBinary burns N ms of CPU
 *                            time first (a binary that loads slower than
 *                            it compiles) */
#define _GNU_SOURCE
#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

static int on(const char *name)
{
    const char *v = getenv(name);
    return v && *v == '1';
}

#define NEXT(name) ((__typeof__(name) *)dlsym(RTLD_NEXT, #name))

CL_API_ENTRY cl_program CL_API_CALL clCreateProgramWithBinary(cl_context ctx, cl_uint n, const cl_device_id *devs,
                                                              const size_t *lengths, const unsigned char **bins,
                                                              cl_int *status, cl_int *err)
{
    if (on("CLFAULT_REJECT_BINARY")) {
        if (status)
            for (cl_uint i = 0; i < n; i++) status[i] = CL_INVALID_BINARY;
        if (err) *err = CL_INVALID_BINARY;
        return NULL;
    }
    const char *slow = getenv("CLFAULT_SLOW_LOAD_MS");
    if (slow) {
        struct timespec t0, t;
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t0);
        do clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < atol(slow));
    }
    return NEXT(clCreateProgramWithBinary)(ctx, n, devs, lengths, bins, status, err);
}

CL_API_ENTRY cl_int CL_API_CALL clGetProgramInfo(cl_program p, cl_program_info param, size_t size, void *value,
                                                 size_t *size_ret)
{
    if (on("CLFAULT_BINARIES") && (param == CL_PROGRAM_BINARY_SIZES || param == CL_PROGRAM_BINARIES))
        return CL_OUT_OF_HOST_MEMORY;
    const char *slow = getenv("CLFAULT_SLOW_BINARIES_MS");
    if (slow && param == CL_PROGRAM_BINARIES && value) {
        long ms = atol(slow);
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0) {
        }
    }
    return NEXT(clGetProgramInfo)(p, param, size, value, size_ret);
}

CL_API_ENTRY cl_int CL_API_CALL clBuildProgram(cl_program p, cl_uint n, const cl_device_id *devs, const char *opts,
                                               void(CL_CALLBACK *notify)(cl_program, void *), void *data)
{
    if (on("CLFAULT_BUILD")) return CL_OUT_OF_RESOURCES;
    return NEXT(clBuildProgram)(p, n, devs, opts, notify, data);
}
