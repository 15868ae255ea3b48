/* progsem — what an application sees of its programs: program-scope state,
 * rebuilds, reference counts, build options, compile results and shared
 * failures. Each scenario prints error codes and query answers, so a plain
 * run and a run under clshim (cold and warm) can be diffed line by line.
 *   progsem counter | twin-rebuild | rebuild-attached | compile-binaries
 *   progsem compile-twice VALUE | failing-threads N | hold SECONDS | fork N
 *   progsem fork-during-build INCLUDE_DIR
 */
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static cl_device_id dev;
static cl_context ctx;
static cl_command_queue queue;

static cl_program source_program(const char *src)
{
    cl_int err;
    cl_program p = clCreateProgramWithSource(ctx, 1, &src, NULL, &err);
    CHECK(err);
    return p;
}

static int run_one(cl_kernel k) { return run_int_kernel(ctx, queue, k); }

static void print_options(const char *what, cl_program p)
{
    char opts[256] = "";
    cl_int rc = clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_OPTIONS, sizeof opts, opts, NULL);
    printf("%s: build options rc %d '%s'\n", what, rc, rc == CL_SUCCESS ? opts : "");
}

static void print_refcount(const char *what, cl_program p)
{
    cl_uint refs = 0;
    cl_int rc = clGetProgramInfo(p, CL_PROGRAM_REFERENCE_COUNT, sizeof refs, &refs, NULL);
    printf("%s: reference count rc %d = %u\n", what, rc, refs);
}

/* Item 1: each program owns its program-scope variables. */
static int counter(void)
{
    const char *src = "__global int counter = 5;\n"
                      "__kernel void bump(__global int *out) { counter++; out[0] = counter; }\n";
    cl_program p[2];
    cl_kernel k[2];
    cl_int err;
    for (int i = 0; i < 2; i++) {
        p[i] = source_program(src);
        CHECK(clBuildProgram(p[i], 1, &dev, "-cl-std=CL2.0", NULL, NULL));
        k[i] = clCreateKernel(p[i], "bump", &err);
        CHECK(err);
    }
    for (int round = 0; round < 2; round++)
        for (int i = 0; i < 2; i++) printf("round %d: p%d counter %d\n", round, i + 1, run_one(k[i]));
    for (int i = 0; i < 2; i++) {
        clReleaseKernel(k[i]);
        clReleaseProgram(p[i]);
    }
    return 0;
}

static const char *val_src = "#ifndef VAL\n#define VAL 1\n#endif\n"
                             "__kernel void val(__global int *out) { out[0] = VAL; }\n";

/* Item 2: rebuilding a program while a kernel of a twin (same source,
 * built after it) exists. */
static int twin_rebuild(void)
{
    cl_int err;
    cl_program p2 = source_program(val_src), p1 = source_program(val_src);
    printf("p1 build: %d\n", clBuildProgram(p1, 1, &dev, "", NULL, NULL));
    CHECK(clBuildProgram(p2, 1, &dev, "", NULL, NULL));
    cl_kernel k2 = clCreateKernel(p2, "val", &err);
    CHECK(err);
    printf("p1 rebuild -DVAL=2: %d\n", clBuildProgram(p1, 1, &dev, "-DVAL=2", NULL, NULL));
    print_options("p1", p1);
    cl_kernel k1 = clCreateKernel(p1, "val", &err);
    printf("p1 kernel: %d\n", err);
    if (k1) printf("p1 runs %d\n", run_one(k1));
    printf("p2 runs %d\n", run_one(k2));
    print_refcount("p2", p2);
    if (k1) clReleaseKernel(k1);
    clReleaseKernel(k2);
    clReleaseProgram(p1);
    clReleaseProgram(p2);
    return 0;
}

/* Item 3: a program with a kernel attached cannot be rebuilt. */
static int rebuild_attached(void)
{
    cl_int err;
    cl_program p = source_program(val_src);
    CHECK(clBuildProgram(p, 1, &dev, "-DVAL=3", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "val", &err);
    CHECK(err);
    print_refcount("with a kernel", p);
    printf("rebuild, same options: %d\n", clBuildProgram(p, 1, &dev, "-DVAL=3", NULL, NULL));
    printf("rebuild, other options: %d\n", clBuildProgram(p, 1, &dev, "-DVAL=4", NULL, NULL));
    print_options("after the refused rebuilds", p);
    print_refcount("after the refused rebuilds", p);
    printf("kernel runs %d\n", run_one(k));
    clReleaseKernel(k);
    print_refcount("kernel released", p);
    printf("rebuild, kernel released: %d\n", clBuildProgram(p, 1, &dev, "-DVAL=4", NULL, NULL));
    print_options("rebuilt", p);
    k = clCreateKernel(p, "val", &err);
    CHECK(err);
    printf("kernel runs %d\n", run_one(k));
    clReleaseKernel(k);
    clReleaseProgram(p);
    return 0;
}

/* Item 4: the binary of a compiled object. */
static int compile_binaries(void)
{
    cl_program p = source_program("int twice(int x) { return 2 * x; }\n");
    printf("compile: %d\n", clCompileProgram(p, 1, &dev, "", 0, NULL, NULL, NULL, NULL));
    size_t size = 0;
    cl_int rc = clGetProgramInfo(p, CL_PROGRAM_BINARY_SIZES, sizeof size, &size, NULL);
    printf("binary sizes: %d, nonzero %d\n", rc, size > 0);
    unsigned char *bin = malloc(size ? size : 1);
    rc = clGetProgramInfo(p, CL_PROGRAM_BINARIES, sizeof bin, &bin, NULL);
    printf("binaries: %d\n", rc);
    /* The bytes are a compiled object the driver takes back. */
    cl_int status = 0, err = 0;
    const unsigned char *cbin = bin;
    cl_program again = rc == CL_SUCCESS ? clCreateProgramWithBinary(ctx, 1, &dev, &size, &cbin, &status, &err)
                                        : NULL;
    printf("program from those bytes: %d status %d\n", err, status);
    if (again) {
        cl_program_binary_type type = 0;
        clGetProgramBuildInfo(again, dev, CL_PROGRAM_BINARY_TYPE, sizeof type, &type, NULL);
        printf("its binary type %u\n", (unsigned)type);
        clReleaseProgram(again);
    }
    free(bin);
    clReleaseProgram(p);
    return 0;
}

/* Item 5: a second compile with other options, then link and run. */
static int compile_twice(const char *value)
{
    cl_int err;
    cl_program p = source_program("__kernel void val(__global int *out) { out[0] = VAL; }\n");
    printf("compile -DVAL=7: %d\n", clCompileProgram(p, 1, &dev, "-DVAL=7", 0, NULL, NULL, NULL, NULL));
    char opts[64];
    snprintf(opts, sizeof opts, "-DVAL=%s", value);
    printf("compile again: %d\n", clCompileProgram(p, 1, &dev, opts, 0, NULL, NULL, NULL, NULL));
    print_options("compiled", p);
    cl_program linked = clLinkProgram(ctx, 1, &dev, "", 1, &p, NULL, NULL, &err);
    printf("link: %d\n", err);
    if (linked) {
        cl_kernel k = clCreateKernel(linked, "val", &err);
        CHECK(err);
        printf("linked kernel runs %d\n", run_one(k));
        clReleaseKernel(k);
        clReleaseProgram(linked);
    }
    clReleaseProgram(p);
    return 0;
}

/* Item 9: threads building the same failing program at once. */
static pthread_barrier_t start_line;
struct failing {
    cl_int rc;
    cl_build_status status;
    int log_has_error;
};

static void *build_failing(void *arg)
{
    struct failing *f = arg;
    cl_program p = source_program("__kernel void broken(__global int *out) { out[0] = undeclared_name; }\n");
    pthread_barrier_wait(&start_line);
    f->rc = clBuildProgram(p, 1, &dev, "", NULL, NULL);
    clGetProgramBuildInfo(p, dev, CL_PROGRAM_BUILD_STATUS, sizeof f->status, &f->status, NULL);
    char *log = build_log(p, dev);
    f->log_has_error = strstr(log, "undeclared_name") != NULL;
    free(log);
    cl_int err = 0;
    cl_kernel k = clCreateKernel(p, "broken", &err);
    if (k) clReleaseKernel(k);
    else f->rc = f->rc * 1000 + err; /* both codes in one line */
    clReleaseProgram(p);
    return NULL;
}

static int failing_threads(int n)
{
    pthread_t *t = calloc((size_t)n, sizeof *t);
    struct failing *f = calloc((size_t)n, sizeof *f);
    pthread_barrier_init(&start_line, NULL, (unsigned)n);
    for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, build_failing, &f[i]);
    for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < n; i++)
        printf("thread: build %d (then kernel), status %d, log names the error %d\n", f[i].rc, f[i].status,
               f[i].log_has_error);
    pthread_barrier_destroy(&start_line);
    free(t);
    free(f);
    return 0;
}

/* Item 7: builds a program and keeps it, without running it. */
static int hold(int seconds)
{
    cl_program p = source_program("__kernel void held(__global float *x) { x[get_global_id(0)] *= 3.5f; }\n");
    double t0 = now_ms();
    CHECK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    printf("built\n");
    fprintf(stderr, "progsem: built in %.0f ms\n", now_ms() - t0);
    fflush(stdout);
    sleep((unsigned)seconds);
    clReleaseProgram(p);
    return 0;
}

/* Item 8: a process that used OpenCL forks children that exit normally.
 * With PROGSEM_CHILD_EXIT=_exit (set under AddressSanitizer by make
 * check-sanitize) they leave by _exit: GCC 12's libasan takes no allocator
 * lock around fork(), so a child of this threaded process (PoCL's workers)
 * freeing memory in exit()'s destructors (libLLVM's) can wait forever on a
 * lock another thread held at the fork. POSIX allows such a child only
 * async-signal-safe calls; exit() works with glibc's malloc, which is
 * fork-safe, and make check runs it so. */
static int forks(int n)
{
    const char *how = getenv("PROGSEM_CHILD_EXIT");
    int quick = how && !strcmp(how, "_exit");
    cl_int err;
    cl_program p = source_program(val_src);
    CHECK(clBuildProgram(p, 1, &dev, "", NULL, NULL));
    cl_kernel k = clCreateKernel(p, "val", &err);
    CHECK(err);
    printf("parent runs %d\n", run_one(k));
    fflush(stdout);
    for (int i = 0; i < n; i++) {
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            if (quick) _exit(0);
            exit(0); /* runs the atexit handlers it inherited */
        }
        int status = 0;
        waitpid(pid, &status, 0);
        printf("child %d exited %d\n", i, WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    }
    clReleaseKernel(k);
    clReleaseProgram(p);
    return 0;
}

/* Item 8, the other half: a thread forks children that never exec (and
 * stay alive) while the main thread builds a program whose key needs clang
 * (a computed #include). The children inherit whatever descriptors are open at
 * that instant; none of them may hold up the build. */
static volatile int building = 1;
enum { MAX_CHILDREN = 256 };
static pid_t children[MAX_CHILDREN];
static int nchildren;

static void *forker(void *unused)
{
    (void)unused;
    while (building && nchildren < MAX_CHILDREN) {
        pid_t pid = fork();
        if (pid == 0) {
            for (;;) pause(); /* async-signal-safe only: the parent is threaded */
        }
        if (pid > 0) children[nchildren++] = pid;
        usleep(500);
    }
    return NULL;
}

static int fork_during_build(const char *include_dir)
{
    const char *src = "#define HEADER \"h.h\"\n#include HEADER\n" /* computed: the scanner defers to clang */
                      "__kernel void val(__global int *out) { out[0] = VAL; }\n";
    char options[4200];
    snprintf(options, sizeof options, "-I %s", include_dir);
    cl_program p = source_program(src);
    pthread_t t;
    if (pthread_create(&t, NULL, forker, NULL)) return 1;
    cl_int rc = clBuildProgram(p, 1, &dev, options, NULL, NULL);
    building = 0;
    pthread_join(t, NULL);
    for (int i = 0; i < nchildren; i++) kill(children[i], SIGKILL);
    for (int i = 0; i < nchildren; i++) waitpid(children[i], NULL, 0);
    printf("build rc %d\n", rc);
    if (rc != CL_SUCCESS) return 1;
    cl_int err;
    cl_kernel k = clCreateKernel(p, "val", &err);
    CHECK(err);
    printf("runs %d\n", run_one(k));
    clReleaseKernel(k);
    clReleaseProgram(p);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: progsem SCENARIO [ARG]\n");
        return 2;
    }
    const char *what = argv[1], *arg = argc > 2 ? argv[2] : "";
    first_context_queue(&dev, &ctx, &queue);
    int rc = 2;
    if (!strcmp(what, "counter")) rc = counter();
    else if (!strcmp(what, "twin-rebuild")) rc = twin_rebuild();
    else if (!strcmp(what, "rebuild-attached")) rc = rebuild_attached();
    else if (!strcmp(what, "compile-binaries")) rc = compile_binaries();
    else if (!strcmp(what, "compile-twice")) rc = compile_twice(arg);
    else if (!strcmp(what, "failing-threads")) rc = failing_threads(atoi(arg));
    else if (!strcmp(what, "hold")) rc = hold(atoi(arg));
    else if (!strcmp(what, "fork")) rc = forks(atoi(arg));
    else if (!strcmp(what, "fork-during-build")) rc = fork_during_build(arg);
    else fprintf(stderr, "progsem: unknown scenario %s\n", what);
    clReleaseCommandQueue(queue);
    clReleaseContext(ctx);
    return rc;
}
