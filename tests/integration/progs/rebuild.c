/* rebuild — builds one source program, runs its kernel, releases it, and
 * does it again N times in the same process, as a library that creates its
 * programs on demand does (issue 30: "a released program built again in
 * the same process is a memory hit").
 *   rebuild N [PAUSE_MS [busy|idle|wait [partial]]]
 * PAUSE_MS: how long the process sleeps after each release (an application
 * idle between uses), or with `busy` computes on one core (an application
 * busy between uses). `wait`: after each release it runs the command in
 * $REBUILD_WAIT, if set, and waits for it (`clshim cache wait`: the next
 * round then comes after the capture, whatever the load). `partial`: the
 * program has a second kernel that never runs. Prints one checksum per
 * round. */
#include "common.h"

#include <time.h>

static const char *whole_src =
    "__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = 0.5f * (float)(i % 11) + 1.0f; }\n";
static const char *partial_src =
    "__kernel void k(__global float *y) { size_t i = get_global_id(0); y[i] = 0.5f * (float)(i % 11) + 1.0f; }\n"
    "__kernel void never(__global float *y) { y[get_global_id(0)] = cos(y[get_global_id(0)]); }\n";

int main(int argc, char **argv)
{
    int rounds = argc > 1 ? atoi(argv[1]) : 3;
    long idle_ms = argc > 2 ? atol(argv[2]) : 0;
    int busy = argc > 3 && !strcmp(argv[3], "busy");
    const char *wait_cmd = argc > 3 && !strcmp(argv[3], "wait") ? getenv("REBUILD_WAIT") : NULL;
    const char *src = argc > 4 && !strcmp(argv[4], "partial") ? partial_src : whole_src;
    cl_int err;
    cl_device_id dev = first_device(NULL);
    cl_context ctx = clCreateContext(NULL, 1, &dev, NULL, NULL, &err);
    CHECK(err);
    for (int r = 0; r < rounds; r++) {
        size_t len = strlen(src);
        cl_program prog = clCreateProgramWithSource(ctx, 1, &src, &len, &err);
        CHECK(err);
        CHECK(clBuildProgram(prog, 1, &dev, "-cl-fast-relaxed-math", NULL, NULL));
        cl_kernel k = clCreateKernel(prog, "k", &err);
        CHECK(err);
        float y[128] = {0};
        run_on_floats(ctx, dev, k, y, 128);
        double sum = 0;
        for (int i = 0; i < 128; i++) sum += y[i] * (i + 1);
        printf("round %d checksum %.3f\n", r, sum);
        fflush(stdout);
        clReleaseKernel(k);
        clReleaseProgram(prog);
        if (wait_cmd && system(wait_cmd) != 0) {
            fprintf(stderr, "rebuild: '%s' failed\n", wait_cmd);
            return 1;
        }
        if (idle_ms && busy) {
            struct timespec t0, t;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            volatile unsigned long spin = 0;
            do {
                for (int i = 0; i < 100000; i++) spin += (unsigned long)i;
                clock_gettime(CLOCK_MONOTONIC, &t);
            } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < idle_ms);
            (void)spin; /* read once: clang counts a volatile only written as unused */
        } else if (idle_ms) {
            struct timespec ts = {idle_ms / 1000, (idle_ms % 1000) * 1000000L};
            while (nanosleep(&ts, &ts) != 0) {
            }
        }
    }
    clReleaseContext(ctx);
    return 0;
}
