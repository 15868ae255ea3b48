/* fusion_ext — a program that opts in to clshim's fusion extension
 * (include/CL/clshim_ext.h) and falls back when it is absent. Results go to
 * stdout (identical with and without clshim); what the extension answered
 * goes to stderr as "ext: ..." lines for the test to check.
 */
#define CL_TARGET_OPENCL_VERSION 300
#define CL_USE_DEPRECATED_OPENCL_1_2_APIS
#include <stdint.h>

#include "CL/clshim_ext.h"
#include "common.h"

static const char *source =
    "__kernel void offset(__global const float *in, __global float *out, float t) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] + t; }\n"
    "__kernel void scale(__global const float *in, __global float *out, float s) {\n"
    "    size_t i = get_global_id(0); out[i] = in[i] * s; }\n"
    "__kernel void square(__global float *io) {\n"
    "    size_t i = get_global_id(0); io[i] = io[i] * io[i]; }\n";

#define N 8192

static clStartFusionCLSHIM_fn start_fusion;
static clCompleteFusionCLSHIM_fn complete_fusion;
static clCancelFusionCLSHIM_fn cancel_fusion;
static cl_command_queue q;
static cl_mem a, b, c;
static cl_kernel koff, kscale, ksq;

static void report(const char *what)
{
    float *h = malloc(N * sizeof *h);
    CHECK(clEnqueueReadBuffer(q, c, CL_TRUE, 0, N * sizeof *h, h, 0, NULL, NULL));
    uint64_t x = 1469598103934665603ULL;
    const unsigned char *p = (const unsigned char *)h;
    for (size_t i = 0; i < N * sizeof *h; i++) x = (x ^ p[i]) * 1099511628211ULL;
    printf("%s: %016llx %a %a\n", what, (unsigned long long)x, h[0], h[N - 1]);
    free(h);
}

static void chain(float t, float s, cl_event ev[3])
{
    size_t gws = N;
    CHECK(clSetKernelArg(koff, 2, sizeof t, &t));
    CHECK(clSetKernelArg(kscale, 2, sizeof s, &s));
    CHECK(clEnqueueNDRangeKernel(q, koff, 1, NULL, &gws, NULL, 0, NULL, ev ? &ev[0] : NULL));
    CHECK(clEnqueueNDRangeKernel(q, kscale, 1, NULL, &gws, NULL, 0, NULL, ev ? &ev[1] : NULL));
    CHECK(clEnqueueNDRangeKernel(q, ksq, 1, NULL, &gws, NULL, 0, NULL, ev ? &ev[2] : NULL));
}

int main(void)
{
    cl_platform_id platform;
    cl_device_id dev = first_device(&platform);
    /* Look the extension up first: before any kernel argument is set. */
    start_fusion = (clStartFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clStartFusionCLSHIM");
    complete_fusion =
        (clCompleteFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCompleteFusionCLSHIM");
    cancel_fusion = (clCancelFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCancelFusionCLSHIM");
    int have = start_fusion && complete_fusion && cancel_fusion;
    fprintf(stderr, "ext: %s\n", have ? "present" : "absent");

    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    q = clCreateCommandQueue(ctx, dev, 0, &err);
    CHECK(err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, NULL, NULL, NULL));
    koff = clCreateKernel(prog, "offset", &err);
    kscale = clCreateKernel(prog, "scale", &err);
    ksq = clCreateKernel(prog, "square", &err);
    float *init = malloc(N * sizeof *init);
    for (int i = 0; i < N; i++) init[i] = (float)(i % 977) * 0.25f - 100.0f;
    a = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, N * sizeof(float), init, &err);
    b = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(float), NULL, &err);
    c = clCreateBuffer(ctx, CL_MEM_READ_WRITE, N * sizeof(float), NULL, &err);
    free(init);
    CHECK(clSetKernelArg(koff, 0, sizeof a, &a));
    CHECK(clSetKernelArg(koff, 1, sizeof b, &b));
    CHECK(clSetKernelArg(kscale, 0, sizeof b, &b));
    CHECK(clSetKernelArg(kscale, 1, sizeof c, &c));
    CHECK(clSetKernelArg(ksq, 0, sizeof c, &c));

    for (int it = 0; it < 2; it++) {
        /* 1. start, three kernels, complete: one fused launch. */
        cl_event ev[3], done = NULL;
        if (have) fprintf(stderr, "ext: start rc=%d\n", start_fusion(q));
        if (have) fprintf(stderr, "ext: start again rc=%d\n", start_fusion(q));
        chain(1.0f + (float)it, 0.5f, ev);
        if (have) {
            fprintf(stderr, "ext: complete rc=%d\n", complete_fusion(q, NULL, &done));
            CHECK(clWaitForEvents(1, &done));
            CHECK(clReleaseEvent(done));
        }
        CHECK(clWaitForEvents(3, ev));
        for (int i = 0; i < 3; i++) {
            cl_int st = 1;
            CHECK(clGetEventInfo(ev[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof st, &st, NULL));
            printf("event %d status %d\n", i, st);
            CHECK(clReleaseEvent(ev[i]));
        }
        report("complete");

        /* 2. start, kernels, cancel: submitted individually. */
        if (have) start_fusion(q);
        chain(2.0f, -1.0f, NULL);
        if (have) fprintf(stderr, "ext: cancel rc=%d\n", cancel_fusion(q));
        report("cancel");

        /* 3. a sync in the middle ends fusion mode; complete still gives an event. */
        if (have) start_fusion(q);
        chain(3.0f, 2.0f, NULL);
        CHECK(clFinish(q));
        if (have) {
            done = NULL;
            cl_int rc = complete_fusion(q, NULL, &done);
            fprintf(stderr, "ext: complete after sync rc=%d event=%d\n", rc, done != NULL);
            if (done) CHECK(clWaitForEvents(1, &done));
            if (done) CHECK(clReleaseEvent(done));
        }
        report("sync");

        /* 4. bad properties are refused; forced fusion where none is needed fuses. */
        if (have) {
            cl_fusion_properties_clshim bad[] = {0x1234, 1, 0};
            cl_fusion_properties_clshim force[] = {CL_FUSION_FORCE_BARRIER_CLSHIM, 1, 0};
            start_fusion(q);
            chain(4.0f, 0.25f, NULL);
            fprintf(stderr, "ext: bad properties rc=%d\n", complete_fusion(q, bad, NULL));
            fprintf(stderr, "ext: forced complete rc=%d\n", complete_fusion(q, force, NULL));
        } else {
            chain(4.0f, 0.25f, NULL);
        }
        report("forced");
    }
    clReleaseKernel(koff);
    clReleaseKernel(kscale);
    clReleaseKernel(ksq);
    clReleaseMemObject(a);
    clReleaseMemObject(b);
    clReleaseMemObject(c);
    clReleaseProgram(prog);
    clReleaseCommandQueue(q);
    clReleaseContext(ctx);
    return 0;
}
