/* builtin_probe.c — NVIDIA's own compile of a kernel file against route
 * (a)'s PTX of the same file, kernel by kernel, bit for bit
 * (tests/compat/nvidia_builtins.sh; the kernels: tests/compat/data/builtins.cl).
 *
 *   builtin_probe --source FILE.cl --ptx FILE.ptx [--options OPTS] [--n N]
 *                 [--dump-ptx OUT] [--only NAME]
 *   builtin_probe --source FILE.cl --dump-ptx OUT [--options OPTS]
 *
 * Every kernel has the signature (uint *o, const uint *a, const uint *b,
 * const uint *c): values travel as bits. The inputs: every triple of 26
 * special values (zeros, denormals, FLT_MIN/MAX, infinities, NaN, values
 * where exp overflows, large trigonometric arguments ...), then N random
 * words, half uniform bit patterns (every exponent) and half uniform floats
 * in [-100, 100]. The source is built by the driver with OPTS, the PTX is
 * loaded with clCreateProgramWithBinary; both run over the same inputs. One
 * line per kernel:
 *   | kernel | inputs | differing | both NaN, other bits | max ulp | first difference |
 * f_* kernels compare as floats (ulp: distance in the ordered bit space),
 * i_* and w_* as integers. w_* kernels run with a global offset of 1024 and
 * a local size of 64. --dump-ptx writes the driver's program binary (PTX on
 * NVIDIA); without --ptx that is all it does. Exit 0 when everything ran (differences are results, not
 * failures), 2 on an OpenCL error.
 */
#include "common.h"

#include <math.h>

#define NSPECIAL 26

static const uint32_t specials[NSPECIAL] = {
    0x00000000u, 0x80000000u, 0x00000001u, 0x007fffffu, 0x80000001u, 0x00800000u, 0x80800000u,
    0x3f800000u, 0xbf800000u, 0x3f000000u, 0x40000000u, 0x40490fdbu, 0xc0490fdbu, 0x2edbe6ffu,
    0x501502f9u, 0x42b17218u, 0xc2aeac50u, 0xc2ce0000u, 0x7149f2cau, 0xf149f2cau, 0x477fe000u,
    0x7f7fffffu, 0xff7fffffu, 0x7f800000u, 0xff800000u, 0x7fc00000u,
};

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t next_word(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static uint32_t random_input(size_t i)
{
    if (i & 1) return next_word();
    float f = (float)((next_word() / 4294967296.0) * 200.0 - 100.0);
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static int is_nan(uint32_t u)
{
    return (u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu);
}

/* float bits -> an integer whose order is the floats' order */
static int64_t ordered(uint32_t u)
{
    return (u & 0x80000000u) ? -(int64_t)(u & 0x7fffffffu) : (int64_t)u;
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) {
        perror(path);
        exit(2);
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (!s || fread(s, 1, (size_t)n, f) != (size_t)n) exit(2);
    s[n] = 0;
    fclose(f);
    *len = (size_t)n;
    return s;
}

static cl_program build(cl_context ctx, cl_device_id dev, cl_program prog, const char *options, const char *what)
{
    cl_int rc = clBuildProgram(prog, 1, &dev, options, NULL, NULL);
    if (rc != CL_SUCCESS) {
        char *log = build_log(prog, dev);
        fprintf(stderr, "builtin_probe: building %s failed (%d): %.2000s\n", what, rc, log);
        free(log);
        exit(2);
    }
    (void)ctx;
    return prog;
}

int main(int argc, char **argv)
{
    const char *src_path = NULL, *ptx_path = NULL, *options = "", *dump = NULL, *only = NULL;
    size_t n_random = (size_t)1 << 20;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--source") && i + 1 < argc) src_path = argv[++i];
        else if (!strcmp(argv[i], "--ptx") && i + 1 < argc) ptx_path = argv[++i];
        else if (!strcmp(argv[i], "--options") && i + 1 < argc) options = argv[++i];
        else if (!strcmp(argv[i], "--n") && i + 1 < argc) n_random = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--dump-ptx") && i + 1 < argc) dump = argv[++i];
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            fprintf(stderr, "usage: builtin_probe --source FILE.cl --ptx FILE.ptx [--options OPTS] [--n N] "
                            "[--dump-ptx OUT] [--only NAME]\n");
            return 2;
        }
    }
    if (!src_path || (!ptx_path && !dump)) return 2;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    first_context_queue(&dev, &ctx, &q);
    cl_int err;
    size_t src_len, ptx_len;
    char *src = read_text(src_path, &src_len);
    const char *srcs[1] = {src};
    cl_program vendor = clCreateProgramWithSource(ctx, 1, srcs, &src_len, &err);
    CHECK(err);
    build(ctx, dev, vendor, options, "the source");
    if (dump) {
        size_t size = 0;
        CHECK(clGetProgramInfo(vendor, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL));
        unsigned char *bin = malloc(size + 1);
        unsigned char *binp[1] = {bin};
        CHECK(clGetProgramInfo(vendor, CL_PROGRAM_BINARIES, sizeof binp, binp, NULL));
        FILE *f = fopen(dump, "wb");
        if (f) {
            fwrite(bin, 1, size && bin[size - 1] == 0 ? size - 1 : size, f);
            fclose(f);
        }
        free(bin);
    }
    if (!ptx_path) return 0; /* --dump-ptx alone: NVIDIA's PTX of the source, nothing run */
    char *ptx = read_text(ptx_path, &ptx_len);
    const unsigned char *bins[1] = {(const unsigned char *)ptx};
    size_t ptx_size = ptx_len + 1;
    cl_int bin_status;
    cl_program route_a = clCreateProgramWithBinary(ctx, 1, &dev, &ptx_size, bins, &bin_status, &err);
    CHECK(err);
    build(ctx, dev, route_a, "", "route (a)'s PTX");

    size_t n = (size_t)NSPECIAL * NSPECIAL * NSPECIAL + n_random;
    uint32_t *in[3], *out[2];
    for (int k = 0; k < 3; k++) in[k] = malloc(n * 4);
    out[0] = malloc(n * 4);
    out[1] = malloc(n * 4);
    for (size_t i = 0; i < NSPECIAL * NSPECIAL * NSPECIAL; i++) {
        in[0][i] = specials[i % NSPECIAL];
        in[1][i] = specials[(i / NSPECIAL) % NSPECIAL];
        in[2][i] = specials[i / (NSPECIAL * NSPECIAL)];
    }
    for (int k = 0; k < 3; k++)
        for (size_t i = NSPECIAL * NSPECIAL * NSPECIAL; i < n; i++) in[k][i] = random_input(i);
    cl_mem buf_in[3], buf_out = clCreateBuffer(ctx, CL_MEM_READ_WRITE, n * 4, NULL, &err);
    CHECK(err);
    for (int k = 0; k < 3; k++) {
        buf_in[k] = clCreateBuffer(ctx, CL_MEM_READ_ONLY | CL_MEM_COPY_HOST_PTR, n * 4, in[k], &err);
        CHECK(err);
    }

    cl_uint nk = 0;
    CHECK(clCreateKernelsInProgram(vendor, 0, NULL, &nk));
    cl_kernel *ks = calloc(nk, sizeof *ks);
    CHECK(clCreateKernelsInProgram(vendor, nk, ks, NULL));
    char (*names)[64] = calloc(nk, sizeof *names);
    for (cl_uint k = 0; k < nk; k++) CHECK(clGetKernelInfo(ks[k], CL_KERNEL_FUNCTION_NAME, 64, names[k], NULL));
    /* a stable order: by name */
    for (cl_uint a = 0; a < nk; a++)
        for (cl_uint b = a + 1; b < nk; b++)
            if (strcmp(names[a], names[b]) > 0) {
                char t[64];
                memcpy(t, names[a], 64);
                memcpy(names[a], names[b], 64);
                memcpy(names[b], t, 64);
            }
    printf("| kernel | inputs | differing | both NaN, other bits | max ulp | first difference (a, b, c: vendor / route (a)) |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    for (cl_uint k = 0; k < nk; k++) {
        if (only && strcmp(only, names[k])) continue;
        int workitem = names[k][0] == 'w', as_float_out = names[k][0] == 'f';
        size_t offset = workitem ? 1024 : 0, local = 64, global = workitem ? n - n % 64 : n;
        for (int side = 0; side < 2; side++) {
            cl_kernel kern = clCreateKernel(side ? route_a : vendor, names[k], &err);
            CHECK(err);
            CHECK(clSetKernelArg(kern, 0, sizeof buf_out, &buf_out));
            for (int a = 0; a < 3; a++) CHECK(clSetKernelArg(kern, (cl_uint)a + 1, sizeof buf_in[a], &buf_in[a]));
            cl_uint fill = 0xdeadbeefu;
            CHECK(clEnqueueFillBuffer(q, buf_out, &fill, 4, 0, n * 4, 0, NULL, NULL));
            CHECK(clEnqueueNDRangeKernel(q, kern, 1, workitem ? &offset : NULL, &global,
                                         workitem ? &local : NULL, 0, NULL, NULL));
            CHECK(clEnqueueReadBuffer(q, buf_out, CL_TRUE, 0, n * 4, out[side], 0, NULL, NULL));
            clReleaseKernel(kern);
        }
        size_t differ = 0, nan_bits = 0, first = (size_t)-1;
        int64_t max_ulp = 0;
        for (size_t i = 0; i < global; i++) {
            uint32_t v = out[0][i], r = out[1][i];
            if (v == r) continue;
            differ++;
            if (first == (size_t)-1) first = i;
            if (as_float_out && is_nan(v) && is_nan(r)) {
                nan_bits++;
                continue;
            }
            int64_t d = as_float_out ? ordered(v) - ordered(r) : (int64_t)(int32_t)v - (int64_t)(int32_t)r;
            if (as_float_out && (is_nan(v) || is_nan(r))) d = INT64_MAX;
            if (d < 0) d = -d;
            if (d > max_ulp) max_ulp = d;
        }
        printf("| %s | %zu | %zu | %zu | ", names[k], global, differ, nan_bits);
        if (max_ulp == INT64_MAX) printf("NaN vs number | ");
        else printf("%lld | ", (long long)max_ulp);
        if (first != (size_t)-1)
            printf("%08x %08x %08x: %08x / %08x |\n", in[0][first], in[1][first], in[2][first], out[0][first],
                   out[1][first]);
        else printf("- |\n");
        fflush(stdout);
    }
    for (cl_uint k = 0; k < nk; k++) clReleaseKernel(ks[k]);
    return 0;
}
