/* fuzz_batch — the fusion batcher's state machine (fusion/batch.h) driven
 * by arbitrary command streams against a fake driver.
 *
 * The input is a stream of operations on two in-order queues and one
 * out-of-order queue, three kernels of one source program and their events:
 * clSetKernelArg, kernel enqueues (with or without an event, waiting on an
 * earlier event), clFlush, clFinish, markers, clWaitForEvents, status
 * queries, releases of events and kernels (recreated). The plan
 * (CLSHIM_FUSE, set before the first configuration read; some sequences with
 * `internal` and `const`, which change nothing when refused) holds sequences of
 * those kernels, and automatic fusion (CLSHIM_FUSION=auto) learns more from
 * the runs it sees (learned sequences stay for the process, so an input
 * may find some learned by earlier ones); the fake driver has no argument info, so every completed
 * sequence is refused and submitted unfused (and made holdable again for
 * the next input) — what is fuzzed is holding, breaking, cancelling and
 * event substitution. The fake driver runs each
 * kernel at enqueue and logs it with the argument values it sees.
 * Properties: per queue, the driver ran exactly the kernels the
 * application enqueued, in its order, with the arguments they had at
 * enqueue; nothing is held after clFinish; every event handed out is
 * complete once its queue was finished; no abort (CLSHIM_STRICT=1).
 */
#define CL_TARGET_OPENCL_VERSION 300
#include "program/origin.h"
#include "program/program.h"
#include "common/clapi.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"
#include "tests/fuzz/fuzz.h"

#define NQ 3
#define NK 3
#define NARGS 2
#define MAX_RUNS 512
#define MAX_EVENTS 64

/* ---- the fake driver ---- */

struct fake_event {
    int refs;
    int user;
    cl_int status;
    void(CL_CALLBACK *cb[4])(cl_event, cl_int, void *);
    void *cb_data[4];
    int ncb;
};
struct fake_kernel {
    int refs;
    int which;
    uint64_t args[NARGS];
};
struct fake_queue {
    int refs;
    int out_of_order;
};
struct run {
    int which;
    uint64_t args[NARGS];
};
static struct run driver_runs[NQ][MAX_RUNS];
static int driver_nruns[NQ];
static struct fake_queue fake_queues[NQ];
static int fake_program_refs = 1, fake_ctx, fake_dev;
static const char *const kernel_names[NK] = {"ka", "kb", "kc"};

static int queue_index(cl_command_queue q) { return (int)((struct fake_queue *)q - fake_queues); }

static void complete(struct fake_event *e, cl_int status)
{
    e->status = status;
    for (int i = 0; i < e->ncb; i++) e->cb[i]((cl_event)e, status, e->cb_data[i]);
    e->ncb = 0;
}

static struct fake_event *new_event(int user)
{
    struct fake_event *e = calloc(1, sizeof *e);
    if (!e) abort();
    e->refs = 1;
    e->user = user;
    e->status = user ? CL_SUBMITTED : CL_COMPLETE;
    return e;
}

static cl_int CL_API_CALL f_retain_event(cl_event e)
{
    ((struct fake_event *)e)->refs++;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_release_event(cl_event ev)
{
    struct fake_event *e = (struct fake_event *)ev;
    FUZZ_ASSERT(e->refs > 0);
    if (--e->refs == 0) free(e);
    return CL_SUCCESS;
}
static cl_event CL_API_CALL f_create_user_event(cl_context c, cl_int *rc)
{
    (void)c;
    if (rc) *rc = CL_SUCCESS;
    return (cl_event)new_event(1);
}
static cl_int CL_API_CALL f_set_user_event_status(cl_event e, cl_int status)
{
    complete((struct fake_event *)e, status);
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_set_event_callback(cl_event ev, cl_int type, void(CL_CALLBACK *fn)(cl_event, cl_int, void *),
                                               void *data)
{
    (void)type;
    struct fake_event *e = (struct fake_event *)ev;
    if (e->status <= CL_COMPLETE) {
        fn(ev, e->status, data);
        return CL_SUCCESS;
    }
    FUZZ_ASSERT(e->ncb < 4);
    e->cb[e->ncb] = fn;
    e->cb_data[e->ncb++] = data;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_wait_for_events(cl_uint n, const cl_event *list)
{
    for (cl_uint i = 0; i < n; i++) /* the driver never waits on a user event clshim completes later */
        FUZZ_ASSERT(((struct fake_event *)list[i])->status <= CL_COMPLETE);
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_get_event_info(cl_event ev, cl_event_info p, size_t size, void *value, size_t *ret)
{
    struct fake_event *e = (struct fake_event *)ev;
    cl_uint refs = (cl_uint)e->refs;
    const void *src = p == CL_EVENT_REFERENCE_COUNT ? (const void *)&refs : (const void *)&e->status;
    if (value && size >= 4) memcpy(value, src, 4);
    if (ret) *ret = 4;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_get_event_profiling_info(cl_event e, cl_profiling_info p, size_t size, void *value,
                                                     size_t *ret)
{
    (void)e, (void)p;
    if (value && size >= 8) memset(value, 0, 8);
    if (ret) *ret = 8;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_get_queue_info(cl_command_queue q, cl_command_queue_info p, size_t size, void *value,
                                           size_t *ret)
{
    struct fake_queue *fq = (struct fake_queue *)q;
    union {
        cl_command_queue_properties props;
        void *ptr;
        cl_uint refs;
    } v;
    size_t n = sizeof v.ptr;
    if (p == CL_QUEUE_PROPERTIES) v.props = fq->out_of_order ? CL_QUEUE_OUT_OF_ORDER_EXEC_MODE_ENABLE : 0;
    else if (p == CL_QUEUE_CONTEXT) v.ptr = &fake_ctx;
    else if (p == CL_QUEUE_DEVICE) v.ptr = &fake_dev;
    else if (p == CL_QUEUE_REFERENCE_COUNT) v.refs = (cl_uint)fq->refs, n = sizeof v.refs;
    else return CL_INVALID_VALUE;
    if (value) memcpy(value, &v, size < n ? size : n);
    if (ret) *ret = n;
    return CL_SUCCESS;
}
static cl_program CL_API_CALL f_create_program(cl_context c, cl_uint n, const char **s, const size_t *l, cl_int *rc)
{
    (void)c, (void)n, (void)s, (void)l;
    if (rc) *rc = CL_SUCCESS;
    return (cl_program)&fake_program_refs;
}
static cl_int CL_API_CALL f_retain_program(cl_program p)
{
    (void)p;
    fake_program_refs++;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_release_program(cl_program p)
{
    (void)p;
    fake_program_refs--;
    return CL_SUCCESS;
}
static cl_kernel CL_API_CALL f_create_kernel(cl_program p, const char *name, cl_int *rc)
{
    (void)p;
    struct fake_kernel *k = calloc(1, sizeof *k);
    if (!k) abort();
    k->refs = 1;
    for (int i = 0; i < NK; i++)
        if (!strcmp(name, kernel_names[i])) k->which = i;
    if (rc) *rc = CL_SUCCESS;
    return (cl_kernel)k;
}
static cl_int CL_API_CALL f_release_kernel(cl_kernel kernel)
{
    struct fake_kernel *k = (struct fake_kernel *)kernel;
    if (--k->refs == 0) free(k);
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_get_kernel_info(cl_kernel kernel, cl_kernel_info p, size_t size, void *value,
                                            size_t *ret)
{
    struct fake_kernel *k = (struct fake_kernel *)kernel;
    if (p == CL_KERNEL_FUNCTION_NAME) {
        size_t n = strlen(kernel_names[k->which]) + 1;
        if (value && size >= n) memcpy(value, kernel_names[k->which], n);
        if (ret) *ret = n;
        return CL_SUCCESS;
    }
    union {
        cl_uint u;
        void *ptr;
    } v = {0};
    size_t n = sizeof(cl_uint);
    if (p == CL_KERNEL_NUM_ARGS) v.u = NARGS;
    else if (p == CL_KERNEL_REFERENCE_COUNT) v.u = (cl_uint)k->refs;
    else if (p == CL_KERNEL_CONTEXT) v.ptr = &fake_ctx, n = sizeof v.ptr;
    else return CL_INVALID_VALUE;
    if (value) memcpy(value, &v, size < n ? size : n);
    if (ret) *ret = n;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_get_kernel_arg_info(cl_kernel k, cl_uint i, cl_kernel_arg_info p, size_t s, void *v,
                                                size_t *r)
{
    (void)k, (void)i, (void)p, (void)s, (void)v, (void)r;
    /* Pointer-sized arguments without argument info may be buffers: every
     * fusion is refused before anything is built. */
    return CL_KERNEL_ARG_INFO_NOT_AVAILABLE;
}
static cl_int CL_API_CALL f_set_kernel_arg(cl_kernel kernel, cl_uint i, size_t size, const void *value)
{
    struct fake_kernel *k = (struct fake_kernel *)kernel;
    if (i >= NARGS) return CL_INVALID_ARG_INDEX;
    if (size != sizeof(uint64_t) || !value) return CL_INVALID_ARG_SIZE;
    memcpy(&k->args[i], value, sizeof k->args[i]);
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_enqueue_kernel(cl_command_queue q, cl_kernel kernel, cl_uint dim, const size_t *off,
                                           const size_t *gws, const size_t *lws, cl_uint nw, const cl_event *wl,
                                           cl_event *ev)
{
    (void)dim, (void)off, (void)gws, (void)lws;
    for (cl_uint i = 0; i < nw; i++) /* waits only on what already ran: the fake runs at enqueue */
        FUZZ_ASSERT(((struct fake_event *)wl[i])->status <= CL_COMPLETE);
    struct fake_kernel *k = (struct fake_kernel *)kernel;
    int qi = queue_index(q);
    FUZZ_ASSERT(driver_nruns[qi] < MAX_RUNS);
    struct run *r = &driver_runs[qi][driver_nruns[qi]++];
    r->which = k->which;
    memcpy(r->args, k->args, sizeof r->args);
    if (ev) *ev = (cl_event)new_event(0);
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_marker(cl_command_queue q, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    (void)q;
    for (cl_uint i = 0; i < nw; i++) FUZZ_ASSERT(((struct fake_event *)wl[i])->status <= CL_COMPLETE);
    if (ev) *ev = (cl_event)new_event(0);
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_queue_op(cl_command_queue q)
{
    (void)q;
    return CL_SUCCESS;
}
static cl_int CL_API_CALL f_wg_info(cl_kernel k, cl_device_id d, cl_kernel_work_group_info p, size_t s, void *v,
                                    size_t *r)
{
    (void)k, (void)d, (void)p;
    size_t max = 256;
    if (v && s >= sizeof max) memcpy(v, &max, sizeof max);
    if (r) *r = sizeof max;
    return CL_SUCCESS;
}

static struct cl_api fake;

/* ---- the application ---- */

struct app_run {
    int which;
    uint64_t args[NARGS];
};
static struct app_run app_runs[NQ][MAX_RUNS];
static int app_nruns[NQ];

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc, (void)argv;
    setenv("CLSHIM_FUSE", "ka+kb+kc:const;kb+kb:internal;kc+ka+kb+ka:internal=ka.1,kb.0,const", 1);
    setenv("CLSHIM_FUSION", "auto", 1);
    /* The run-length history keys its records by the device's identity,
     * which the program layer queries from a driver this harness has not. */
    setenv("CLSHIM_FUSION_HISTORY", "0", 1);
    setenv("CLSHIM_STRICT", "1", 1);
    setenv("CLSHIM_LOG", "error", 1);
    fake.clRetainEvent = f_retain_event;
    fake.clReleaseEvent = f_release_event;
    fake.clCreateUserEvent = f_create_user_event;
    fake.clSetUserEventStatus = f_set_user_event_status;
    fake.clSetEventCallback = f_set_event_callback;
    fake.clWaitForEvents = f_wait_for_events;
    fake.clGetEventInfo = f_get_event_info;
    fake.clGetEventProfilingInfo = f_get_event_profiling_info;
    fake.clGetCommandQueueInfo = f_get_queue_info;
    fake.clCreateProgramWithSource = f_create_program;
    fake.clRetainProgram = f_retain_program;
    fake.clReleaseProgram = f_release_program;
    fake.clCreateKernel = f_create_kernel;
    fake.clReleaseKernel = f_release_kernel;
    fake.clGetKernelInfo = f_get_kernel_info;
    fake.clGetKernelArgInfo = f_get_kernel_arg_info;
    fake.clGetKernelWorkGroupInfo = f_wg_info;
    fake.clSetKernelArg = f_set_kernel_arg;
    fake.clEnqueueNDRangeKernel = f_enqueue_kernel;
    fake.clEnqueueMarkerWithWaitList = f_marker;
    fake.clFlush = f_queue_op;
    fake.clFinish = f_queue_op;
    pc_init(&fake);
    FUZZ_ASSERT(fusion_init(&fake, 1) == (FUSION_ARMED_PLAN | FUSION_ARMED_AUTO));
    for (int i = 0; i < NQ; i++) {
        fake_queues[i].refs = 1;
        fake_queues[i].out_of_order = i == NQ - 1;
        fusion_queue_created((cl_command_queue)&fake_queues[i]);
    }
    return 0;
}

static void command(int qi, const char *what, cl_uint nw, const cl_event *wl, cl_event *ev)
{
    struct fusion_waits w;
    fusion_before_command((cl_command_queue)&fake_queues[qi], nw, wl, &w, what);
    f_marker((cl_command_queue)&fake_queues[qi], w.n, w.list, ev);
    fusion_after_command(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *src = "__kernel void ka(long a, long b) {} __kernel void kb(long a, long b) {}"
                      " __kernel void kc(long a, long b) {}";
    /* A refused fusion puts its sequence in a back-off: every input starts
     * with all of them holdable. */
    memset(fb()->backoff, 0, fb_plan_nseqs() * sizeof *fb()->backoff);
    cl_int rc;
    cl_program prog = pc_create_with_source((cl_context)&fake_ctx, 1, &src, NULL, &rc);
    cl_kernel k[NK];
    uint64_t app_args[NK][NARGS];
    for (int i = 0; i < NK; i++) {
        k[i] = pc_create_kernel(prog, kernel_names[i], &rc);
        fusion_kernels_created(&k[i], 1);
        for (cl_uint a = 0; a < NARGS; a++) {
            app_args[i][a] = a;
            FUZZ_ASSERT(fusion_set_arg(k[i], a, sizeof app_args[i][a], &app_args[i][a]) == CL_SUCCESS);
        }
    }
    cl_event ev[MAX_EVENTS];
    int nev = 0;
    memset(driver_nruns, 0, sizeof driver_nruns);
    memset(app_nruns, 0, sizeof app_nruns);
    for (size_t i = 0; i + 1 < size; i += 2) {
        int op = data[i] % 10, x = data[i + 1];
        int qi = x % NQ, ki = (x / NQ) % NK;
        cl_event *slot = (x & 0x40) && nev < MAX_EVENTS ? &ev[nev] : NULL;
        cl_event wait = (x & 0x80) && nev ? ev[x % nev] : NULL;
        switch (op) {
        case 0: case 1: case 2: case 3: { /* a kernel */
            size_t gws = 64;
            if (app_nruns[qi] >= MAX_RUNS) break;
            FUZZ_ASSERT(fusion_enqueue_kernel((cl_command_queue)&fake_queues[qi], k[ki], 1, NULL, &gws, NULL,
                                              wait != NULL, wait ? &wait : NULL, slot, 0) == CL_SUCCESS);
            struct app_run *r = &app_runs[qi][app_nruns[qi]++];
            r->which = ki;
            memcpy(r->args, app_args[ki], sizeof r->args);
            if (slot) nev++;
            break;
        }
        case 4: { /* clSetKernelArg between enqueues */
            cl_uint a = (cl_uint)(x >> 7);
            app_args[ki][a] = (uint64_t)x * 7 + 3;
            FUZZ_ASSERT(fusion_set_arg(k[ki], a, sizeof app_args[ki][a], &app_args[ki][a]) == CL_SUCCESS);
            break;
        }
        case 5: /* a marker (any other command), maybe waiting on an event */
            command(qi, "marker", wait != NULL, wait ? &wait : NULL, slot);
            if (slot) nev++;
            break;
        case 6: /* clFlush or clFinish */
            command(qi, x & 1 ? "clFlush" : "clFinish", 0, NULL, NULL);
            break;
        case 7: /* clWaitForEvents or a status query on an event */
            if (!wait) break;
            if (x & 1) {
                command(qi, "clWaitForEvents", 1, &wait, NULL);
            } else {
                cl_int status;
                FUZZ_ASSERT(fusion_get_event_info(wait, CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status,
                                                  NULL) == CL_SUCCESS);
            }
            break;
        case 8: /* release a kernel (maybe held) and create it again */
            fusion_release_kernel(k[ki]);
            pc_release_kernel(k[ki]);
            k[ki] = pc_create_kernel(prog, kernel_names[ki], &rc);
            fusion_kernels_created(&k[ki], 1);
            for (cl_uint a = 0; a < NARGS; a++) FUZZ_ASSERT(fusion_set_arg(k[ki], a, sizeof app_args[ki][a], &app_args[ki][a]) == CL_SUCCESS);
            break;
        default: /* release the newest event (the application is done with it) */
            if (nev) {
                fusion_release_event(ev[nev - 1]); /* clReleaseEvent's whole path */
                nev--;
            }
        }
    }
    for (int qi = 0; qi < NQ; qi++) command(qi, "clFinish", 0, NULL, NULL);
    for (int qi = 0; qi < NQ; qi++) {
        FUZZ_ASSERT(driver_nruns[qi] == app_nruns[qi]);
        for (int r = 0; r < app_nruns[qi]; r++) {
            FUZZ_ASSERT(driver_runs[qi][r].which == app_runs[qi][r].which);
            FUZZ_ASSERT(!memcmp(driver_runs[qi][r].args, app_runs[qi][r].args, sizeof app_runs[qi][r].args));
        }
    }
    for (int i = 0; i < nev; i++) {
        cl_int status = 1;
        FUZZ_ASSERT(fusion_get_event_info(ev[i], CL_EVENT_COMMAND_EXECUTION_STATUS, sizeof status, &status, NULL) ==
                    CL_SUCCESS);
        FUZZ_ASSERT(status == CL_COMPLETE);
        fusion_release_event(ev[i]);
    }
    for (int i = 0; i < NK; i++) {
        fusion_release_kernel(k[i]);
        pc_release_kernel(k[i]);
    }
    pc_release_program(prog);
    return 0;
}
