/* test_program_fake — the program layer against a fake driver (a small
 * ICD-like table of functions) with fault injection, as SQLite tests its
 * pager: the n-th driver call fails, for every n the scenario makes. Then
 * every app-facing call answers success or exactly the driver's error, and
 * every driver object the program layer made is released (no leak, no
 * double release: the fake counts them). Releases never fail here: a
 * reference a driver refuses to drop cannot be given back by anyone.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache/memtier.h"
#include "common/config.h"
#include "program/program.h"

#define INJECTED (-9999) /* no OpenCL error: only the fake returns it */

static long calls, fail_at = -1, injected;
static long binary_reads; /* CL_PROGRAM_BINARIES answered with the bytes */
/* The next `short_left` calls of the fake function named `short_fn` fail
 * with `short_err` (a driver out of resources). */
static const char *short_fn;
static int short_left;
static cl_int short_err;
static long short_calls; /* calls of short_fn, failed or not */

/* The error this driver call fails with (INJECTED for the n-th call, or a
 * shortage), else 0. */
static cl_int fault_at_call(const char *fn)
{
    if (getenv("FAKE_TRACE")) fprintf(stderr, "call %ld %s%s\n", calls, fn, calls == fail_at ? " FAILS" : "");
    if (short_fn && !strcmp(fn, short_fn)) {
        short_calls++;
        if (short_left > 0) {
            short_left--;
            calls++;
            return short_err;
        }
    }
    if (calls++ != fail_at) return 0;
    injected++;
    return INJECTED;
}
#define fault() fault_at_call(__func__)
#define FAULT_RETURN()                                                                                              \
    do {                                                                                                            \
        cl_int fault_ = fault();                                                                                    \
        if (fault_) return fault_;                                                                                  \
    } while (0)
#define FAULT_RETURN_NULL(err)                                                                                      \
    do {                                                                                                            \
        cl_int fault_ = fault();                                                                                    \
        if (fault_) return *(err) = fault_, NULL;                                                                   \
    } while (0)

struct fprog {
    int refs, built, nkernels;
    cl_build_status status;
    char *src;
    char options[256];
};
struct fkern {
    struct fprog *p;
    int refs;
};
static long live_programs, live_kernels;

static cl_platform_id const PLAT = (cl_platform_id)0x2000;
static cl_device_id const DEV = (cl_device_id)0x1000;
static cl_context const CTX = (cl_context)0x3000;

static cl_int answer(const void *data, size_t n, size_t size, void *value, size_t *size_ret)
{
    if (value && size < n) return CL_INVALID_VALUE;
    if (value) memcpy(value, data, n);
    if (size_ret) *size_ret = n;
    return CL_SUCCESS;
}
static cl_int answer_text(const char *s, size_t size, void *value, size_t *size_ret)
{
    return answer(s, strlen(s) + 1, size, value, size_ret);
}

static cl_int f_platform_info(cl_platform_id p, cl_platform_info param, size_t size, void *value, size_t *ret)
{
    FAULT_RETURN();
    if (p != PLAT) return CL_INVALID_PLATFORM;
    return answer_text(param == CL_PLATFORM_NAME ? "Fake Platform" : "OpenCL 3.0 fake", size, value, ret);
}

static cl_int f_device_info(cl_device_id d, cl_device_info param, size_t size, void *value, size_t *ret)
{
    FAULT_RETURN();
    if (d != DEV) return CL_INVALID_DEVICE;
    cl_uint u = 64;
    cl_device_type type = CL_DEVICE_TYPE_CPU;
    switch (param) {
    case CL_DEVICE_PLATFORM: return answer(&PLAT, sizeof PLAT, size, value, ret);
    case CL_DEVICE_VENDOR_ID:
    case CL_DEVICE_ADDRESS_BITS: return answer(&u, sizeof u, size, value, ret);
    case CL_DEVICE_TYPE: return answer(&type, sizeof type, size, value, ret);
    case CL_DEVICE_NAME: return answer_text("fake device", size, value, ret);
    case CL_DEVICE_EXTENSIONS:
    case CL_DEVICE_IL_VERSION: return answer_text("", size, value, ret);
    default: return answer_text("1.0", size, value, ret);
    }
}

static cl_int f_context_info(cl_context c, cl_context_info param, size_t size, void *value, size_t *ret)
{
    FAULT_RETURN();
    if (c != CTX || param != CL_CONTEXT_DEVICES) return CL_INVALID_VALUE;
    return answer(&DEV, sizeof DEV, size, value, ret);
}

static struct fprog *new_program(const char *src, size_t len)
{
    struct fprog *p = calloc(1, sizeof *p);
    p->src = strndup(src, len);
    p->refs = 1;
    p->status = CL_BUILD_NONE;
    live_programs++;
    return p;
}

static cl_program f_create_source(cl_context c, cl_uint n, const char **strings, const size_t *lengths,
                                  cl_int *err)
{
    FAULT_RETURN_NULL(err);
    if (c != CTX || n != 1) return *err = CL_INVALID_VALUE, NULL;
    *err = CL_SUCCESS;
    return (cl_program)new_program(strings[0], lengths && lengths[0] ? lengths[0] : strlen(strings[0]));
}

static const char BIN_MAGIC[] = "FAKEBIN:";

static cl_program f_create_binary(cl_context c, cl_uint n, const cl_device_id *devs, const size_t *sizes,
                                  const unsigned char **bins, cl_int *status, cl_int *err)
{
    FAULT_RETURN_NULL(err);
    if (c != CTX || n != 1 || devs[0] != DEV) return *err = CL_INVALID_VALUE, NULL;
    if (sizes[0] < 8 || memcmp(bins[0], BIN_MAGIC, 8)) {
        if (status) status[0] = CL_INVALID_BINARY;
        return *err = CL_INVALID_BINARY, NULL;
    }
    if (status) status[0] = CL_SUCCESS;
    *err = CL_SUCCESS;
    return (cl_program)new_program((const char *)bins[0] + 8, sizes[0] - 8);
}

static cl_int f_build(cl_program prog, cl_uint n, const cl_device_id *devs, const char *options,
                      void(CL_CALLBACK *notify)(cl_program, void *), void *user)
{
    (void)n, (void)devs, (void)notify, (void)user;
    FAULT_RETURN();
    struct fprog *p = (struct fprog *)prog;
    if (p->nkernels) return CL_INVALID_OPERATION;
    snprintf(p->options, sizeof p->options, "%s", options ? options : "");
    if (strstr(p->src, "syntax error")) {
        p->status = CL_BUILD_ERROR;
        p->built = 0;
        return CL_BUILD_PROGRAM_FAILURE;
    }
    p->status = CL_BUILD_SUCCESS;
    p->built = 1;
    return CL_SUCCESS;
}

static cl_int f_program_info(cl_program prog, cl_program_info param, size_t size, void *value, size_t *ret)
{
    FAULT_RETURN();
    struct fprog *p = (struct fprog *)prog;
    cl_uint one = 1, refs = (cl_uint)p->refs;
    size_t bin_size = p->built ? 8 + strlen(p->src) : 0;
    switch (param) {
    case CL_PROGRAM_NUM_DEVICES: return answer(&one, sizeof one, size, value, ret);
    case CL_PROGRAM_DEVICES: return answer(&DEV, sizeof DEV, size, value, ret);
    case CL_PROGRAM_REFERENCE_COUNT: return answer(&refs, sizeof refs, size, value, ret);
    case CL_PROGRAM_BINARY_SIZES: return answer(&bin_size, sizeof bin_size, size, value, ret);
    case CL_PROGRAM_KERNEL_NAMES: return p->built ? answer_text("k", size, value, ret) : CL_INVALID_PROGRAM_EXECUTABLE;
    case CL_PROGRAM_BINARIES:
        if (value && size < sizeof(unsigned char *)) return CL_INVALID_VALUE;
        if (value && ((unsigned char **)value)[0] && bin_size) {
            binary_reads++;
            memcpy(((unsigned char **)value)[0], BIN_MAGIC, 8);
            memcpy(((unsigned char **)value)[0] + 8, p->src, bin_size - 8);
        }
        if (ret) *ret = sizeof(unsigned char *);
        return CL_SUCCESS;
    default: return CL_INVALID_VALUE;
    }
}

static cl_int f_build_info(cl_program prog, cl_device_id d, cl_program_build_info param, size_t size, void *value,
                           size_t *ret)
{
    FAULT_RETURN();
    struct fprog *p = (struct fprog *)prog;
    if (d != DEV) return CL_INVALID_DEVICE;
    switch (param) {
    case CL_PROGRAM_BUILD_STATUS: return answer(&p->status, sizeof p->status, size, value, ret);
    case CL_PROGRAM_BUILD_LOG: return answer_text(p->status == CL_BUILD_ERROR ? "error: syntax" : "", size, value, ret);
    case CL_PROGRAM_BUILD_OPTIONS: return answer_text(p->options, size, value, ret);
    default: return CL_INVALID_VALUE;
    }
}

static cl_int f_retain_program(cl_program prog)
{
    FAULT_RETURN();
    ((struct fprog *)prog)->refs++;
    return CL_SUCCESS;
}

static cl_int f_release_program(cl_program prog)
{
    struct fprog *p = (struct fprog *)prog;
    if (p->refs <= 0) print_message("release of a released program (fault at call %ld)\n", fail_at);
    assert_true(p->refs > 0);
    if (--p->refs == 0) {
        free(p->src);
        free(p);
        live_programs--;
    }
    return CL_SUCCESS;
}

static cl_kernel f_create_kernel(cl_program prog, const char *name, cl_int *err)
{
    FAULT_RETURN_NULL(err);
    struct fprog *p = (struct fprog *)prog;
    if (!p->built) return *err = CL_INVALID_PROGRAM_EXECUTABLE, NULL;
    if (strcmp(name, "k")) return *err = CL_INVALID_KERNEL_NAME, NULL;
    struct fkern *k = calloc(1, sizeof *k);
    k->p = p;
    k->refs = 1;
    p->refs++;
    p->nkernels++;
    live_kernels++;
    *err = CL_SUCCESS;
    return (cl_kernel)k;
}

static cl_int f_retain_kernel(cl_kernel kernel)
{
    FAULT_RETURN();
    ((struct fkern *)kernel)->refs++;
    return CL_SUCCESS;
}

static cl_int f_release_kernel(cl_kernel kernel)
{
    struct fkern *k = (struct fkern *)kernel;
    if (--k->refs == 0) {
        k->p->nkernels--;
        live_kernels--;
        f_release_program((cl_program)k->p); /* the kernel's reference on its program */
        free(k);
    }
    return CL_SUCCESS;
}

static cl_int f_kernel_info(cl_kernel kernel, cl_kernel_info param, size_t size, void *value, size_t *ret)
{
    FAULT_RETURN();
    struct fkern *k = (struct fkern *)kernel;
    if (param == CL_KERNEL_PROGRAM) return answer(&k->p, sizeof k->p, size, value, ret);
    if (param == CL_KERNEL_FUNCTION_NAME) return answer_text("k", size, value, ret);
    return CL_INVALID_VALUE;
}

static struct cl_api fake = {
    .clGetPlatformInfo = f_platform_info,
    .clGetDeviceInfo = f_device_info,
    .clGetContextInfo = f_context_info,
    .clCreateProgramWithSource = f_create_source,
    .clCreateProgramWithBinary = f_create_binary,
    .clBuildProgram = f_build,
    .clGetProgramInfo = f_program_info,
    .clGetProgramBuildInfo = f_build_info,
    .clRetainProgram = f_retain_program,
    .clReleaseProgram = f_release_program,
    .clCreateKernel = f_create_kernel,
    .clRetainKernel = f_retain_kernel,
    .clReleaseKernel = f_release_kernel,
    .clGetKernelInfo = f_kernel_info,
};

/* An app-facing result: success, or exactly what the driver said. */
#define APP_OK(rc, allowed) assert_true((rc) == CL_SUCCESS || (rc) == INJECTED || (rc) == (allowed))

/* Two programs of one source (a miss, then a memory hit), a kernel of each,
 * a refused rebuild, the queries, the releases; then one failing build. */
static void scenario(int iteration)
{
    char src[128];
    snprintf(src, sizeof src, "__kernel void k(void) {} // %d", iteration);
    const char *s = src;
    cl_program p[2] = {NULL, NULL};
    cl_kernel k[2] = {NULL, NULL};
    cl_int err;
    for (int i = 0; i < 2; i++) {
        p[i] = pc_create_with_source(CTX, 1, &s, NULL, &err);
        APP_OK(err, CL_SUCCESS);
        if (!p[i]) continue;
        cl_int rc = pc_build(p[i], 1, &DEV, "-DX=1", 0, NULL, NULL);
        APP_OK(rc, CL_SUCCESS);
        k[i] = pc_create_kernel(p[i], "k", &err);
        /* after a failed build the driver's answer for an unbuilt program */
        APP_OK(err, CL_INVALID_PROGRAM_EXECUTABLE);
        if (k[i]) {
            rc = pc_build(p[i], 1, &DEV, "-DX=2", 0, NULL, NULL);
            assert_true(rc == CL_INVALID_OPERATION);
        }
        cl_uint refs = 0;
        rc = pc_get_program_info(p[i], CL_PROGRAM_REFERENCE_COUNT, sizeof refs, &refs, NULL);
        APP_OK(rc, CL_SUCCESS);
        if (rc == CL_SUCCESS) assert_int_equal(refs, k[i] ? 2 : 1);
        char opts[64];
        rc = pc_get_build_info(p[i], DEV, CL_PROGRAM_BUILD_OPTIONS, sizeof opts, opts, NULL);
        APP_OK(rc, CL_SUCCESS);
    }
    for (int i = 0; i < 2; i++) {
        if (k[i]) assert_int_equal(pc_release_kernel(k[i]), CL_SUCCESS);
        if (p[i]) assert_int_equal(pc_release_program(p[i]), CL_SUCCESS);
    }
    const char *bad = "syntax error";
    cl_program b = pc_create_with_source(CTX, 1, &bad, NULL, &err);
    APP_OK(err, CL_SUCCESS);
    if (b) {
        cl_int rc = pc_build(b, 1, &DEV, "", 0, NULL, NULL);
        assert_true(rc == CL_BUILD_PROGRAM_FAILURE || rc == INJECTED);
        assert_int_equal(pc_release_program(b), CL_SUCCESS);
    }
}

static void init_once(void)
{
    static int done;
    if (done++) return;
    /* Deterministic driver-call order: captures on this thread. */
    setenv("CLSHIM_CAPTURE_BACKGROUND", "0", 1);
    pc_init(&fake);
}

static void every_driver_call_can_fail(void **state)
{
    (void)state;
    init_once();
    /* The number of driver calls the scenario makes without faults. */
    fail_at = -1;
    calls = 0;
    scenario(0);
    long total = calls;
    assert_true(total > 20);
    assert_int_equal(live_kernels, 0);
    assert_int_equal(live_programs, 0);
    for (long n = 0; n < total + 10; n++) {
        calls = 0;
        fail_at = n;
        scenario((int)n + 1);
        fail_at = -1;
        if (live_kernels || live_programs)
            print_message("fault at driver call %ld: %ld kernels, %ld programs left\n", n, live_kernels,
                          live_programs);
        assert_int_equal(live_kernels, 0);
        assert_int_equal(live_programs, 0);
    }
    assert_true(injected >= total / 2); /* the faults did hit */
}

/* Builds `src` (a miss: its binary goes to the in-memory tier); returns
 * the program, which the caller releases. */
static cl_program built(const char *src)
{
    cl_int err;
    cl_program p = pc_create_with_source(CTX, 1, &src, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(pc_build(p, 1, &DEV, "", 0, NULL, NULL), CL_SUCCESS);
    return p;
}

static void short_of(const char *fn, cl_int err, int times)
{
    short_fn = fn;
    short_err = err;
    short_left = times;
    short_calls = 0;
}

/* CLSHIM_CAPTURE for one test (the tests below count the in-memory tier's
 * bytes right after a build: `build`); the default is restored after. */
static const char *capture_policy(const char *policy)
{
    struct clshim_config *cfg = (struct clshim_config *)config_get();
    const char *was = cfg->capture;
    cfg->capture = policy;
    return was;
}

/* with the default CLSHIM_CAPTURE=auto a program built by a driver other
 * than PoCL is stored after its use too: its binary is never read inside
 * clBuildProgram (on NVIDIA that read made the first launch 100 us
 * slower), but at its release here (no synchronisation came), and the
 * in-memory tier then holds it */
static void other_drivers_store_after_use(void **state)
{
    (void)state;
    init_once();
    memtier_clear();
    uint64_t pinned_bytes, pinned, bytes, entries;
    memtier_usage(&pinned_bytes, &pinned);
    static const char src[] = "__kernel void k(void) {} // stored after use";
    const char *s = src;
    cl_int err;
    binary_reads = 0;
    cl_program p = pc_create_with_source(CTX, 1, &s, NULL, &err);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(pc_build(p, 1, &DEV, "", 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(binary_reads, 0);
    assert_int_equal(pc_release_program(p), CL_SUCCESS);
    assert_int_equal(binary_reads, 1);
    memtier_usage(&bytes, &entries);
    assert_int_equal(entries, pinned + 1);
    assert_int_equal(bytes, pinned_bytes + 8 + strlen(src));
    assert_int_equal(live_programs, 0);
}

/* a build or a program creation the driver refuses for want of resources
 * while the in-memory tier holds entries no build uses: the tier is emptied
 * and the call made once more, which succeeds */
static void out_of_resources_empties_tier_and_retries(void **state)
{
    (void)state;
    init_once();
    memtier_clear();
    static const char long_src[] = "__kernel void k(void) {} // a long source: its binary is the larger one";
    static const char short_src[] = "__kernel void k(void) {} // b";
    const char *policy = capture_policy("build");
    /* Pinned entries (builds in flight) are never dropped; what the other
     * tests left pinned is counted here. */
    uint64_t pinned_bytes, pinned, bytes, entries;
    memtier_usage(&pinned_bytes, &pinned);
    cl_program a = built(long_src);
    memtier_usage(&bytes, &entries);
    assert_int_equal(entries, pinned + 1);
    assert_int_equal(bytes, pinned_bytes + 8 + strlen(long_src)); /* the fake's binary: magic + source */

    short_of("f_build", CL_OUT_OF_RESOURCES, 1);
    cl_int err;
    const char *s = short_src;
    cl_program b = pc_create_with_source(CTX, 1, &s, NULL, &err);
    assert_int_equal(pc_build(b, 1, &DEV, "", 0, NULL, NULL), CL_SUCCESS);
    assert_int_equal(short_calls, 2); /* refused, then retried */
    memtier_usage(&bytes, &entries);
    assert_int_equal(entries, pinned + 1); /* a's entry went; b's came */
    assert_int_equal(bytes, pinned_bytes + 8 + strlen(short_src));

    short_of("f_create_source", CL_OUT_OF_HOST_MEMORY, 1);
    const char *c_src = "__kernel void k(void) {} // c";
    cl_program c = pc_create_with_source(CTX, 1, &c_src, NULL, &err);
    assert_non_null(c);
    assert_int_equal(err, CL_SUCCESS);
    assert_int_equal(short_calls, 2);
    memtier_usage(&bytes, &entries);
    assert_int_equal(entries, pinned);
    short_fn = NULL;
    assert_int_equal(pc_release_program(a), CL_SUCCESS);
    assert_int_equal(pc_release_program(b), CL_SUCCESS);
    assert_int_equal(pc_release_program(c), CL_SUCCESS);
    assert_int_equal(live_programs, 0);
    capture_policy(policy);
}

/* with nothing in the tier to drop, or when the retry fails too, the app
 * gets exactly the driver's error, after at most one retry */
static void out_of_resources_retried_at_most_once(void **state)
{
    (void)state;
    init_once();
    memtier_clear();
    cl_int err;
    const char *src = "__kernel void k(void) {} // d";
    short_of("f_create_source", CL_OUT_OF_RESOURCES, 1);
    assert_null(pc_create_with_source(CTX, 1, &src, NULL, &err));
    assert_int_equal(err, CL_OUT_OF_RESOURCES);
    assert_int_equal(short_calls, 1); /* nothing to drop: no retry */

    const char *policy = capture_policy("build");
    cl_program a = built("__kernel void k(void) {} // e");
    short_of("f_build", CL_OUT_OF_RESOURCES, 2);
    cl_program b = pc_create_with_source(CTX, 1, &src, NULL, &err);
    assert_int_equal(pc_build(b, 1, &DEV, "", 0, NULL, NULL), CL_OUT_OF_RESOURCES);
    assert_int_equal(short_calls, 2); /* one retry only */
    short_fn = NULL;
    assert_int_equal(pc_release_program(a), CL_SUCCESS);
    assert_int_equal(pc_release_program(b), CL_SUCCESS);
    assert_int_equal(live_programs, 0);
    capture_policy(policy);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_driver_call_can_fail),
        cmocka_unit_test(other_drivers_store_after_use),
        cmocka_unit_test(out_of_resources_empties_tier_and_retries),
        cmocka_unit_test(out_of_resources_retried_at_most_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
