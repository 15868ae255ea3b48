/* route_a_chain.c — a K = 4 chain fused with internalised intermediates by
 * route (a) (clshim's IR fuser, lowered to PTX) against the same kernels
 * unfused and against a hand-written kernel, on NVIDIA's driver
 * (tests/compat/nvidia_route_a.sh).
 *
 *   route_a_chain --source chain4.cl --ptx fused.ptx [--reps R] [N...]
 *
 * chain4.cl holds s0..s3 (b[k+1][i] = f(b[k][i]) with a scalar pair each,
 * the last one a sqrt) and handreg4 (the chain written as one kernel, the
 * intermediates in registers); fused.ptx is
 *   clshim fuse --plan s0+s1+s2+s3 --internal --emit=ptx chain4.cl
 * whose kernel clshim_fused takes (b0, b1, a0, c0, b2, a1, c1, b3, a2, c2,
 * b4, a3, c3) and stores only b4. For each N (floats; default 1, 4, 16, 64
 * Mi): the three ways, each timed as the median of R chains (each chain then
 * clFinish, after an untimed one), and b4 compared bit for bit with the
 * unfused result. One line per N:
 *   N=... unfused_us=... fused_us=... hand_us=... fused_same=yes|no hand_same=yes|no
 */
#include "common.h"

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

static void build(cl_program prog, cl_device_id dev, const char *what)
{
    if (clBuildProgram(prog, 1, &dev, "", NULL, NULL) != CL_SUCCESS) {
        char *log = build_log(prog, dev);
        fprintf(stderr, "route_a_chain: building %s failed: %.2000s\n", what, log);
        exit(2);
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

enum { UNFUSED, FUSED, HAND, NWAYS };
static const float coef[4][2] = {{1.5f, 0.25f}, {0.75f, 1.0f}, {1.25f, 0.5f}, {2.0f, -0.125f}};

static void run_way(cl_command_queue q, int way, cl_kernel *steps, cl_kernel fused, cl_kernel hand, size_t n)
{
    if (way == UNFUSED)
        for (int k = 0; k < 4; k++) CHECK(clEnqueueNDRangeKernel(q, steps[k], 1, NULL, &n, NULL, 0, NULL, NULL));
    else CHECK(clEnqueueNDRangeKernel(q, way == FUSED ? fused : hand, 1, NULL, &n, NULL, 0, NULL, NULL));
    CHECK(clFinish(q));
}

int main(int argc, char **argv)
{
    const char *src_path = NULL, *ptx_path = NULL;
    int reps = 9;
    size_t sizes[16];
    int nsizes = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--source") && i + 1 < argc) src_path = argv[++i];
        else if (!strcmp(argv[i], "--ptx") && i + 1 < argc) ptx_path = argv[++i];
        else if (!strcmp(argv[i], "--reps") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (nsizes < 16) sizes[nsizes++] = strtoull(argv[i], NULL, 10);
    }
    if (!src_path || !ptx_path || reps < 1) {
        fprintf(stderr, "usage: route_a_chain --source chain4.cl --ptx fused.ptx [--reps R] [N...]\n");
        return 2;
    }
    if (!nsizes) {
        sizes[0] = 1u << 20, sizes[1] = 4u << 20, sizes[2] = 16u << 20, sizes[3] = 64u << 20;
        nsizes = 4;
    }
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    first_context_queue(&dev, &ctx, &q);
    cl_int err;
    size_t src_len, ptx_len;
    char *src = read_text(src_path, &src_len), *ptx = read_text(ptx_path, &ptx_len);
    const char *srcs[1] = {src};
    cl_program vendor = clCreateProgramWithSource(ctx, 1, srcs, &src_len, &err);
    CHECK(err);
    build(vendor, dev, "the source");
    const unsigned char *bins[1] = {(const unsigned char *)ptx};
    size_t ptx_size = ptx_len + 1;
    cl_program route_a = clCreateProgramWithBinary(ctx, 1, &dev, &ptx_size, bins, NULL, &err);
    CHECK(err);
    build(route_a, dev, "route (a)'s PTX");
    cl_kernel steps[4], fused = clCreateKernel(route_a, "clshim_fused", &err);
    CHECK(err);
    cl_kernel hand = clCreateKernel(vendor, "handreg4", &err);
    CHECK(err);
    for (int k = 0; k < 4; k++) {
        char name[16];
        snprintf(name, sizeof name, "s%d", k);
        steps[k] = clCreateKernel(vendor, name, &err);
        CHECK(err);
    }
    for (int s = 0; s < nsizes; s++) {
        size_t n = sizes[s];
        cl_mem b[5];
        float *host = malloc(n * sizeof *host), *out[NWAYS];
        for (size_t i = 0; i < n; i++) host[i] = (float)((i * 2654435761u) % 1000003u) / 7.0f;
        for (int k = 0; k < 5; k++) {
            b[k] = clCreateBuffer(ctx, CL_MEM_READ_WRITE | (k ? 0 : CL_MEM_COPY_HOST_PTR), n * sizeof(float),
                                  k ? NULL : host, &err);
            CHECK(err);
        }
        for (int k = 0; k < 4; k++) {
            CHECK(clSetKernelArg(steps[k], 0, sizeof(cl_mem), &b[k]));
            CHECK(clSetKernelArg(steps[k], 1, sizeof(cl_mem), &b[k + 1]));
            CHECK(clSetKernelArg(steps[k], 2, sizeof(float), &coef[k][0]));
            CHECK(clSetKernelArg(steps[k], 3, sizeof(float), &coef[k][1]));
        }
        /* clshim_fused(b0, b1, a0, c0, b2, a1, c1, b3, a2, c2, b4, a3, c3) */
        CHECK(clSetKernelArg(fused, 0, sizeof(cl_mem), &b[0]));
        for (int k = 0; k < 4; k++) {
            CHECK(clSetKernelArg(fused, (cl_uint)(1 + 3 * k), sizeof(cl_mem), &b[k + 1]));
            CHECK(clSetKernelArg(fused, (cl_uint)(2 + 3 * k), sizeof(float), &coef[k][0]));
            CHECK(clSetKernelArg(fused, (cl_uint)(3 + 3 * k), sizeof(float), &coef[k][1]));
        }
        /* handreg4(b0, b1, b2, b3, b4, a0, c0, ..., a3, c3) */
        for (int k = 0; k < 5; k++) CHECK(clSetKernelArg(hand, (cl_uint)k, sizeof(cl_mem), &b[k]));
        for (int k = 0; k < 4; k++) {
            CHECK(clSetKernelArg(hand, (cl_uint)(5 + 2 * k), sizeof(float), &coef[k][0]));
            CHECK(clSetKernelArg(hand, (cl_uint)(6 + 2 * k), sizeof(float), &coef[k][1]));
        }
        double *t[NWAYS];
        for (int w = 0; w < NWAYS; w++) {
            t[w] = malloc((size_t)reps * sizeof(double));
            out[w] = malloc(n * sizeof(float));
            float zero = 0;
            CHECK(clEnqueueFillBuffer(q, b[4], &zero, sizeof zero, 0, n * sizeof(float), 0, NULL, NULL));
            run_way(q, w, steps, fused, hand, n);
            CHECK(clEnqueueReadBuffer(q, b[4], CL_TRUE, 0, n * sizeof(float), out[w], 0, NULL, NULL));
        }
        for (int r = 0; r < reps; r++) /* interleaved, so load changes hit all ways alike */
            for (int w = 0; w < NWAYS; w++) {
                run_way(q, w, steps, fused, hand, n);
                double t0 = now_ms();
                run_way(q, w, steps, fused, hand, n);
                t[w][r] = (now_ms() - t0) * 1000.0;
            }
        for (int w = 0; w < NWAYS; w++) qsort(t[w], (size_t)reps, sizeof(double), cmp_double);
        int fused_same = !memcmp(out[UNFUSED], out[FUSED], n * sizeof(float));
        int hand_same = !memcmp(out[UNFUSED], out[HAND], n * sizeof(float));
        printf("N=%zu unfused_us=%.1f fused_us=%.1f hand_us=%.1f fused_same=%s hand_same=%s\n", n,
               t[UNFUSED][reps / 2], t[FUSED][reps / 2], t[HAND][reps / 2], fused_same ? "yes" : "no",
               hand_same ? "yes" : "no");
        fflush(stdout);
        for (int w = 0; w < NWAYS; w++) {
            free(t[w]);
            free(out[w]);
        }
        for (int k = 0; k < 5; k++) clReleaseMemObject(b[k]);
        free(host);
    }
    return 0;
}
