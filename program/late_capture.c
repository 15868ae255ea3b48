/* late_capture.c — the pending late captures and the capture itself.
 *
 * PoCL's binary grows at first use, so a program built here is stored after
 * use: it waits on the pending list until a synchronisation after one of
 * its kernels ran, its release, or exit; then the background worker
 * (program/capture.h), the capture helper (program/capture_proc.h) or the
 * calling thread reads and stores it.
 */
#include "program/program_int.h"

#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "program/capture.h"
#include "program/capture_proc.h"
#include "cache/snapshot.h"

static int hand_to_helper(struct pc_program *rec);
static int capture_wanted(const struct pc_program *rec);

int pc_pending_captures;
static struct pc_program **pending;
static size_t npending, pending_cap;
pthread_mutex_t pc_pending_lock = PTHREAD_MUTEX_INITIALIZER;

/* Called without rec->lock held (sync points take pc_pending_lock, then it). */
void add_pending(struct pc_program *rec)
{
    (void)CLSHIM_ASSERT_NOT_HELD(&rec->lock);
    pthread_mutex_lock(&pc_pending_lock);
    if (!rec->pending) {
        if (npending == pending_cap) {
            size_t cap = pending_cap ? pending_cap * 2 : 16;
            struct pc_program **np = realloc(pending, cap * sizeof *np);
            if (np) {
                pending = np;
                pending_cap = cap;
            }
        }
        if (npending < pending_cap) {
            pending[npending++] = rec;
            rec->pending = 1;
        }
    }
    __atomic_store_n(&pc_pending_captures, npending > 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&pc_pending_lock);
    if (config_get()->capture_background) capture_prepare();
}

/* The child of fork() forgets the parent's pending captures (it never
 * stores the parent's programs). Single-threaded there: the lock is
 * reinitialised, as another thread may have held it at the fork. */
void pending_captures_reset(void)
{
    pc_pending_lock = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
    for (size_t i = 0; i < npending; i++) pending[i]->pending = 0;
    npending = 0;
    __atomic_store_n(&pc_pending_captures, 0, __ATOMIC_RELAXED);
}

/* pc_pending_lock held. */
static void remove_pending_locked(struct pc_program *rec)
{
    (void)CLSHIM_ASSERT_HELD(&pc_pending_lock);
    for (size_t i = 0; i < npending; i++)
        if (pending[i] == rec) {
            pending[i] = pending[--npending];
            break;
        }
    rec->pending = 0;
    __atomic_store_n(&pc_pending_captures, npending > 0, __ATOMIC_RELAXED);
}

void remove_pending(struct pc_program *rec)
{
    if (!__atomic_load_n(&rec->pending, __ATOMIC_RELAXED)) return;
    pthread_mutex_lock(&pc_pending_lock);
    remove_pending_locked(rec);
    pthread_mutex_unlock(&pc_pending_lock);
}

/* The background capture (program/capture.h).
 * A queued record holds a driver reference on its handle, so the program
 * outlives an app release; a record released by the app meanwhile
 * ("orphaned") is freed by the worker when its capture is done. */

/* The worker's item that sends capture_proc's queued requests
 * (capture_proc_queue()) at its turn, rather than a program record. */
static char queued_requests_item;

void pc_hand_queued_later(void)
{
    if (capture_submit(&queued_requests_item) != 0) (void)capture_proc_send_queued(); /* no worker: now */
}

void run_capture(void *item)
{
    if (item == &queued_requests_item) {
        (void)capture_proc_send_queued();
        return;
    }
    struct pc_program *rec = item;
    pthread_mutex_lock(&rec->lock);
    capture(rec);
    pthread_mutex_unlock(&rec->lock);
}

void capture_done(void *item)
{
    if (item == &queued_requests_item) return;
    struct pc_program *rec = item;
    cl_program handle = rec->handle; /* rec may be freed by the app once unqueued */
    pthread_mutex_lock(&pc_pending_lock);
    rec->queued = 0;
    int orphaned = rec->orphaned;
    pthread_mutex_unlock(&pc_pending_lock);
    pc_real->clReleaseProgram(handle);
    if (orphaned) {
        set_effective(rec, NULL);
        free_record(rec);
    }
}

/* With pc_pending_lock held: 0 when the worker took rec (or has it already). */
static int queue_capture_locked(struct pc_program *rec)
{
    (void)CLSHIM_ASSERT_HELD(&pc_pending_lock);
    if (rec->queued) return 0;
    int background = config_get()->capture_background;
    pthread_mutex_lock(&rec->lock);
    /* Nothing owed: nothing to queue. With the worker even the hand-off to
     * the helper is the worker's, once the application is idle or exits
     * (capture() tries the helper first): started here, at the first
     * synchronisation, the helper (a posix_spawn, its start, the request,
     * the claim it takes over) cost a 30-chain run on PoCL a millisecond
     * in its first chain and its start beside the next ones (0.64x plain
     * at 64 Ki floats; 0.99x with the hand-off the worker's). */
    /* The first use's code generation is behind us: what it cost is measured now, not at the later hand-off. */
    if (!rec->synced_cpu_ns) rec->synced_cpu_ns = process_cpu_ns();
    int handed = !capture_wanted(rec) || (!background && hand_to_helper(rec) == 0);
    pthread_mutex_unlock(&rec->lock);
    if (handed) {
        remove_pending_locked(rec);
        return 0;
    }
    if (!background) return -1;
    if (pc_real->clRetainProgram(rec->handle) != CL_SUCCESS) return -1;
    rec->queued = 1;
    if (capture_submit(rec) == 0) {
        remove_pending_locked(rec);
        return 0;
    }
    rec->queued = 0;
    pc_real->clReleaseProgram(rec->handle);
    return -1;
}

pthread_mutex_t pc_ran_names_lock = PTHREAD_MUTEX_INITIALIZER;

static int ran_name_known(const struct pc_program *rec, uint64_t h)
{
    (void)CLSHIM_ASSERT_HELD(&pc_ran_names_lock);
    for (size_t i = 0; i < rec->nran_names; i++)
        if (rec->ran_names[i] == h) return 1;
    return 0;
}

void pc_note_enqueue(cl_kernel kernel)
{
    struct pc_kernel_rec *kr = kernel_record(kernel);
    if (!kr) return;
    struct pc_program *rec = kernel_program(kr);
    __atomic_store_n(&rec->ran, 1, __ATOMIC_RELAXED);
    /* Once per kernel object: its name joins the program's ran names. */
    if (__atomic_load_n(&kr->ran, __ATOMIC_RELAXED) || __atomic_exchange_n(&kr->ran, 1, __ATOMIC_RELAXED)) return;
    uint64_t h = XXH64(kr->name, strlen(kr->name), 0);
    pthread_mutex_lock(&pc_ran_names_lock);
    if (!ran_name_known(rec, h)) {
        if (rec->nran_names == rec->ran_names_cap) {
            size_t cap = rec->ran_names_cap ? 2 * rec->ran_names_cap : 8;
            uint64_t *p = realloc(rec->ran_names, cap * sizeof *p);
            if (p) rec->ran_names = p, rec->ran_names_cap = cap;
        }
        if (rec->nran_names < rec->ran_names_cap) rec->ran_names[rec->nran_names++] = h;
    }
    pthread_mutex_unlock(&pc_ran_names_lock);
}

/* Whether every kernel of the built program ran in this process since its
 * build: reading its binary here then generates code only for kernels the
 * application itself made the driver generate. */
static int every_kernel_ran(struct pc_program *rec, cl_program built)
{
    size_t n = 0, len = 0;
    if (pc_real->clGetProgramInfo(built, CL_PROGRAM_NUM_KERNELS, sizeof n, &n, NULL) != CL_SUCCESS || !n ||
        pc_real->clGetProgramInfo(built, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &len) != CL_SUCCESS || !len)
        return 0;
    char *names = malloc(len);
    if (!names || pc_real->clGetProgramInfo(built, CL_PROGRAM_KERNEL_NAMES, len, names, NULL) != CL_SUCCESS) {
        free(names);
        return 0;
    }
    names[len - 1] = 0;
    int all = 1;
    size_t seen = 0;
    pthread_mutex_lock(&pc_ran_names_lock);
    for (char *name = names, *end; all && *name; name = end + (*end != 0)) {
        end = name + strcspn(name, ";");
        all = ran_name_known(rec, XXH64(name, (size_t)(end - name), 0));
        seen++;
    }
    pthread_mutex_unlock(&pc_ran_names_lock);
    free(names);
    return all && seen == n;
}

void pc_sync_point(void)
{
    /* Capture under pc_pending_lock: a record cannot be freed meanwhile (its
     * last release removes it from this list first, under the same lock). */
    int ran = 0;
    pthread_mutex_lock(&pc_pending_lock);
    for (size_t i = 0; i < npending;) {
        struct pc_program *rec = pending[i];
        if (!__atomic_load_n(&rec->ran, __ATOMIC_RELAXED)) {
            i++;
            continue;
        }
        ran = 1;
        remove_pending_locked(rec);
        if (queue_capture_locked(rec) == 0) continue;
        pthread_mutex_lock(&rec->lock);
        capture(rec);
        pthread_mutex_unlock(&rec->lock);
    }
    int still_owed = npending > 0;
    pthread_mutex_unlock(&pc_pending_lock);
    /* A first run generated code: the exit handler goes after its state. */
    if (ran && still_owed) arm_owed_capture_at_exit();
}

/* Whether this build's binary is stored later (see CLSHIM_CAPTURE). */
int capture_late(const struct pc_program *rec)
{
    const char *policy = config_get()->capture;
    if (!strcmp(policy, "build")) return 0;
    /* "release" and "auto" (the configuration accepts no other word):
     * late on every driver. PoCL's binary grows at first use; elsewhere
     * the read right after the build was on the application's way: on
     * NVIDIA the first launch of a program whose binary had just been read
     * took 100 us longer (1,494 against 1,394 us, 25 shuffled rounds of
     * 30-chain runs with an empty cache: 0.975x plain against 1.016x). */
    (void)rec;
    return 1;
}

/* The capture helper stored a binary it was handed: the in-process tier
 * keeps its bytes (a program released and built again is a memory hit). */
void keep_reply_in_memory(const struct capture_reply *r)
{
    pipeline_keep_stored(r->hash, r->binary, r->size, r->log, r->compile_ns);
}

/* Whether capture() has anything to do (rec->lock held). */
static int capture_wanted(const struct pc_program *rec)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    int any = 0;
    for (size_t i = 0; i < rec->ndevs; i++)
        any |= (rec->devs[i].needs_capture && rec->flights[i].key) || (rec->devs[i].attached && !rec->handed_off);
    return any;
}

/* Hands the captures rec still owes to the capture helper
 * (program/capture_proc.h; rec->lock held): 0 when none is owed here any
 * more, -1 when the caller captures (not a program built from source here,
 * a device whose code cache other processes do not share, no helper, its
 * queue full). The in-process tier keeps only the attached program then:
 * reading its bytes is the very code generation the helper saves. */
static int hand_to_helper(struct pc_program *rec)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    const struct clshim_config *cfg = config_get();
    if (!cfg->capture_process || !rec->source_build || cfg->cache_readonly || !pipeline_store())
        return -1;
    int owed = 0;
    if (!rec->driver_options || !rec->cwd) return -1;
    for (size_t i = 0; i < rec->ndevs; i++) {
        if (!rec->devs[i].needs_capture || !rec->flights[i].key) continue;
        const struct device_info *info = device_info(pc_real, rec->devs[i].dev);
        if (!info || !info->shared_codegen_cache) return -1;
        owed = 1;
    }
    if (!owed) return -1;
    cl_program built = rec->effective ? rec->effective : rec->handle;
    /* Built a third time before the helper answered (the second build
     * asked it to hurry), every kernel of it run here, and cheap to read:
     * read here, so that its next builds in this process are memory hits
     * whatever the helper's pace (at nice 19 beside busy cores it may get
     * no CPU for seconds). Cheap: the read generates the code of every
     * kernel again, which costs about twice their first use did
     * (measured: 49-54 ms against 26-33 ms), and that must be at most what
     * compiling the program cost; a program whose code generation
     * outweighs its compile (PyOpenCL's scans: 1.4 s against 0.1 s) is left
     * to the helper. Not at the second build: that one is the driver's
     * cache's, as plainly, and the read there made PyOpenCL's
     * test_algorithm.py 1.25x plain (17 reads; 1.05x without them). */
    if (rec->captured_here) return -1;
    for (size_t i = 0; i < rec->ndevs; i++) {
        if (!rec->devs[i].needs_capture || !rec->flights[i].key) continue;
        uint64_t first_compile_ns = 0, first_use_ns = 0;
        int hurried = 0;
        if (!capture_proc_owed(rec->flights[i].key, rec->flights[i].key_len, &first_compile_ns, &first_use_ns,
                               &hurried))
            continue;
        int cheap = 2 * first_use_ns <= first_compile_ns, all_ran = hurried && cheap && every_kernel_ran(rec, built);
        log_msg(LOG_DEBUG, "built again before the helper answered: first build %.1f ms, its first use %.1f ms, "
                           "this build %.1f ms of CPU; %s",
                first_compile_ns / 1e6, first_use_ns / 1e6, rec->flights[i].compile_ns / 1e6,
                !hurried ? "the helper is asked to hurry"
                : !cheap ? "its code generation outweighs its compile"
                : all_ran ? "read here" : "a kernel never ran here");
        if (!all_ran) break;
        /* This build was the driver's cache's; the entry records what
         * compiling the program cost (the hit rule and the savings weigh it). */
        for (size_t j = 0; j < rec->ndevs; j++)
            if (rec->flights[j].compile_ns < first_compile_ns) rec->flights[j].compile_ns = first_compile_ns;
        rec->captured_here = 1;
        if (log_enabled(LOG_INFO)) {
            char hex[33];
            key_hash_hex(rec->flights[i].hash, hex);
            log_msg(LOG_INFO, "capture of %.16s: built again before the capture helper stored it, every kernel "
                              "run: captured here",
                    hex);
        }
        return -1;
    }
    for (size_t i = 0; i < rec->ndevs; i++) {
        struct pc_dev *d = &rec->devs[i];
        struct pipeline_flight *f = &rec->flights[i];
        if (!d->needs_capture || !f->key) continue;
        char why[600];
        uint64_t first_use = (rec->synced_cpu_ns ? rec->synced_cpu_ns : process_cpu_ns()) - rec->built_cpu_ns;
        if (pipeline_over_cost(f->key, f->key_len, capture_budget_ns(f->compile_ns, first_use), why, sizeof why)) {
            /* An earlier capture of this key ran out of its budget: none
             * again (here it would cost the application that CPU). */
            char hex[33];
            key_hash_hex(f->hash, hex);
            log_msg(LOG_INFO, "not capturing %.16s: an earlier capture was refused: %s", hex, why);
            pipeline_count_capture_lost(CAPTURE_LOST_COST, 1);
            d->needs_capture = 0;
            pipeline_let_go(f);
            continue;
        }
        char *log = read_build_log(built, d->dev);
        struct key_buf snap = {0};
        snapshot_encode(f->snap, &snap);
        struct capture_request rq = {.identity = device_info(pc_real, d->dev)->identity, .device = f->device,
                                     .kind = rec->kind, .options = rec->driver_options,
                                     .source = built_input(rec), .source_len = rec->input_len, .key = f->key,
                                     .key_len = f->key_len, .compile_ns = f->compile_ns,
                                     .first_use_ns = first_use, .log = log,
                                     .cwd = rec->cwd, .snapshot = snap.data, .snapshot_len = snap.len,
                                     .refresh = d->refresh};
        int rc = snap.oom ? -1 : capture_proc_send(&rq);
        key_free(&snap);
        free(log);
        if (rc < 0) return -1;
        /* 1: built again before the helper answered; the helper, asked to
         * hurry, answers with the bytes (capture_proc.h says why they are
         * not read here). */
        if (rc == 0) pipeline_count_handed();
        d->needs_capture = 0;
        /* The helper takes the claim over: processes that want the key
         * wait for its store (bounded: CLSHIM_BUILD_WAIT_MS), not compile.
         * A refresh has no claim: the entry is there meanwhile. */
        if (rc == 0 && !d->refresh) pipeline_pass_claim(f);
        else pipeline_let_go(f);
        d->refresh = 0;
        if (log_enabled(LOG_INFO)) {
            char hex[33];
            key_hash_hex(f->hash, hex);
            log_msg(LOG_INFO, rc == 0 ? "capture of %.16s handed to the capture helper"
                                      : "capture of %.16s: built again before the capture helper stored it: "
                                        "the helper captures it now",
                    hex);
        }
    }
    rec->handed_off = 1;
    return 0;
}

/* Reads the built binaries and hands those still owed to the pipeline
 * (stored when they changed since the build). rec->lock held. */
void capture(struct pc_program *rec)
{
    (void)CLSHIM_ASSERT_HELD(&rec->lock);
    if (!capture_wanted(rec) || hand_to_helper(rec) == 0) return;
    store *st = pipeline_store();
    cl_program built = rec->effective ? rec->effective : rec->handle;
    void **bins = calloc(rec->ndevs, sizeof *bins);
    size_t *sizes = calloc(rec->ndevs, sizeof *sizes);
    /* Reading makes PoCL generate and link the code (ld, a child): timed
     * with its children, as a build is (pipeline_clock). */
    struct pipeline_clock clk;
    pipeline_clock_start(&clk);
    int read = bins && sizes && read_binaries(built, rec->ndevs, rec->devs, bins, sizes) == 0;
    pipeline_clock_stop(&clk);
    log_msg(LOG_DEBUG, "capture: read the binaries here in %.1f ms of CPU", clk.cpu_ns / 1e6);
    if (read) {
        uint64_t read_cpu = clk.cpu_ns / rec->ndevs;
        for (size_t i = 0; i < rec->ndevs; i++) {
            struct pc_dev *d = &rec->devs[i];
            struct pipeline_flight *f = &rec->flights[i];
            if (d->attached) pipeline_keep_bytes(f->hash, bins[i], sizes[i]);
            if (!st || !d->needs_capture || !f->key || sizes[i] == f->stored_size) continue;
            char *log = read_build_log(built, d->dev);
            if (pipeline_store_late(f, bins[i], sizes[i], log, read_cpu) && d->refresh)
                pipeline_note_provisional(f->key, f->key_len, 0);
            free(log);
            d->needs_capture = d->refresh = 0;
        }
    }
    /* Stored or not, waiting processes have nothing more to wait for. */
    for (size_t i = 0; i < rec->ndevs; i++) pipeline_let_go(&rec->flights[i]);
    for (size_t i = 0; bins && i < rec->ndevs; i++) free(bins[i]);
    free(bins);
    free(sizes);
}

/* At exit: the programs whose binaries are still owed (built here, and
 * neither run and synchronised nor released: a GEGL-like app builds its
 * largest program and exits without a synchronisation) are captured now,
 * on the worker, within CLSHIM_CAPTURE_EXIT_BUDGET (issue 16); what the
 * budget does not cover is given up, in one line. Inline (no worker) the
 * captures stop at the same deadline. */
void capture_owed_at_exit(unsigned budget_ms)
{
    pthread_mutex_lock(&pc_pending_lock);
    size_t owed = npending, queued = 0, skipped = 0;
    if (!owed || !pipeline_store() || config_get()->cache_readonly) {
        /* Nothing to store into: the miss lines said "not stored". */
        pthread_mutex_unlock(&pc_pending_lock);
        return;
    }
    if (!budget_ms) {
        pthread_mutex_unlock(&pc_pending_lock);
        pipeline_count_capture_lost(CAPTURE_LOST_EXIT, owed);
        log_msg(LOG_INFO, "%zu program%s built here not used or released before exit: not stored "
                          "(CLSHIM_CAPTURE_EXIT_BUDGET=0)", owed, owed == 1 ? "" : "s");
        return;
    }
    uint64_t t0 = now_ns(), deadline = t0 + (uint64_t)budget_ms * 1000000u;
    while (npending) {
        struct pc_program *rec = pending[0];
        if (queue_capture_locked(rec) == 0) {
            queued++;
            continue;
        }
        remove_pending_locked(rec);
        if (now_ns() >= deadline) {
            skipped++;
            continue;
        }
        pthread_mutex_lock(&rec->lock);
        capture(rec);
        pthread_mutex_unlock(&rec->lock);
    }
    pthread_mutex_unlock(&pc_pending_lock);
    uint64_t left_ms = (now_ns() - t0) / 1000000u;
    size_t dropped = capture_exit(left_ms < budget_ms ? budget_ms - (unsigned)left_ms : 0);
    size_t given_up = skipped + (dropped < queued ? dropped : queued);
    pipeline_count_capture_lost(CAPTURE_LOST_EXIT, given_up);
    if (given_up)
        log_msg(LOG_INFO, "%zu of %zu program%s not used or released before exit: not stored, the exit budget "
                          "(CLSHIM_CAPTURE_EXIT_BUDGET=%u ms) spent", given_up, owed, owed == 1 ? "" : "s",
                budget_ms);
    else
        log_msg(LOG_INFO, "%zu program%s not used or released before exit: captured at exit in %.0f ms", owed,
                owed == 1 ? "" : "s", (now_ns() - t0) / 1e6);
}
