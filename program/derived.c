/* derived.c — programs clshim derives itself (fused kernels), through the cache.
 *
 * Fusion's programs have no app handle and no record: keyed by the caller's
 * key material, made by its make() on a miss, their metadata stored beside
 * the binary (program/origin.h).
 */
#include "program/program_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "program/capture_proc.h"

/* The device-independent half of a derived program (origin.h). */
static int derived_any_key(struct key_buf *k, const void *key, size_t key_len)
{
    if (!config_get()->cache) return -1;
    key_begin(k, KEY_FUSION, "");
    key_add_text(k, "device", "any");
    key_add_blob(k, "derived-any-device", key, key_len);
    return 0;
}

/* The marker of pc_derived_any(): written once per process that stores a
 * derived program or half (best effort, as every record). */
static void present_key(struct key_buf *k)
{
    key_begin(k, KEY_FUSION, "");
    key_add_text(k, "device", "any");
    key_add_text(k, "derived-present", "1");
}

static void note_present(void)
{
    static int noted;
    if (__atomic_exchange_n(&noted, 1, __ATOMIC_RELAXED) || !config_get()->cache) return;
    struct key_buf k;
    present_key(&k);
    pipeline_record_put(&k, "1", 1, KEY_FUSION, "any device", 0);
    key_free(&k);
}

int pc_derived_any(void)
{
    if (!config_get()->cache) return 0;
    struct key_buf k;
    void *v = NULL;
    size_t n = 0;
    present_key(&k);
    int rc = pipeline_record_get(&k, &v, &n);
    key_free(&k);
    free(v);
    return rc == 0;
}

int pc_derived_get(const void *key, size_t key_len, void **value, size_t *size)
{
    struct key_buf k;
    *value = NULL;
    *size = 0;
    if (derived_any_key(&k, key, key_len) != 0) return -1;
    int rc = pipeline_record_get(&k, value, size);
    key_free(&k);
    return rc;
}

void pc_derived_put(const void *key, size_t key_len, const void *value, size_t size, uint64_t make_ns)
{
    struct key_buf k;
    if (derived_any_key(&k, key, key_len) != 0) return;
    pipeline_record_put(&k, value, size, KEY_FUSION, "any device", make_ns);
    key_free(&k);
    note_present();
}

/* A refused derived program (origin.h): its key on that device. */
static int refusal_key(struct key_buf *k, const char *identity, const char *options, const void *key, size_t key_len,
                       const char *by)
{
    if (!config_get()->cache || !identity) return -1;
    key_begin(k, KEY_FUSION, options);
    key_add_text(k, "device", identity);
    key_add_text(k, "refused-by", by);
    key_add_blob(k, "derived-refused", key, key_len);
    return 0;
}

static int derived_refusal_key(struct key_buf *k, cl_device_id dev, const char *options, const void *key,
                               size_t key_len, const char *by)
{
    const struct device_info *info = config_get()->cache ? device_info(pc_real, dev) : NULL;
    return refusal_key(k, info ? info->identity : NULL, options, key, key_len, by);
}

int pc_derived_refusal_get(cl_device_id dev, const char *options, const void *key, size_t key_len, const char *by,
                           char **reason, int *permanent)
{
    struct key_buf k;
    void *v = NULL;
    size_t n = 0;
    *reason = NULL;
    if (derived_refusal_key(&k, dev, options, key, key_len, by) != 0) return -1;
    int rc = pipeline_record_get(&k, &v, &n);
    key_free(&k);
    if (rc != 0) return -1;
    /* A flag byte, then the reason (not NUL-terminated). */
    if (n < 2 || !(*reason = malloc(n))) {
        free(v);
        return -1;
    }
    *permanent = ((const unsigned char *)v)[0] == 1;
    memcpy(*reason, (const char *)v + 1, n - 1);
    (*reason)[n - 1] = 0;
    free(v);
    return 0;
}

static void refusal_put(struct key_buf *k, const char *device, const char *reason, int permanent)
{
    size_t len = strlen(reason);
    unsigned char *v = len ? malloc(len + 1) : NULL;
    if (v) {
        v[0] = permanent ? 1 : 0;
        memcpy(v + 1, reason, len);
        pipeline_record_put(k, v, len + 1, KEY_FUSION, device, 0);
    }
    key_free(k);
    free(v);
}

void pc_derived_refusal_put(cl_device_id dev, const char *options, const void *key, size_t key_len, const char *by,
                            const char *reason, int permanent)
{
    struct key_buf k;
    if (derived_refusal_key(&k, dev, options, key, key_len, by) == 0)
        refusal_put(&k, device_info(pc_real, dev)->name, reason, permanent);
}

void pc_derived_refusal_put_for(const char *identity, const char *device, const char *options, const void *key,
                                size_t key_len, const char *by, const char *reason, int permanent)
{
    struct key_buf k;
    if (refusal_key(&k, identity, options, key, key_len, by) == 0) refusal_put(&k, device, reason, permanent);
}

/* ---- history (origin.h) ---- */

#define HISTORY_MAGIC 0x31747368u /* "hst1" */
#define HISTORY_SIZE 24           /* the magic, then the five fields, each u32 little-endian */

static int history_key(struct key_buf *k, cl_device_id dev, const char *options, const void *key, size_t key_len)
{
    const struct device_info *info = config_get()->cache ? device_info(pc_real, dev) : NULL;
    if (!info || !info->identity) return -1;
    key_begin(k, KEY_FUSION, options);
    /* The identity's digest, not its kilobytes: the record is read on the
     * application's thread when a sequence is learned (program/origin.h). */
    key_add_blob(k, "device-digest", info->identity_digest, sizeof info->identity_digest);
    key_add_blob(k, "derived-history", key, key_len);
    return 0;
}

static void put_le32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int pc_derived_history_get(cl_device_id dev, const char *options, const void *key, size_t key_len,
                           struct pc_derived_history *h)
{
    struct key_buf k;
    void *v = NULL;
    size_t n = 0;
    if (history_key(&k, dev, options, key, key_len) != 0) return -1;
    int rc = pipeline_record_get(&k, &v, &n);
    key_free(&k);
    const unsigned char *p = v;
    if (rc == 0 && (n != HISTORY_SIZE || get_le32(p) != HISTORY_MAGIC)) rc = -1; /* another version's, or damaged */
    if (rc == 0)
        *h = (struct pc_derived_history){get_le32(p + 4), get_le32(p + 8), get_le32(p + 12), get_le32(p + 16),
                                         (int32_t)get_le32(p + 20)};
    free(v);
    return rc;
}

void pc_derived_history_put(cl_device_id dev, const char *options, const void *key, size_t key_len,
                            const struct pc_derived_history *h)
{
    struct key_buf k;
    unsigned char v[HISTORY_SIZE];
    if (history_key(&k, dev, options, key, key_len) != 0) return;
    put_le32(v, HISTORY_MAGIC);
    put_le32(v + 4, h->runs);
    put_le32(v + 8, h->occurrences);
    put_le32(v + 12, h->load_us);
    put_le32(v + 16, h->loads);
    put_le32(v + 20, (uint32_t)h->gain_ns);
    pipeline_record_put(&k, v, sizeof v, KEY_FUSION, device_info(pc_real, dev)->name, 0);
    key_free(&k);
}

/* A derived program's cached value: the caller's metadata, then the binary
 * (8-byte metadata length first). */
static void *derived_value(const void *meta, size_t meta_size, const void *bin, size_t size, size_t *total)
{
    *total = 8 + meta_size + size;
    unsigned char *value = malloc(*total);
    if (!value) return NULL;
    uint64_t m = meta_size;
    memcpy(value, &m, 8);
    memcpy(value + 8, meta, meta_size);
    memcpy(value + 8 + meta_size, bin, size);
    return value;
}

/* A hit: the program from the cached value, its metadata to *meta. */
static cl_program derived_from_hit(cl_context ctx, cl_device_id dev, const char *options,
                                   const struct pipeline_flight *fl, void **meta, size_t *meta_size, cl_int *err)
{
    size_t total = 0;
    const unsigned char *value = pipeline_binary(fl, &total);
    uint64_t m = 0;
    *err = CL_INVALID_BINARY;
    if (!value || total < 8) return NULL;
    memcpy(&m, value, 8);
    if (m > total - 8 || !(*meta = malloc(m ? m : 1))) return NULL;
    const unsigned char *bin = value + 8 + m;
    size_t bin_size = total - 8 - m;
    memcpy(*meta, value + 8, m);
    *meta_size = m;
    cl_program p = pc_real->clCreateProgramWithBinary(ctx, 1, &dev, &bin_size, &bin, NULL, err);
    if (p && (*err = pc_real->clBuildProgram(p, 1, &dev, options, NULL, NULL)) != CL_SUCCESS) {
        pc_real->clReleaseProgram(p);
        p = NULL;
    }
    if (!p) {
        free(*meta);
        *meta = NULL;
        *meta_size = 0;
    }
    return p;
}

/* A derived program being made: make() and what it returned. */
struct derived_job {
    cl_device_id dev;
    pc_make_fn make;
    void *arg;
    void **meta;         /* the caller's: a hit's or a build's metadata */
    size_t *meta_size;
    void *m;             /* make()'s metadata (freed by the caller) */
    size_t m_size;
    struct cache_hash hash; /* for the log line when not cached */
};

static cl_program derived_hit(struct run *r, cl_int *err)
{
    struct derived_job *j = r->arg;
    return derived_from_hit(r->ctx, j->dev, r->options, r->fl, j->meta, j->meta_size, err);
}

/* Miss: make the bitcode (or OpenCL C), build it. make() may refuse:
 * nothing was built then, nothing failed to build, nothing is stored. */
static cl_program derived_make(struct run *r, cl_int *err)
{
    struct derived_job *j = r->arg;
    void *bc = NULL;
    size_t bc_size = 0;
    int made = j->make(j->arg, &bc, &bc_size, &j->m, &j->m_size);
    r->nothing_built = made != 0 && made != 1;
    if (r->nothing_built) {
        *err = CL_BUILD_PROGRAM_FAILURE;
        return NULL;
    }
    const unsigned char *bin = bc;
    const char *text = bc;
    cl_program p = made == 1 ? pc_real->clCreateProgramWithSource(r->ctx, 1, &text, &bc_size, err) /* OpenCL C */
                             : pc_real->clCreateProgramWithBinary(r->ctx, 1, &j->dev, &bc_size, &bin, NULL, err);
    free(bc);
    if (p && (*err = pc_real->clBuildProgram(p, 1, &j->dev, r->options, NULL, NULL)) != CL_SUCCESS) {
        pc_real->clReleaseProgram(p);
        p = NULL;
    }
    return p;
}

/* The caller gets a copy of make()'s metadata with the program. */
static cl_program derived_finish(struct run *r, cl_program p, cl_int *err)
{
    struct derived_job *j = r->arg;
    if (p && !(*j->meta = malloc(j->m_size ? j->m_size : 1))) {
        pc_real->clReleaseProgram(p);
        *err = CL_OUT_OF_HOST_MEMORY;
        return NULL;
    }
    if (p) {
        memcpy(*j->meta, j->m, j->m_size);
        *j->meta_size = j->m_size;
    }
    return p;
}

/* Stored now (a late capture would have to wait for a release the fusion
 * layer only makes at exit): the metadata, then the binary. */
static void *derived_stored(struct run *r, const void *bin, size_t size, size_t *total)
{
    const struct derived_job *j = r->arg;
    note_present();
    return derived_value(j->m, j->m_size, bin, size, total);
}

static void derived_uncached(struct run *r, const struct pipeline_clock *clk)
{
    const struct derived_job *j = r->arg;
    char hex[33];
    key_hash_hex(j->hash, hex);
    hex[16] = 0;
    log_msg(LOG_INFO, "derived program %s made and built in %.1f ms (CLSHIM_CACHE=0: not cached)", hex,
            clk->wall_ns / 1e6);
}

static const struct run_kind derived_kind = {
    .no_program = CL_SUCCESS,
    .from_hits = derived_hit,
    .driver = derived_make,
    .finish = derived_finish,
    .value = derived_stored,
    .uncached = derived_uncached,
};

/* The derived program's key on the device: 0, or -1 with *errcode_ret
 * set (out of memory, an unknown device). */
static int derived_key(struct key_buf *k, const struct device_info *info, const char *options, const void *key,
                       size_t key_len, cl_int *errcode_ret)
{
    key_begin(k, KEY_FUSION, options);
    key_add_text(k, "device", info ? info->identity : "");
    key_add_blob(k, "derived", key, key_len);
    if (!k->oom && info) return 0;
    key_free(k);
    if (errcode_ret) *errcode_ret = info ? CL_OUT_OF_HOST_MEMORY : CL_INVALID_DEVICE;
    return -1;
}

cl_program pc_build_derived(cl_context ctx, cl_device_id dev, const char *options, const void *key, size_t key_len,
                            pc_make_fn make, void *arg, void **meta, size_t *meta_size, cl_int *errcode_ret)
{
    *meta = NULL;
    *meta_size = 0;
    const struct device_info *info = device_info(pc_real, dev);
    struct key_buf k;
    if (derived_key(&k, info, options, key, key_len, errcode_ret) != 0) return NULL;
    need_exit_handler();
    struct pipeline_flight fl = {.device = info->name, .kind = KEY_FUSION};
    struct pc_dev want = {.dev = dev};
    struct derived_job j = {.dev = dev, .make = make, .arg = arg, .meta = meta, .meta_size = meta_size,
                            .hash = key_hash(k.data, k.len)};
    int cached = 0;
    if (config_get()->cache && !stands_aside(info)) cached = pipeline_key(&fl, &k, NULL, NULL, NULL, 0, NULL) == 0;
    else key_free(&k);
    struct run r = {.kind = &derived_kind, .fl = &fl, .devs = &want, .n = 1, .cached = cached, .ctx = ctx,
                    .devlist = &dev, .options = options, .arg = &j};
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    cl_program p = run_pipeline(&r, &err);
    free(j.m);
    pipeline_flight_free(&fl);
    if (errcode_ret) *errcode_ret = p ? CL_SUCCESS : err;
    return p;
}

/* ---- made by the capture helper (origin.h) ------------------------------------------------ */

/* A miss of a look: nothing is made here (the helper makes it). */
static cl_program derived_not_here(struct run *r, cl_int *err)
{
    r->nothing_built = 1;
    *err = CL_BUILD_PROGRAM_FAILURE;
    return NULL;
}

static const struct run_kind derived_look_kind = {
    .no_program = CL_SUCCESS,
    .begin_flags = PIPELINE_NO_CLAIM,
    .from_hits = derived_hit,
    .driver = derived_not_here,
};

/* Whether the capture helper can make derived programs for `info`: as for
 * a late capture (late_capture.c hand_to_helper), a driver whose own code
 * cache the helper's process shares, and a writable persistent cache. */
static int helper_serves(const struct device_info *info)
{
    const struct clshim_config *cfg = config_get();
    return info && info->shared_codegen_cache && cfg->cache && cfg->capture_process && !cfg->cache_readonly &&
           !stands_aside(info) && !capture_proc_gave_up() && pipeline_store();
}

/* Hands the job over: 0, or -1 when the helper cannot take it. */
static int hand_job(const struct device_info *info, const char *options, const struct key_buf *k, const void *job,
                    size_t job_len)
{
    char *cwd = getcwd(NULL, 0); /* a kernel's relative -I directories are the application's */
    struct capture_request rq = {.identity = info->identity, .device = info->name, .kind = KEY_FUSION,
                                 .options = options, .source = "", .key = k->data, .key_len = k->len,
                                 .log = "", .cwd = cwd ? cwd : "/", .snapshot = "", .parts = job,
                                 .parts_len = job_len};
    /* With the capture worker, the helper's start and the job's hand-off
     * wait for its turn (pc_hand_queued_later): a short run never has a
     * process started beside it. */
    int later = config_get()->capture_background;
    int rc = later ? capture_proc_queue(&rq) : capture_proc_send(&rq);
    free(cwd);
    if (rc == 0 && later) pc_hand_queued_later();
    if (rc < 0) return -1;
    if (rc == 0) pipeline_count_handed();
    return 0;
}

/* A look (derived_look_kind) under k, which it takes: the program, or NULL
 * with *cached 1 when the key could be looked up. */
static cl_program derived_look(cl_context ctx, cl_device_id dev, const struct device_info *info, const char *options,
                               struct key_buf *k, void **meta, size_t *meta_size, int *cached)
{
    need_exit_handler();
    struct pipeline_flight fl = {.device = info->name, .kind = KEY_FUSION};
    struct pc_dev want = {.dev = dev};
    struct derived_job j = {.dev = dev, .meta = meta, .meta_size = meta_size, .hash = key_hash(k->data, k->len)};
    *cached = pipeline_key(&fl, k, NULL, NULL, NULL, 0, NULL) == 0;
    struct run r = {.kind = &derived_look_kind, .fl = &fl, .devs = &want, .n = 1, .cached = *cached, .ctx = ctx,
                    .devlist = &dev, .options = options, .arg = &j};
    cl_int err = CL_OUT_OF_HOST_MEMORY;
    cl_program p = *cached ? run_pipeline(&r, &err) : NULL;
    pipeline_flight_free(&fl);
    return p;
}

cl_program pc_derived_lookup(cl_context ctx, cl_device_id dev, const char *options, const void *key, size_t key_len,
                             void **meta, size_t *meta_size)
{
    *meta = NULL;
    *meta_size = 0;
    const struct device_info *info = device_info(pc_real, dev);
    struct key_buf k;
    int cached;
    if (!config_get()->cache || stands_aside(info) || derived_key(&k, info, options, key, key_len, NULL) != 0)
        return NULL;
    return derived_look(ctx, dev, info, options, &k, meta, meta_size, &cached);
}

cl_program pc_derived_by_helper(cl_context ctx, cl_device_id dev, const char *options, const void *key,
                                size_t key_len, const void *job, size_t job_len, void **meta, size_t *meta_size,
                                enum pc_helper_state *state)
{
    *meta = NULL;
    *meta_size = 0;
    *state = PC_HELPER_NONE;
    const struct device_info *info = device_info(pc_real, dev);
    if (!helper_serves(info)) return NULL;
    struct key_buf k;
    if (derived_key(&k, info, options, key, key_len, NULL) != 0) return NULL;
    capture_proc_poll(keep_reply_in_memory); /* its answers to the in-process tier */
    uint64_t compile_ns, first_use_ns;
    int hurried, cached;
    if (capture_proc_owed(k.data, k.len, &compile_ns, &first_use_ns, &hurried)) {
        key_free(&k);
        *state = PC_HELPER_PENDING;
        return NULL;
    }
    struct key_buf sent = {0};
    if (job) key_append(&sent, k.data, k.len); /* the look takes k */
    cl_program p = derived_look(ctx, dev, info, options, &k, meta, meta_size, &cached);
    if (!p && cached)
        *state = !job ? PC_HELPER_LOST
                 : !sent.oom && hand_job(info, options, &sent, job, job_len) == 0 ? PC_HELPER_PENDING
                                                                                   : PC_HELPER_NONE;
    key_free(&sent);
    return p;
}
