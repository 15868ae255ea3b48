/* driver_quirks — the driver bugs in cache/quirks.c, shown without clshim,
 * and apps that meet the conditions without triggering them plainly.
 *   driver_quirks binary-globals        two programs from one binary: counters
 *   driver_quirks long-name-binaries    reads the binary of a kernel with a
 *                                       270-character name (PoCL 3.1 aborts)
 *   driver_quirks long-name             builds and runs that kernel only
 *   driver_quirks uncached-binary-race  threads making programs from one
 *                                       binary (PoCL_KERNEL_CACHE=0 aborts)
 *   driver_quirks threads-from-source   threads building one source and running it
 *   driver_quirks binary-headroom       builds and runs a one-kernel program, then
 *                                       limits its address space to 128 MiB more
 *                                       than it uses and reads the binary (PoCL 3.1
 *                                       segfaults: an unchecked 256 MiB allocation)
 */
#include <sys/resource.h>
#include <unistd.h>
#include <pthread.h>

#include "common.h"

static cl_device_id dev;
static cl_context ctx;
static cl_command_queue queue;

static cl_program built_from_source(const char *src, const char *options)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    CHECK(clBuildProgram(p, 1, &dev, options, NULL, NULL));
    return p;
}

static unsigned char *binary_of(cl_program p, size_t *size)
{
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof *size, size, NULL));
    unsigned char *bin = malloc(*size);
    CHECK(clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL));
    return bin;
}

static int run_one(cl_program p, const char *name)
{
    cl_int err;
    cl_kernel k = clCreateKernel(p, name, &err);
    CHECK(err);
    int value = run_int_kernel(ctx, queue, k);
    clReleaseKernel(k);
    return value;
}

static int binary_globals(void)
{
    cl_program src = built_from_source("__global int counter = 5;\n"
                                       "__kernel void bump(__global int *out) { counter++; out[0] = counter; }\n",
                                       "-cl-std=CL2.0");
    size_t size;
    unsigned char *bin = binary_of(src, &size);
    for (int i = 0; i < 2; i++) {
        cl_int err;
        const unsigned char *b = bin;
        cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &size, &b, NULL, &err);
        CHECK(err);
        CHECK(clBuildProgram(p, 1, &dev, "-cl-std=CL2.0", NULL, NULL));
        printf("program %d from the binary: counter %d\n", i + 1, run_one(p, "bump"));
        clReleaseProgram(p);
    }
    free(bin);
    clReleaseProgram(src);
    return 0;
}

static char long_name[271];
static char long_src[600];

static cl_program long_name_program(void)
{
    memset(long_name, 'k', sizeof long_name - 1);
    snprintf(long_src, sizeof long_src, "__kernel void %s(__global int *out) { out[0] = 42; }\n", long_name);
    return built_from_source(long_src, "");
}

static int long_name_binaries(void)
{
    cl_program p = long_name_program();
    size_t size;
    free(binary_of(p, &size));
    printf("read the binary (%zu bytes)\n", size);
    clReleaseProgram(p);
    return 0;
}

static int long_name_run(void)
{
    cl_program p = long_name_program();
    printf("kernel with a %zu-character name: %d\n", strlen(long_name), run_one(p, long_name));
    clReleaseProgram(p);
    return 0;
}

static const char *small_src = "__kernel void one(__global int *out) { out[0] = 1; }\n";
static unsigned char *shared_bin;
static size_t shared_size;

static void *binary_worker(void *arg)
{
    (void)arg;
    for (int i = 0; i < 20; i++) {
        cl_int err;
        const unsigned char *b = shared_bin;
        cl_program p = clCreateProgramWithBinary(ctx, 1, &dev, &shared_size, &b, NULL, &err);
        if (!p) continue;
        clBuildProgram(p, 1, &dev, "", NULL, NULL);
        clReleaseProgram(p);
    }
    return NULL;
}

static void *source_worker(void *arg)
{
    int *result = arg;
    for (int i = 0; i < 5; i++) {
        cl_program p = built_from_source(small_src, "");
        *result += run_one(p, "one");
        clReleaseProgram(p);
    }
    return NULL;
}

static int threads(void *(*worker)(void *), const char *what)
{
    pthread_t t[4];
    int results[4] = {0};
    for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, &results[i]);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    printf("%s: done, results %d %d %d %d\n", what, results[0], results[1], results[2], results[3]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: driver_quirks SCENARIO\n");
        return 2;
    }
    first_context_queue(&dev, &ctx, &queue);
    const char *what = argv[1];
    int rc = 2;
    if (!strcmp(what, "binary-globals")) rc = binary_globals();
    else if (!strcmp(what, "long-name-binaries")) rc = long_name_binaries();
    else if (!strcmp(what, "long-name")) rc = long_name_run();
    else if (!strcmp(what, "uncached-binary-race")) {
        cl_program p = built_from_source(small_src, "");
        shared_bin = binary_of(p, &shared_size);
        rc = threads(binary_worker, "binary programs on 4 threads");
        clReleaseProgram(p);
    } else if (!strcmp(what, "binary-headroom")) {
        cl_program p = built_from_source(small_src, "");
        rc = run_one(p, "one") == 1 ? 0 : 1;
        unsigned long pages = 0;
        FILE *statm = fopen("/proc/self/statm", "r");
        if (!statm || fscanf(statm, "%lu", &pages) != 1) return 2;
        fclose(statm);
        rlim_t used = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE);
        struct rlimit lim = {used + (128u << 20), used + (128u << 20)};
        if (setrlimit(RLIMIT_AS, &lim) != 0) return 2;
        printf("ran; reading the binary with 128 MiB of address space left\n");
        fflush(stdout);
        size_t size;
        free(binary_of(p, &size));
        printf("binary of %zu bytes\n", size);
        clReleaseProgram(p);
    } else if (!strcmp(what, "threads-from-source")) {
        rc = threads(source_worker, "source programs on 4 threads");
    } else {
        fprintf(stderr, "driver_quirks: unknown scenario %s\n", what);
    }
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return rc;
}
