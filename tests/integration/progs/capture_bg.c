/* capture_bg — programs whose binaries clshim captures in the background
 * (program/capture.h), in the situations that can go wrong:
 *   capture_bg exit N     builds N distinct programs, runs a kernel of each,
 *                         synchronises (each is then queued for capture),
 *                         prints the results and exits at once;
 *   capture_bg fork N     the same, then forks: the child exits at once
 *                         (through exit(), so every exit handler runs);
 *                         the parent waits for it and exits;
 *   capture_bg release N  the same, but releases each program (kernel
 *                         first) right after its synchronisation, while its
 *                         capture is queued or running, then builds the
 *                         first program again and runs it;
 *   capture_bg busy N S   the same as exit, then keeps one core busy for S
 *                         seconds before it exits;
 *   capture_bg idle N S   the same, then sleeps S seconds.
 * busy and idle say "handed over" on stderr when they start to wait.
 * stdout holds only results (identical with and without clshim); stderr
 * has "sync_ms=M": the longest time one synchronisation took. */
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"

static cl_device_id dev;
static cl_context ctx;
static cl_command_queue q;
static double longest_sync;

/* Builds variant v, runs it on 64 floats, prints their sum; the program
 * and kernel are returned (or released when `release`). */
static void run_variant(int v, int release, cl_program *prog_out, cl_kernel *kernel_out)
{
    char src[256];
    snprintf(src, sizeof src,
             "__kernel void scale(__global float *y) { size_t i = get_global_id(0); y[i] = y[i] * %d.0f + %d.0f; }",
             v + 2, v);
    const char *s = src;
    cl_int err;
    cl_program prog = clCreateProgramWithSource(ctx, 1, &s, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(prog, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(prog, "scale", &err);
    CHECK(err);
    float y[64];
    for (int i = 0; i < 64; i++) y[i] = (float)i;
    cl_mem b = clCreateBuffer(ctx, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, sizeof y, y, &err);
    CHECK(err);
    CHECK(clSetKernelArg(k, 0, sizeof b, &b));
    size_t g = 64;
    CHECK(clEnqueueNDRangeKernel(q, k, 1, NULL, &g, NULL, 0, NULL, NULL));
    double t0 = now_ms();
    CHECK(clFinish(q)); /* the sync point: the program is queued for capture */
    double took = now_ms() - t0;
    if (took > longest_sync) longest_sync = took;
    CHECK(clEnqueueReadBuffer(q, b, CL_TRUE, 0, sizeof y, y, 0, NULL, NULL));
    double sum = 0;
    for (int i = 0; i < 64; i++) sum += y[i];
    printf("variant %d sum %.1f\n", v, sum);
    fflush(stdout);
    CHECK(clReleaseMemObject(b));
    if (release) {
        CHECK(clReleaseKernel(k));
        CHECK(clReleaseProgram(prog));
        return;
    }
    *prog_out = prog;
    *kernel_out = k;
}

int main(int argc, char **argv)
{
    const char *mode = argc > 1 ? argv[1] : "";
    int waits = !strcmp(mode, "busy") || !strcmp(mode, "idle");
    if (argc != 3 + waits) {
        fprintf(stderr, "usage: capture_bg exit|fork|release N, or capture_bg busy|idle N S\n");
        return 2;
    }
    int n = atoi(argv[2]);
    if (n < 1 || n > 64) return 2;
    cl_int err;
    dev = first_device(NULL);
    ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    q = clCreateCommandQueueWithProperties(ctx, dev, NULL, &err);
    CHECK(err);
    cl_program progs[64];
    cl_kernel kernels[64];
    int release = !strcmp(mode, "release");
    for (int v = 0; v < n; v++) run_variant(v, release, &progs[v], &kernels[v]);
    if (release) run_variant(0, 1, NULL, NULL);
    if (!strcmp(mode, "fork")) {
        pid_t pid = fork();
        if (pid < 0) return 3;
        if (pid == 0) exit(0); /* exit handlers run with the parent's captures queued */
        int status;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            printf("child failed\n");
            return 4;
        }
        printf("child ok\n");
    }
    if (waits) {
        double seconds = atof(argv[3]), t0 = now_ms();
        fprintf(stderr, "handed over\n");
        if (!strcmp(mode, "idle")) {
            nanosleep(&(struct timespec){(time_t)seconds, (long)((seconds - (time_t)seconds) * 1e9)}, NULL);
        } else {
            volatile double x = 1.0;
            while (now_ms() - t0 < seconds * 1e3)
                for (int i = 0; i < 100000; i++) x = x * 1.0000001 + 1e-9;
        }
    }
    fprintf(stderr, "sync_ms=%.0f\n", longest_sync);
    return 0;
}
