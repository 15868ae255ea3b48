/* rel_shrink — an OpenCL application whose cache file shrinks under it.
 *
 *   rel_shrink FILE SIZE [handler|default]
 *
 * Builds and runs program 1, then truncates FILE to SIZE bytes (as another
 * process could while this one has the cache mapped; a missing FILE is
 * ignored, so a plain run does the same work), then builds and runs program
 * 2, and program 1 again in a new context. Prints each result. Under clshim
 * with both programs cached, the lookups after the truncation touch pages
 * past the end of the mapped data.mdb (SIGBUS without a guard).
 *
 * With a third argument the app then faults on its own: it maps a file of
 * its own, truncates it and reads it. "handler": the app installed a SIGBUS
 * handler first (before any OpenCL call), which prints a line and exits 7;
 * "default": no handler, so the process dies of SIGBUS. Either way clshim
 * must change nothing. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tests/integration/progs/common.h"

#define N 1024

static const char *source = "__kernel void fill(__global float *y) {\n"
                            "    size_t i = get_global_id(0);\n"
                            "    y[i] = (float)i * FACTOR + OFFSET;\n"
                            "}\n";

static double run(cl_device_id dev, const char *options)
{
    cl_int err;
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    cl_program prog = clCreateProgramWithSource(ctx, 1, &source, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, options, NULL, NULL));
    cl_command_queue q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    cl_mem buf = clCreateBuffer(ctx, CL_MEM_WRITE_ONLY, N * sizeof(float), NULL, &err);
    CHECK(err);
    cl_kernel k = clCreateKernel(prog, "fill", &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof buf, &buf));
    size_t global = N;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &global, NULL, 0, NULL, NULL));
    float y[N];
    CHECK(clEnqueueReadBuffer(q, buf, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    double sum = 0;
    for (int i = 0; i < N; i++) sum += y[i] * (i % 7 + 1);
    clReleaseKernel(k);
    clReleaseMemObject(buf);
    clReleaseCommandQueue(q);
    clReleaseProgram(prog);
    clReleaseContext(ctx);
    return sum;
}

static void app_handler(int sig)
{
    static const char msg[] = "the app's own SIGBUS handler ran\n";
    (void)sig;
    if (write(1, msg, sizeof msg - 1) < 0) _exit(8);
    _exit(7);
}

/* Maps a file of the app's own, cuts it to nothing and reads it. */
static int own_fault(void)
{
    char path[] = "/tmp/rel_shrink.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0 || ftruncate(fd, 4096) != 0) return 3;
    volatile char *p = mmap(NULL, 4096, PROT_READ, MAP_SHARED, fd, 0);
    unlink(path);
    if (p == MAP_FAILED || ftruncate(fd, 0) != 0) return 3;
    printf("reading past the end of the app's own file\n");
    fflush(stdout);
    return p[100];
}

int main(int argc, char **argv)
{
    if (argc != 3 && argc != 4) {
        fprintf(stderr, "usage: rel_shrink FILE SIZE [handler|default]\n");
        return 2;
    }
    if (argc == 4 && !strcmp(argv[3], "handler")) signal(SIGBUS, app_handler);
    cl_device_id dev = first_device(NULL);
    printf("program 1: %.1f\n", run(dev, "-DFACTOR=2.0f -DOFFSET=1.0f"));
    fflush(stdout);
    if (truncate(argv[1], atol(argv[2])) != 0 && errno != ENOENT) perror("truncate");
    printf("program 2: %.1f\n", run(dev, "-DFACTOR=3.0f -DOFFSET=0.5f"));
    printf("program 1 again: %.1f\n", run(dev, "-DFACTOR=2.0f -DOFFSET=1.0f"));
    fflush(stdout);
    if (argc == 4) return own_fault();
    return 0;
}
