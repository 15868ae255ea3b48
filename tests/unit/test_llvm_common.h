/* test_llvm_common.h — helpers shared by the test_llvm_* cmocka tests:
 * pointing CLSHIM_LLVM_LIB at the build's module, a PoCL context, building
 * programs from source or SPIR bitcode, launching kernels described as
 * argument lists, and running tools with posix_spawnp. Included by each
 * test file once (static functions). */
#ifndef CLSHIM_TEST_LLVM_COMMON_H
#define CLSHIM_TEST_LLVM_COMMON_H

#define CL_TARGET_OPENCL_VERSION 300
#include <CL/cl.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <setjmp.h>
#include <cmocka.h>

#include "common/error.h"
#include "compiler/llvm_api.h"
#include "compiler/llvmload.h"

extern char **environ;

/* Must run before anything reads the configuration. */
static __attribute__((unused)) void tl_point_at_module(void)
{
    const char *build = getenv("CLSHIM_BUILD");
    char path[4096];
    snprintf(path, sizeof path, "%s/libclshim-llvm.so", build ? build : "build");
    setenv("CLSHIM_LLVM_LIB", path, 1);
}

static cl_device_id tl_dev;
static cl_context tl_ctx;
static cl_command_queue tl_queue;

static __attribute__((unused)) void tl_cl_init(void)
{
    cl_platform_id plat;
    cl_int e = clGetPlatformIDs(1, &plat, NULL);
    assert_int_equal(e, CL_SUCCESS);
    assert_int_equal(clGetDeviceIDs(plat, CL_DEVICE_TYPE_ALL, 1, &tl_dev, NULL), CL_SUCCESS);
    tl_ctx = clCreateContext(NULL, 1, &tl_dev, NULL, NULL, &e);
    assert_int_equal(e, CL_SUCCESS);
    tl_queue = clCreateCommandQueueWithProperties(tl_ctx, tl_dev, NULL, &e);
    assert_int_equal(e, CL_SUCCESS);
}

static __attribute__((unused)) void tl_print_log(cl_program p)
{
    char log[16384] = "";
    clGetProgramBuildInfo(p, tl_dev, CL_PROGRAM_BUILD_LOG, sizeof log, log, NULL);
    if (log[0]) fprintf(stderr, "build log: %s\n", log);
}

static __attribute__((unused)) cl_program tl_build_source(const char *src, const char *opts)
{
    cl_int e;
    cl_program p = clCreateProgramWithSource(tl_ctx, 1, &src, NULL, &e);
    assert_int_equal(e, CL_SUCCESS);
    e = clBuildProgram(p, 1, &tl_dev, opts ? opts : "", NULL, NULL);
    if (e != CL_SUCCESS) tl_print_log(p);
    assert_int_equal(e, CL_SUCCESS);
    return p;
}

static __attribute__((unused)) cl_program tl_build_binary(const void *bc, size_t size)
{
    cl_int e, st;
    const unsigned char *b = bc;
    cl_program p = clCreateProgramWithBinary(tl_ctx, 1, &tl_dev, &size, &b, &st, &e);
    assert_int_equal(e, CL_SUCCESS);
    e = clBuildProgram(p, 1, &tl_dev, "", NULL, NULL);
    if (e != CL_SUCCESS) tl_print_log(p);
    assert_int_equal(e, CL_SUCCESS);
    return p;
}

/* One kernel argument: a buffer (by index into a buffer set), scalar bytes,
 * or __local memory of `size` bytes. */
enum { TA_BUF, TA_SCALAR, TA_LOCAL };
struct targ {
    int kind;
    int buf;
    size_t size;
    const void *bytes;
};

#define TL_MAX_BUFS 8
struct tbufs {
    int count;
    size_t size[TL_MAX_BUFS];
    cl_mem mem[TL_MAX_BUFS];
};

/* Creates `count` buffers of `size` bytes filled from init[i] (or a pattern). */
static __attribute__((unused)) void tl_bufs_create(struct tbufs *b, int count, const size_t *size, void *const *init)
{
    b->count = count;
    for (int i = 0; i < count; i++) {
        cl_int e;
        b->size[i] = size[i];
        b->mem[i] = clCreateBuffer(tl_ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, size[i],
                                   init[i], &e);
        assert_int_equal(e, CL_SUCCESS);
    }
}

static __attribute__((unused)) void tl_bufs_release(struct tbufs *b)
{
    for (int i = 0; i < b->count; i++) clReleaseMemObject(b->mem[i]);
}

static __attribute__((unused)) void tl_set_arg(cl_kernel k, cl_uint index, const struct targ *a, const struct tbufs *b)
{
    cl_int e;
    if (a->kind == TA_BUF) e = clSetKernelArg(k, index, sizeof(cl_mem), &b->mem[a->buf]);
    else if (a->kind == TA_SCALAR) e = clSetKernelArg(k, index, a->size, a->bytes);
    else e = clSetKernelArg(k, index, a->size, NULL);
    assert_int_equal(e, CL_SUCCESS);
}

static __attribute__((unused)) void tl_launch(cl_kernel k, cl_uint dim, const size_t *off, const size_t *gs,
                      const size_t *ls)
{
    int any_ls = 0;
    for (cl_uint d = 0; d < dim; d++)
        if (ls && ls[d]) any_ls = 1;
    cl_int e = clEnqueueNDRangeKernel(tl_queue, k, dim, off, gs, any_ls ? ls : NULL, 0, NULL, NULL);
    assert_int_equal(e, CL_SUCCESS);
}

static __attribute__((unused)) void tl_run(cl_program p, const char *name, const struct targ *args, cl_uint nargs,
                   const struct tbufs *b, cl_uint dim, const size_t *off, const size_t *gs,
                   const size_t *ls)
{
    cl_int e;
    cl_kernel k = clCreateKernel(p, name, &e);
    assert_int_equal(e, CL_SUCCESS);
    for (cl_uint i = 0; i < nargs; i++) tl_set_arg(k, i, &args[i], b);
    tl_launch(k, dim, off, gs, ls);
    assert_int_equal(clFinish(tl_queue), CL_SUCCESS);
    clReleaseKernel(k);
}

static __attribute__((unused)) void *tl_read(const struct tbufs *b, int i)
{
    void *host = malloc(b->size[i]);
    assert_non_null(host);
    assert_int_equal(clEnqueueReadBuffer(tl_queue, b->mem[i], CL_TRUE, 0, b->size[i], host, 0,
                                         NULL, NULL),
                     CL_SUCCESS);
    return host;
}

/* Asserts that two buffer sets hold the same bytes. */
static __attribute__((unused)) void tl_assert_same(const struct tbufs *a, const struct tbufs *b)
{
    assert_int_equal(a->count, b->count);
    for (int i = 0; i < a->count; i++) {
        unsigned char *x = tl_read(a, i), *y = tl_read(b, i);
        if (memcmp(x, y, a->size[i]) != 0) {
            size_t at = 0;
            while (x[at] == y[at]) at++;
            fprintf(stderr, "buffer %d differs at byte %zu\n", i, at);
        }
        assert_memory_equal(x, y, a->size[i]);
        free(x);
        free(y);
    }
}

/* Runs argv (no shell); returns the exit status, -1 if it cannot run. */
static __attribute__((unused)) int tl_spawn(char *const argv[])
{
    pid_t pid;
    if (posix_spawnp(&pid, argv[0], NULL, NULL, argv, environ) != 0) return -1;
    int st;
    if (waitpid(pid, &st, 0) < 0) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static __attribute__((unused)) void *tl_read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    rewind(f);
    void *p = malloc((size_t)n + 1);
    assert_non_null(p);
    assert_int_equal(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *size = (size_t)n;
    return p;
}

static __attribute__((unused)) void tl_write_file(const char *path, const void *data, size_t size)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(data, 1, size, f), size);
    fclose(f);
}

/* A private scratch directory (TEST_TMP from run-all.sh, else $TMPDIR). */
static __attribute__((unused)) const char *tl_tmpdir(void)
{
    static char dir[4096];
    if (!dir[0]) {
        const char *base = getenv("TEST_TMP");
        if (!base) base = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/clshim-llvm-XXXXXX", base ? base : "/tmp");
        assert_non_null(mkdtemp(dir));
    }
    return dir;
}

#endif
