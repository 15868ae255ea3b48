/* fusion_query — what an application sees of clshim's fusion extension
 * without using it for work: the cl_clshim_kernel_fusion name in the
 * platform's and the device's extensions (and whether each extensions query
 * keeps the size protocol), clQueryFusionCLSHIM through a Start, an early
 * end and a Complete, and Complete/Cancel calls with no Start before them.
 * Prints one line per answer; exits 1 when a query breaks the protocol.
 */
#define CL_TARGET_OPENCL_VERSION 300
#include "CL/clshim_ext.h"
#include "common.h"

static int broken;

#define EXPECT(cond)                                                             \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "%s:%d: expected %s\n", __FILE__, __LINE__, #cond); \
            broken = 1;                                                          \
        }                                                                        \
    } while (0)

/* The size query, the string in a buffer of exactly that size, and a buffer
 * one byte short; prints whether the fusion extension is listed. */
static void extensions(const char *what, cl_platform_id p, cl_device_id d)
{
    size_t n = 0, n2 = 0;
    cl_int rc = p ? clGetPlatformInfo(p, CL_PLATFORM_EXTENSIONS, 0, NULL, &n)
                  : clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &n);
    CHECK(rc);
    char *s = malloc(n + 1);
    memset(s, 'x', n + 1);
    rc = p ? clGetPlatformInfo(p, CL_PLATFORM_EXTENSIONS, n, s, &n2) : clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n, s, &n2);
    CHECK(rc);
    EXPECT(n2 == n);
    EXPECT(strlen(s) + 1 == n); /* the size counts the string and its NUL, no more */
    EXPECT(s[n] == 'x');        /* nothing written past it */
    rc = p ? clGetPlatformInfo(p, CL_PLATFORM_EXTENSIONS, n - 1, s, NULL)
           : clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, n - 1, s, NULL);
    printf("%s: one byte short: %d\n", what, rc);
    char *padded = malloc(n + 2);
    snprintf(padded, n + 2, " %s", s);
    printf("%s: cl_clshim_kernel_fusion %s\n", what,
           strstr(padded, " " CL_CLSHIM_KERNEL_FUSION_EXTENSION_NAME) ? "listed" : "absent");
    free(padded);
    free(s);
}

int main(void)
{
    cl_platform_id platform;
    cl_device_id dev = first_device(&platform);
    extensions("platform", platform, NULL);
    extensions("device", NULL, dev);
    clQueryFusionCLSHIM_fn query =
        (clQueryFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clQueryFusionCLSHIM");
    clStartFusionCLSHIM_fn start =
        (clStartFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clStartFusionCLSHIM");
    clCompleteFusionCLSHIM_fn complete =
        (clCompleteFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCompleteFusionCLSHIM");
    clCancelFusionCLSHIM_fn cancel =
        (clCancelFusionCLSHIM_fn)clGetExtensionFunctionAddressForPlatform(platform, "clCancelFusionCLSHIM");
    if (!query || !start || !complete || !cancel) {
        printf("extension API: absent\n");
        return broken;
    }
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    cl_queue_properties ooo[] = {CL_QUEUE_PROPERTIES, CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE, 0};
    cl_command_queue q2 = clCreateCommandQueueWithProperties(ctx, dev, ooo, &err);
    CHECK(err);
    cl_bool in = 7;
#define SHOW(what, queue)                                 \
    do {                                                  \
        in = 7;                                           \
        CHECK(query(queue, &in));                         \
        printf("%s: in fusion mode %u\n", what, (unsigned)in); \
    } while (0)
    printf("query a NULL queue: %d\n", query(NULL, &in));
    printf("query into NULL: %d\n", query(q, NULL));
    SHOW("before Start", q);
    CHECK(start(q));
    SHOW("after Start", q);
    printf("Start again: %d\n", start(q));
    SHOW("after a second Start", q);
    CHECK(clFinish(q)); /* nothing held: nothing observed, fusion mode stays */
    SHOW("after clFinish, nothing held", q);
    static const char *src = "__kernel void k(__global int *y) { y[get_global_id(0)] = 1; }\n";
    cl_program prog = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "k", &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_READ_WRITE, 64 * sizeof(int), NULL, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t g = 64;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL)); /* held */
    CHECK(clFinish(q)); /* observes the held kernel: fusion mode ends early */
    SHOW("after clFinish, a kernel held", q);
    int y[64];
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    printf("the held kernel ran: %d\n", y[0] + y[63]);
    CHECK(complete(q, NULL, NULL)); /* pairs with the Start: no warning */
    SHOW("after Complete", q);
    CHECK(start(q));
    CHECK(cancel(q));
    SHOW("after Start, Cancel", q);
    /* With no Start before them: one warning for q, however many calls. */
    CHECK(cancel(q));
    CHECK(complete(q, NULL, NULL));
    CHECK(cancel(q));
    /* An out-of-order queue: Start succeeds, nothing is held. */
    CHECK(start(q2));
    SHOW("out-of-order queue after Start", q2);
    CHECK(complete(q2, NULL, NULL)); /* pairs: no warning */
    CHECK(complete(q2, NULL, NULL)); /* one warning for q2 */
    CHECK(clReleaseMemObject(buf));
    CHECK(clReleaseKernel(k));
    CHECK(clReleaseProgram(prog));
    CHECK(clReleaseCommandQueue(q2));
    CHECK(clReleaseCommandQueue(q));
    CHECK(clReleaseContext(ctx));
    return broken;
}
