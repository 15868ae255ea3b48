/* flaunch.c — turning a queue's held kernels into one fused launch.
 *
 * 1. Argument classes: equal buffers (the same cl_mem) and equal scalars
 *    (same size and bytes) share a class, so the fuser gives them one
 *    parameter; every local-memory argument is a class of its own.
 *    Sub-buffers, images, SVM arguments and buffers over overlapping host
 *    memory (CL_MEM_USE_HOST_PTR) are refused: distinct classes must never
 *    alias (compiler/llvm_api.h).
 * 2. Key material: a format tag, the plan options (FB_* flags), and per kernel its
 *    program's origin hash (kind, options, input bytes), name, ND-range,
 *    and argument classes and kinds. Scalar values and buffers are not in
 *    it: they are the fused kernel's arguments — except with the `const`
 *    option (FB_CONST), which bakes the scalars (arguments the driver's
 *    argument info calls values) into the fused kernel: their bytes follow,
 *    so other values make another program. At most CONST_PROGRAMS such
 *    programs per sequence (the same key without the values); past that the
 *    sequence is fused without the option (one line), so a loop passing a
 *    new value each time compiles a bounded number of programs.
 * 3. The fused program: first the queue's last one, then this process's
 *    memo (key material, context, device), then pc_build_derived, which
 *    serves it from the persistent cache without calling make() — so a
 *    second run of the application loads no LLVM and compiles nothing — or
 *    calls make(): each distinct program to SPIR bitcode (source through
 *    frontend_compile_source, IL through spirv_to_spir), then fuse(). The
 *    metadata stored beside the binary is the parameter mapping and the
 *    fused ND-range (format below). Before any of it, the held kernels'
 *    ND-ranges are checked by the fuser's own rules (compiler/fuse_ranges.h):
 *    what they refuse costs no compile. A failed request is remembered in
 *    the memo and never built again in this process; one refused by its
 *    key (the analysis, or the driver's build of the fused program) also
 *    in the cache, under the device's identity (pc_derived_refusal_put), so
 *    no process builds it again on that driver.
 *    Route (b) (FB_SOURCE: CLSHIM_FUSE_ROUTE, or auto on a device without
 *    cl_khr_spir): the same analysis, but the program made is generated
 *    OpenCL C (fusion/fuse_source.h), built by the driver from source with
 *    the kernels' own build options; argument classes then ignore the
 *    driver's argument info, and which fused parameters are buffers (for
 *    the aliasing checks) comes from the analysis, stored in the metadata.
 *    Route (a) (FB_PTX, chosen by fusion/froute.h on NVIDIA): the fused
 *    SPIR module lowered to PTX, created as a binary; argument classes and
 *    buffers as for route (b), the key material with route (a)'s key part.
 *    Its PTX and metadata are also stored apart from the device under the
 *    key material and the compute capability, so a machine without LLVM
 *    builds it from an imported cache. A route (a) refusal is remembered
 *    (ptx_refused) and route (b) tried instead where froute.h allows.
 * 4. The launch: arguments from the held snapshots through the mapping, the
 *    union of the held wait lists without the held commands' own events,
 *    one clEnqueueNDRangeKernel; every held event then completes from its
 *    event.
 */
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/device.h"
#include "cache/key.h"
#include "common/clang.h"
#include "common/config.h"
#include "program/origin.h"
#include "common/error.h"
#include "common/log.h"
#include "common/profile.h"
#include "fusion/batch.h"
#include "fusion/batch_int.h"
#include "fusion/fhistory.h"
#include "fusion/froute.h"
#include "fusion/frontend.h"
#include "compiler/fuse_ranges.h"
#include "fusion/fuse_source.h"
#include "compiler/llvmload.h"

#define FUSED_NAME "clshim_fused"
#define META_MAGIC 0x46534c43u /* "CLSF" */
#define META_VERSION 1u
#define META_VERSION_NAMED 2u /* routes (a), (b); then: per parameter a buffer byte, the kernel name's length and bytes */

/* Arguments of all held kernels together up to which the launch path uses
 * stack arrays (no allocation while a warm sequence is fused). */
#define STACK_ARGS 128

/* Fused programs with baked scalars (FB_CONST) per sequence before the
 * option is dropped for it. */
#define CONST_PROGRAMS 8

struct fb_memo {
    pthread_mutex_t lock;  /* the fused kernel's arguments, set then enqueued */
    cl_context ctx;
    cl_device_id dev;
    unsigned char *key;
    size_t key_len;
    char *reason;          /* non-NULL: this request failed; never retried */
    int ptx_refused;       /* ... because route (a) refused it (fr_fallback may try route (b)) */
    int permanent;         /* ... for a cause no other request of these kernels escapes (FB_REFUSED_ALWAYS) */
    cl_program prog;
    cl_kernel kernel;
    uint32_t nparams;
    uint32_t *pk, *pi;     /* fused parameter -> (held kernel, its parameter) */
    uint8_t *is_buf;       /* routes (a), (b): per fused parameter, 1 for a buffer (else NULL) */
    char name[32];         /* the fused kernel's name */
    struct fk_arg *set;    /* the arguments the fused kernel holds now (skip setting equal ones) ... */
    int set_gen;           /* ... valid while fb()->mem_gen has this value (a handle may be reused) */
    const struct fb_repeat *set_by; /* the queue's launch record whose arguments the kernel */
    uint64_t set_serial;            /* holds, at this serial of it (args_known); NULL: none known */
    uint32_t dim;
    size_t gws[3], lws[3], off[3];
    int made_here;         /* made (compiled) by this process, not loaded from the cache */
    struct fb_memo *next;
};

static struct fb_memo *memos;
static pthread_mutex_t memo_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- key material --------------------------------------------------------------- */

/* A growing byte string. Key material starts in `inl` (no allocation on
 * the launch path of a warm sequence); memo_build takes a heap copy. */
struct bytes {
    unsigned char *p;
    size_t len, cap;
    int oom;
    unsigned char inl[1024];
};

static void bytes_init(struct bytes *b)
{
    b->p = b->inl;
    b->len = 0;
    b->cap = sizeof b->inl;
    b->oom = 0;
}

static void bytes_free(struct bytes *b)
{
    if (b->p != b->inl) free(b->p);
    b->p = NULL;
}

static void put(struct bytes *b, const void *v, size_t n)
{
    if (b->oom) return;
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 512;
        while (cap < b->len + n) cap *= 2;
        unsigned char *p = b->p == b->inl ? malloc(cap) : realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        if (b->p == b->inl) memcpy(p, b->inl, b->len);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, v, n);
    b->len += n;
}
static void put32(struct bytes *b, uint32_t v) { put(b, &v, 4); }
static void put64(struct bytes *b, uint64_t v) { put(b, &v, 8); }

/* ---- argument classes ------------------------------------------------------------ */

struct span {
    uintptr_t lo, hi;
};

/* Checks a buffer that becomes a class of its own: 0, or -1 with `why`
 * (-2: an image or pipe, which its kernel always takes there). */
static int check_mem(cl_mem m, struct span *spans, size_t *nspans, char *why, size_t why_len)
{
    const struct cl_api *r = fb()->real;
    cl_mem_object_type type = 0;
    cl_mem parent = NULL;
    cl_mem_flags flags = 0;
    if (r->clGetMemObjectInfo(m, CL_MEM_TYPE, sizeof type, &type, NULL) != CL_SUCCESS ||
        r->clGetMemObjectInfo(m, CL_MEM_ASSOCIATED_MEMOBJECT, sizeof parent, &parent, NULL) != CL_SUCCESS ||
        r->clGetMemObjectInfo(m, CL_MEM_FLAGS, sizeof flags, &flags, NULL) != CL_SUCCESS)
        return snprintf(why, why_len, "cannot query a buffer argument"), -1;
    if (type != CL_MEM_OBJECT_BUFFER) return snprintf(why, why_len, "image or pipe arguments"), -2; /* always */
    if (parent) return snprintf(why, why_len, "sub-buffer arguments (they may alias)"), -1;
    if (flags & CL_MEM_USE_HOST_PTR) {
        void *host = NULL;
        size_t size = 0;
        if (r->clGetMemObjectInfo(m, CL_MEM_HOST_PTR, sizeof host, &host, NULL) != CL_SUCCESS ||
            r->clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof size, &size, NULL) != CL_SUCCESS)
            return snprintf(why, why_len, "cannot query a buffer argument"), -1;
        struct span s = {(uintptr_t)host, (uintptr_t)host + size};
        for (size_t i = 0; i < *nspans; i++)
            if (s.lo < spans[i].hi && spans[i].lo < s.hi)
                return snprintf(why, why_len, "buffers over overlapping host memory"), -1;
        spans[(*nspans)++] = s;
    }
    return 0;
}

/* Fills cls (one per argument of every held kernel, in order), then checks
 * the distinct buffers for aliasing — skipped when they are the buffers the
 * queue's last fusion checked and none has been released since (a released
 * handle could come back as a different buffer). 0, or check_mem's -1/-2. */
static int check_buffers(struct fq *q, cl_mem *mems, uint32_t nmems, char *why, size_t why_len);

/* `analysed` (route (b)): the driver's argument info is not used; equal
 * bytes make one class whatever the argument is, and the buffers are
 * checked later, once the analysis has said which parameters are buffers. */
static int make_classes(struct fq *q, uint32_t *cls, int analysed, char *why, size_t why_len)
{
    size_t total = 0;
    for (uint32_t i = 0; i < q->nheld; i++) total += q->held[i].nargs;
    const struct fk_arg *seen_buf[STACK_ARGS];
    cl_mem mems_buf[STACK_ARGS];
    const struct fk_arg **seen = total <= STACK_ARGS ? seen_buf : malloc(total * sizeof *seen);
    cl_mem *mems = total <= STACK_ARGS ? mems_buf : malloc(total * sizeof *mems);
    size_t at = 0;
    uint32_t next = 0, nmems = 0;
    int rc = 0;
    if (!seen || !mems) {
        snprintf(why, why_len, "out of memory");
        rc = -1;
    }
    for (uint32_t i = 0; i < q->nheld && !rc; i++)
        for (cl_uint j = 0; j < q->held[i].nargs && !rc; j++, at++) {
            const struct fk_arg *a = &q->held[i].args[j];
            seen[at] = a;
            if (a->kind == FK_LOCAL) {
                cls[at] = next++;
                continue;
            }
            if (a->kind != FK_VALUE) {
                snprintf(why, why_len, "kernel '%s' has SVM arguments", q->held[i].rec->name);
                rc = -1;
                break;
            }
            if (!analysed && a->mem == 2 && a->size == sizeof(cl_mem)) {
                snprintf(why, why_len, "kernel '%s': argument info unavailable", q->held[i].rec->name);
                rc = -1;
                break;
            }
            size_t k;
            for (k = 0; k < at; k++)
                if (seen[k]->kind == FK_VALUE && (analysed || seen[k]->mem == a->mem) && fk_arg_equal(seen[k], a))
                    break;
            if (k < at) {
                cls[at] = cls[k];
                continue;
            }
            cls[at] = next++;
            cl_mem m = NULL;
            if (!analysed && a->mem && a->size == sizeof m) memcpy(&m, a->v.inl, sizeof m);
            if (m) mems[nmems++] = m;
        }
    if (!rc && !analysed) rc = check_buffers(q, mems, nmems, why, why_len);
    if (mems != mems_buf) free(mems);
    if (seen != seen_buf) free(seen);
    return rc;
}

/* Checks the distinct buffers `mems` of a fusion for aliasing, unless they
 * are the ones q's last fusion checked and none was released since. */
static int check_buffers(struct fq *q, cl_mem *mems, uint32_t nmems, char *why, size_t why_len)
{
    int rc = 0;
    int gen = __atomic_load_n(&fb()->mem_gen, __ATOMIC_ACQUIRE);
    if (q->checked && q->checked_gen == gen && q->nchecked == nmems && !memcmp(q->checked, mems, nmems * sizeof *mems))
        return 0;
    struct span *spans = malloc((nmems ? nmems : 1) * sizeof *spans);
    size_t nspans = 0;
    if (!spans) {
        snprintf(why, why_len, "out of memory");
        rc = -1;
    }
    for (uint32_t i = 0; i < nmems && !rc; i++) rc = check_mem(mems[i], spans, &nspans, why, why_len);
    free(spans);
    free(q->checked);
    q->checked = NULL;
    q->nchecked = 0;
    if (!rc && nmems && (q->checked = malloc(nmems * sizeof *q->checked))) {
        memcpy(q->checked, mems, nmems * sizeof *mems);
        q->nchecked = nmems;
        q->checked_gen = gen;
    }
    return rc;
}

/* Route (b): the buffers among the fused kernel's arguments, as the analysis
 * found them (e->is_buf), checked like those of make_classes. */
static int check_analysed_buffers(struct fq *q, const struct fb_memo *e, char *why, size_t why_len)
{
    cl_mem buf[STACK_ARGS];
    cl_mem *mems = e->nparams <= STACK_ARGS ? buf : malloc(e->nparams * sizeof *mems);
    if (!mems) return snprintf(why, why_len, "out of memory"), -1;
    uint32_t n = 0;
    for (uint32_t p = 0; p < e->nparams; p++) {
        const struct fk_arg *a = &q->held[e->pk[p]].args[e->pi[p]];
        if (!e->is_buf[p]) continue;
        if (a->kind != FK_VALUE || a->size != sizeof(cl_mem)) {
            snprintf(why, why_len, "a buffer parameter of the fused kernel has no buffer argument");
            if (mems != buf) free(mems);
            return -1;
        }
        cl_mem m;
        memcpy(&m, a->v.inl, sizeof m);
        if (m) mems[n++] = m;
    }
    int rc = check_buffers(q, mems, n, why, why_len);
    if (mems != buf) free(mems);
    return rc;
}

/* Whether the `const` option bakes argument a (a value by the argument info). */
static int bakeable(const struct fk_arg *a)
{
    return a->kind == FK_VALUE && a->mem == 0;
}

/* FB_CONST: the values baked in, after the rest of the key material. */
static void key_values(const struct fq *q, struct bytes *b)
{
    for (uint32_t i = 0; i < q->nheld; i++)
        for (cl_uint j = 0; j < q->held[i].nargs; j++) {
            const struct fk_arg *a = &q->held[i].args[j];
            if (!bakeable(a)) continue;
            put32(b, a->size);
            put(b, FK_BYTES(a), a->size);
        }
}

/* The build options of the fused program (shared_options) are not in it:
 * they follow from the kernels' options, which their origin hashes cover.
 * The tag changes with the fuser's output (3: grid-stride loops merged;
 * 4: the flags word holds FB_INTERNAL; 5: internal='s list follows it;
 * 6: the kernels' own __local variables are renamed after the fused kernel,
 * so programs fused before, whose work-groups shared them, are not reused).
 * Which buffers `internal` keeps in registers follows from the kernels, the
 * argument classes and the list, all here; the values `const` bakes in
 * follow all of it (key_values). Route (a) (FB_PTX) adds its key part
 * (its version, the built-in policy) after the kernels. */
#define KEY_TAG "clshim-fusion-key 6\n"
/* Who refuses, in the key of a refusal remembered in the cache
 * (pc_derived_refusal_put): bump the number whenever the analysis or the
 * ranges' rules may accept what they refused before, so no remembered
 * refusal outlives the code that made it. */
#define REFUSED_BY "clshim " CLSHIM_VERSION " fuser 2" /* 2: route (b) joins programs */
#define KEY_FLAGS_AT (sizeof KEY_TAG - 1) /* where key_material puts the flags word */

static void key_material(const struct fq *q, int flags, const char *internal_args, const uint32_t *cls,
                         struct bytes *b)
{
    static const char tag[] = KEY_TAG;
    put(b, tag, sizeof tag - 1);
    put32(b, (uint32_t)flags);
    uint32_t il = internal_args ? (uint32_t)strlen(internal_args) : 0;
    put32(b, il);
    put(b, internal_args ? internal_args : "", il);
    put32(b, q->nheld);
    size_t at = 0;
    for (uint32_t i = 0; i < q->nheld; i++) {
        const struct held *h = &q->held[i];
        put(b, h->rec->origin_hash, 16);
        uint32_t nl = (uint32_t)strlen(h->rec->name);
        put32(b, nl);
        put(b, h->rec->name, nl);
        put32(b, h->dim);
        for (int d = 0; d < 3; d++) put64(b, h->gws[d]);
        for (int d = 0; d < 3; d++) put64(b, h->has_lws ? h->lws[d] : 0);
        for (int d = 0; d < 3; d++) put64(b, h->off[d]);
        put32(b, h->nargs);
        for (cl_uint j = 0; j < h->nargs; j++, at++) {
            put32(b, cls[at]);
            unsigned char kind = h->args[j].kind;
            put(b, &kind, 1);
        }
    }
    if (flags & FB_PTX) {
        const char *part = fr_key_part();
        put32(b, (uint32_t)strlen(part));
        put(b, part, strlen(part));
    }
}

/* The options the fused program is built with: the -cl-* options the
 * kernels' programs share (math and denormal flags change the code). */
static char *shared_options(const struct fq *q)
{
    const char *first = NULL;
    for (uint32_t i = 0; i < q->nheld; i++) {
        const char *options = q->held[i].rec->options ? q->held[i].rec->options : "";
        if (!first) first = options;
        else if (strcmp(first, options)) return strdup("");
    }
    char *out = calloc(1, (first ? strlen(first) : 0) + 1);
    if (!out || !first) return out;
    size_t o = 0;
    for (const char *p = first; *p;) {
        while (*p == ' ' || *p == '\t' || *p == '\n') p++;
        const char *s = p;
        while (*p && *p != ' ' && *p != '\t' && *p != '\n') p++;
        if (p - s > 4 && !strncmp(s, "-cl-", 4) && !memchr(s, '"', (size_t)(p - s))) {
            if (o) out[o++] = ' ';
            memcpy(out + o, s, (size_t)(p - s));
            o += (size_t)(p - s);
        }
    }
    out[o] = 0;
    return out;
}

/* Route (b) builds the program's own source again, so with its own build
 * options, all of them; kernels of several programs are joined only where
 * their options agree but for options that change no code (make(),
 * fs_join_options), so the first one's serve. */
static char *source_options(const struct fq *q)
{
    return strdup(q->held[0].rec->options ? q->held[0].rec->options : "");
}

/* ---- make(): bitcode and metadata on a cache miss ------------------------------------- */

struct make_ctx {
    const struct fq *q;
    int flags;
    const char *internal_args; /* internal=LIST, or NULL */
    const uint32_t *cls;
    const unsigned char *key; /* the key material */
    size_t key_len;
    char *why;
    size_t why_len;
    int ptx_refused; /* set by make(): route (a) refused the module */
    int by_key;      /* set by make(): the analysis refused the request (any process would) */
    int permanent;   /* set by make(): refused whatever the request (FB_REFUSED_ALWAYS) */
    const char *options; /* the fused program's build options (route (a) lowers by them) */
    const struct pc_origin *given; /* the held kernels' origins, from a job (fjob.c); NULL: asked of
                                    * the program layer (pc_kernel_origin) */
    int quiet;           /* make_cached logs nothing (cannot_make_here's look) */
    int made;            /* set by make(): the program was made, not loaded (history) */
};

/* The held kernels' names joined by '+' (log lines, the test mode's files). */
static void seq_label(const struct fq *q, char *out, size_t len)
{
    size_t o = 0;
    out[0] = 0;
    for (uint32_t i = 0; i < q->nheld; i++) {
        int w = snprintf(out + o, len - o, "%s%s", i ? "+" : "", q->held[i].rec->name);
        if (w > 0 && o + (size_t)w < len) o += (size_t)w;
    }
}

/* `clshim run --profile` (common/profile.h): a fused launch of the held
 * kernels, timed on the driver's own event. */
static struct profile_api fused_api;
static void fill_fused_api(void)
{
    const struct cl_api *r = fb()->real;
    fused_api = (struct profile_api){r->clGetEventProfilingInfo, r->clRetainEvent, r->clReleaseEvent,
                                     r->clSetEventCallback};
}

static void profile_fused_launch(const struct fq *q, cl_event rev)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, fill_fused_api);
    char label[1024];
    seq_label(q, label, sizeof label);
    profile_fused(label, q->nheld);
    if (rev) profile_launch(&fused_api, rev, label, PROFILE_FUSED, q->q);
    else profile_untimed(label, PROFILE_FUSED);
}

/* The name and ND-range of held kernel h, as the fuser takes them. */
static void fuse_kernel_of(const struct held *h, struct fuse_kernel *k)
{
    k->name = h->rec->name;
    k->work_dim = h->dim;
    for (int d = 0; d < 3; d++) {
        k->global_size[d] = h->gws[d];
        k->local_size[d] = h->has_lws ? h->lws[d] : 0;
        k->global_offset[d] = h->off[d];
    }
}

/* Route (a): the key of the device-independent PTX: the key material and
 * the compute capability. NULL on OOM. */
static unsigned char *ptx_key(const struct make_ctx *m, size_t *len)
{
    uint32_t sm = fr_sm(m->q);
    unsigned char *k = malloc(m->key_len + 4 + sizeof sm);
    if (!k) return NULL;
    memcpy(k, m->key, m->key_len);
    memcpy(k + m->key_len, "/sm=", 4);
    memcpy(k + m->key_len + 4, &sm, sizeof sm);
    *len = m->key_len + 4 + sizeof sm;
    return k;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The device-independent half of a derived program — route (b)'s generated
 * source, route (a)'s PTX — and its metadata, from the cache
 * (pc_derived_get: a value of a u64 metadata length, the metadata, the
 * text). 1 with the outputs set, else 0. */
static int derived_from_cache(const void *key, size_t key_len, void **text, size_t *text_size, void **meta,
                              size_t *meta_size)
{
    void *v = NULL;
    size_t n = 0;
    uint64_t ml = 0;
    if (pc_derived_get(key, key_len, &v, &n) != 0) return 0;
    if (n >= 8) memcpy(&ml, v, 8);
    if (n < 8 || ml > n - 8 || !(*meta = malloc(ml ? ml : 1)) || !(*text = malloc(n - 8 - ml + 1))) {
        free(*meta);
        *meta = NULL;
        free(v);
        return 0;
    }
    memcpy(*meta, (unsigned char *)v + 8, ml);
    memcpy(*text, (unsigned char *)v + 8 + ml, n - 8 - ml);
    *meta_size = ml;
    *text_size = n - 8 - ml;
    free(v);
    return 1;
}

static void derived_to_cache(const void *key, size_t key_len, const void *text, size_t text_size, const void *meta,
                             size_t meta_size, uint64_t make_ns)
{
    unsigned char *v = malloc(8 + meta_size + text_size);
    if (!v) return;
    uint64_t ml = meta_size;
    memcpy(v, &ml, 8);
    memcpy(v + 8, meta, meta_size);
    memcpy(v + 8 + meta_size, text, text_size);
    pc_derived_put(key, key_len, v, 8 + meta_size + text_size, make_ns);
    free(v);
}

#define MAKE_BUILD 2 /* make_cached: not in the cache, to be built */

/* The fused program from the cache, when it stores what a build would
 * make: generated OpenCL C (route (b)), or route (a)'s PTX, whose key is
 * then made into *pkey. make's result (1, 0, or -1 refused), or MAKE_BUILD. */
static int make_cached(struct make_ctx *m, const char *names, unsigned char **pkey, size_t *pkey_len,
                       void **bitcode, size_t *bitcode_size, void **meta, size_t *meta_size)
{
    const struct fq *q = m->q;
    uint32_t n = q->nheld;
    if ((m->flags & FB_SOURCE) && derived_from_cache(m->key, m->key_len, bitcode, bitcode_size, meta, meta_size)) {
        if (!m->quiet)
            log_msg(LOG_INFO, "fusion: the generated OpenCL C for %s..%s (%u kernels) comes from the cache",
                q->held[0].rec->name, q->held[n - 1].rec->name, (unsigned)n);
        return 1;
    }
    if (!(m->flags & FB_PTX)) return MAKE_BUILD;
    if (!fr_takes_ptx(q))
        return snprintf(m->why, m->why_len, "CLSHIM_FUSE_ROUTE=ptx: this device does not load PTX "
                        "(route (a) is for NVIDIA's driver)"), -1;
    if (!(*pkey = ptx_key(m, pkey_len))) return snprintf(m->why, m->why_len, "out of memory"), -1;
    if (!derived_from_cache(*pkey, *pkey_len, bitcode, bitcode_size, meta, meta_size)) return MAKE_BUILD;
    free(*pkey);
    *pkey = NULL;
    if (!m->quiet)
        log_msg(LOG_INFO, "fusion: the PTX (route (a)) for %s..%s (%u kernels) comes from the cache",
            q->held[0].rec->name, q->held[n - 1].rec->name, (unsigned)n);
    if (*bitcode_size && fr_test_refusal(names, *bitcode, *bitcode_size - 1, m->why, m->why_len)) {
        free(*bitcode);
        free(*meta);
        *bitcode = *meta = NULL;
        return -1;
    }
    return 0; /* PTX is the binary NVIDIA's driver takes */
}

/* A build's inputs: the held kernels' programs, each distinct one compiled
 * to IR once (mods), and the kernels as the fusion request names them. */
struct make_mod {
    const void *input;
    size_t input_len;
    const char *options;
    void *bc;
    size_t size;
    int llvm_owned;
};
struct make_inputs {
    struct make_mod *mods;
    struct fuse_kernel *fk;
    struct pc_origin *origins;
    uint32_t *kmod; /* held kernel -> its program in mods */
    uint32_t nmods, norigins;
};

static void inputs_free(struct make_inputs *in, const struct clshim_llvm_api *api)
{
    for (uint32_t j = 0; in->mods && j < in->nmods; j++) {
        if (in->mods[j].llvm_owned) api->free(in->mods[j].bc);
        else free(in->mods[j].bc);
    }
    free(in->mods);
    free(in->kmod);
    free(in->fk);
    for (uint32_t i = 0; i < in->norigins; i++) pc_origin_free(&in->origins[i]);
    free(in->origins);
}

/* Compiles the program of held kernel i to IR unless a kernel before it
 * shares it: in->kmod[i] is then its module. 0, or -1 with m->why set. */
static int input_of(struct make_ctx *m, const struct clshim_llvm_api *api, struct make_inputs *in, uint32_t i)
{
    const struct held *h = &m->q->held[i];
    const struct pc_origin *origin = m->given ? &m->given[i] : &in->origins[i];
    if (!m->given && pc_kernel_origin(h->k, &in->origins[i]) != 0)
        return snprintf(m->why, m->why_len, "the program of '%s' is no longer known", h->rec->name), -1;
    if (!m->given) in->norigins = i + 1;
    const void *input = origin->input;
    size_t len = origin->input_len;
    const char *options = origin->options;
    if ((m->flags & FB_SOURCE) && origin->kind != KEY_SOURCE) {
        m->permanent = 1;
        return snprintf(m->why, m->why_len, "kernel '%s' comes from IL, and this device takes no SPIR "
                        "(generated OpenCL C needs the source)", h->rec->name), -1;
    }
    struct make_mod *mods = in->mods;
    uint32_t j;
    for (j = 0; j < in->nmods; j++)
        if (mods[j].input_len == len && !memcmp(mods[j].input, input, len) && !strcmp(mods[j].options, options))
            break;
    if (j == in->nmods && (m->flags & FB_SOURCE) && in->nmods &&
        fs_join_options(mods[0].options, options, m->why, m->why_len)) {
        /* Joined, one program would be compiled with the other's options. */
        m->by_key = m->permanent = 1;
        return -1;
    }
    if (j == in->nmods) {
        char err[512] = "";
        int e;
        mods[j].input = input;
        mods[j].input_len = len;
        mods[j].options = options;
        if (origin->kind == KEY_SOURCE) {
            e = frontend_compile_source(input, len, options, &mods[j].bc, &mods[j].size, err, sizeof err);
        } else {
            mods[j].llvm_owned = 1;
            /* With the program's specialization constants, as its own build had them. */
            e = api->spirv_to_spir(input, len, h->rec->specs, h->rec->nspecs, &mods[j].bc, &mods[j].size,
                                   err, sizeof err);
        }
        if (e)
            return snprintf(m->why, m->why_len, "%s of '%s' failed: %s", origin->kind == KEY_SOURCE ?
                            "compiling the source" : "translating the IL", h->rec->name, err), -1;
        in->nmods++;
    }
    in->kmod[i] = j;
    return 0;
}

/* Every held kernel's program to IR (input_of), and the request's kernels.
 * 0, or -1 with m->why set. */
static int inputs_load(struct make_ctx *m, const struct clshim_llvm_api *api, struct make_inputs *in)
{
    const struct fq *q = m->q;
    uint32_t n = q->nheld;
    in->mods = calloc(n, sizeof *in->mods);
    in->fk = calloc(n, sizeof *in->fk);
    in->origins = calloc(n, sizeof *in->origins);
    in->kmod = calloc(n, sizeof *in->kmod);
    if (!in->mods || !in->fk || !in->origins || !in->kmod)
        return snprintf(m->why, m->why_len, "out of memory"), -1;
    size_t at = 0;
    for (uint32_t i = 0; i < n; i++) {
        const struct held *h = &q->held[i];
        if (input_of(m, api, in, i) != 0) return -1;
        struct fuse_kernel *k = &in->fk[i];
        fuse_kernel_of(h, k);
        k->module_bc = in->mods[in->kmod[i]].bc;
        k->module_size = in->mods[in->kmod[i]].size;
        k->arg_class = m->cls + at;
        k->num_args = h->nargs;
        at += h->nargs;
    }
    return 0;
}

/* FB_CONST: the scalar arguments baked in, one per class (equal bytes
 * share one), into consts (STACK_ARGS entries); how many. */
static uint32_t consts_of(const struct make_ctx *m, struct fuse_const *consts)
{
    const struct fq *q = m->q;
    uint32_t nconsts = 0;
    size_t at = 0;
    for (uint32_t i = 0; i < q->nheld; i++)
        for (cl_uint j = 0; j < q->held[i].nargs; j++, at++) {
            const struct fk_arg *a = &q->held[i].args[j];
            uint32_t c;
            for (c = 0; c < nconsts && consts[c].arg_class != m->cls[at]; c++) continue;
            if (!bakeable(a) || c < nconsts || nconsts == STACK_ARGS) continue;
            consts[nconsts++] = (struct fuse_const){m->cls[at], a->size, FK_BYTES(a)};
        }
    return nconsts;
}

/* What a build made: the fused IR and its parameters (res), and the
 * program to build: generated OpenCL C (gen, route (b)), PTX (route (a)),
 * or the IR itself. */
struct made {
    struct fuse_result res;
    struct fs_program gen;
    char *ptx;
    size_t ptx_size;
    uint8_t *ptx_is_buf;
};

static void made_free_res(const struct clshim_llvm_api *api, struct made *d)
{
    api->free(d->res.bitcode);
    api->free(d->res.param_kernel);
    api->free(d->res.param_index);
}

/* Fuses the inputs, then lowers or generates the program the route takes.
 * 0, or -1 with m->why (and what kind of refusal) set. */
static int fuse_inputs(struct make_ctx *m, const struct clshim_llvm_api *api, const struct make_inputs *in,
                       const char *names, struct made *d)
{
    struct fuse_const consts[STACK_ARGS];
    uint32_t nconsts = m->flags & FB_CONST ? consts_of(m, consts) : 0;
    struct fuse_request req = {in->fk, m->q->nheld, FUSED_NAME, m->flags & FB_FORCE_BARRIER,
                               (m->flags & FB_INTERNAL) != 0, consts, nconsts,
                               (m->flags & FB_INTERNAL) ? m->internal_args : NULL};
    int e;
    if (!(m->flags & FB_SOURCE)) {
        e = api->fuse(&req, &d->res);
        if (e) snprintf(m->why, m->why_len, "%s", d->res.reason[0] ? d->res.reason : clshim_strerror(e));
    } else {
        struct fs_part *parts = calloc(in->nmods, sizeof *parts);
        if (!parts) return snprintf(m->why, m->why_len, "out of memory"), -1;
        for (uint32_t j = 0; j < in->nmods; j++)
            parts[j] = (struct fs_part){in->mods[j].input, in->mods[j].input_len, in->mods[j].options};
        e = fs_fuse_parts(api, parts, in->nmods, in->kmod, &req, &d->res, &d->gen, m->why, m->why_len);
        free(parts);
        if (!e && (m->flags & FB_INTERNAL))
            log_msg(LOG_INFO, "fusion: %s: internal: stored as without the option: generated OpenCL C "
                    "(route (b)) keeps every buffer", names);
    }
    if (e) {
        m->by_key = e == CLSHIM_EUNSUPPORTED; /* the analysis said no (not memory, not unreadable input) */
        m->permanent |= d->res.permanent;
        return -1;
    }
    if ((m->flags & FB_PTX) &&
        (e = fr_lower(m->q, api, d->res.bitcode, d->res.bitcode_size, FUSED_NAME, d->res.num_params, m->options,
                      &d->ptx, &d->ptx_size, &d->ptx_is_buf, m->why, m->why_len))) {
        m->ptx_refused = e == CLSHIM_EUNSUPPORTED;
        made_free_res(api, d);
        return -1;
    }
    return 0;
}

/* The metadata of what was made (*b) and the program to build (*bc, its
 * size in d->res.bitcode_size); frees d. 0, or -1 on OOM. */
static int pack_made(struct make_ctx *m, const struct clshim_llvm_api *api, struct made *d, struct bytes *b,
                     void **bc)
{
    struct fuse_result *res = &d->res;
    put32(b, META_MAGIC);
    put32(b, d->gen.text || d->ptx ? META_VERSION_NAMED : META_VERSION);
    put32(b, res->num_params);
    put32(b, res->work_dim);
    for (int i = 0; i < 3; i++) put64(b, res->global_size[i]);
    for (int i = 0; i < 3; i++) put64(b, res->local_size[i]);
    for (int i = 0; i < 3; i++) put64(b, res->global_offset[i]);
    put32(b, (uint32_t)res->barrier_inserted);
    put(b, res->param_kernel, res->num_params * sizeof(uint32_t));
    put(b, res->param_index, res->num_params * sizeof(uint32_t));
    if (d->gen.text) { /* the program made is the generated source */
        put(b, d->gen.is_buf, res->num_params);
        put32(b, (uint32_t)strlen(d->gen.name));
        put(b, d->gen.name, strlen(d->gen.name));
        *bc = d->gen.text;
        res->bitcode_size = d->gen.len;
        d->gen.text = NULL;
        fs_program_free(&d->gen);
    } else if (d->ptx) { /* the program made is route (a)'s PTX */
        put(b, d->ptx_is_buf, res->num_params);
        put32(b, (uint32_t)strlen(FUSED_NAME));
        put(b, FUSED_NAME, strlen(FUSED_NAME));
        *bc = d->ptx;
        res->bitcode_size = d->ptx_size;
        free(d->ptx_is_buf);
    } else {
        *bc = malloc(res->bitcode_size ? res->bitcode_size : 1);
        if (*bc) memcpy(*bc, res->bitcode, res->bitcode_size);
    }
    made_free_res(api, d);
    if (b->oom || !*bc) {
        free(b->p);
        free(*bc);
        return snprintf(m->why, m->why_len, "out of memory"), -1;
    }
    return 0;
}

/* The info lines about what the build did to the kernels. */
static void log_made(const struct make_ctx *m, const struct fuse_result *res, const char *names)
{
    if (res->barrier_inserted) log_msg(LOG_INFO, "fusion: %s: barrier inserted (forced): %s", names, res->reason);
    if (m->flags & FB_INTERNAL) {
        uint32_t in_registers = res->internalised - res->internalised_local;
        if (in_registers)
            log_msg(LOG_INFO, "fusion: %s: internal: %u buffer%s kept in registers (%s)", names,
                    (unsigned)in_registers, in_registers == 1 ? "" : "s", res->internal_done);
        if (res->internalised_local)
            log_msg(LOG_INFO, "fusion: %s: internal: %u buffer%s kept in local memory (%s)", names,
                    (unsigned)res->internalised_local, res->internalised_local == 1 ? "" : "s",
                    res->internal_local);
        if (res->internal_kept[0])
            log_msg(LOG_INFO, "fusion: %s: internal: stored as without the option: %s", names, res->internal_kept);
    }
    if (m->flags & FB_CONST)
        log_msg(LOG_INFO, "fusion: %s: const: %u scalar argument%s baked in", names, (unsigned)res->consts_baked,
                res->consts_baked == 1 ? "" : "s");
    if (res->loops_merged)
        log_msg(LOG_INFO, "fusion: %s: %u grid-stride loop%s merged into the first", names,
                (unsigned)res->loops_merged, res->loops_merged == 1 ? "" : "s");
}

/* Builds the fused program from the loaded inputs: fused, packed, logged,
 * and stored in the cache where the route's result is derived (route (b)'s
 * OpenCL C, route (a)'s PTX). make's result. */
static int make_built(struct make_ctx *m, const struct clshim_llvm_api *api, const struct make_inputs *in,
                      const char *names, const unsigned char *pkey, size_t pkey_len, uint64_t t0, void **bitcode,
                      size_t *bitcode_size, void **meta, size_t *meta_size)
{
    struct made d;
    memset(&d, 0, sizeof d);
    struct bytes b = {0};
    void *bc = NULL;
    if (fuse_inputs(m, api, in, names, &d) != 0 || pack_made(m, api, &d, &b, &bc) != 0) return -1;
    log_made(m, &d.res, names);
    *bitcode = bc;
    *bitcode_size = d.res.bitcode_size;
    *meta = b.p;
    *meta_size = b.len;
    int rc = m->flags & FB_SOURCE ? 1 : 0; /* 1: *bitcode is OpenCL C (pc_build_derived) */
    if (rc == 1) derived_to_cache(m->key, m->key_len, bc, *bitcode_size, b.p, b.len, now_ns() - t0);
    if (m->flags & FB_PTX) {
        derived_to_cache(pkey, pkey_len, bc, *bitcode_size, b.p, b.len, now_ns() - t0);
        if (fr_test_refusal(names, bc, *bitcode_size - 1, m->why, m->why_len)) {
            free(bc);
            free(b.p);
            *bitcode = *meta = NULL;
            rc = -1;
        }
    }
    return rc;
}

/* Whether a held kernel was built from source (clang compiles it to IR). */
static int needs_clang(const struct fq *q)
{
    for (uint32_t i = 0; i < q->nheld; i++)
        if (!q->held[i].rec->from_il) return 1;
    return 0;
}

static int no_clang(struct make_ctx *m)
{
    m->permanent = 1;
    return snprintf(m->why, m->why_len, "%s is not installed (CLSHIM_CLANG): fusing kernels built from source "
                    "needs it", clang_name()), -1;
}

/* Whether make() would refuse for want of clang: a kernel built from
 * source, no clang, and no device-independent half in the cache to build
 * from. Then no build is started nor a claim written (two write
 * transactions per process for nothing, on a GPU machine without clang);
 * the cache may still hold the program for the device. 1 with m->why. */
static int cannot_make_here(struct make_ctx *m)
{
    if (!needs_clang(m->q) || clang_available()) return 0;
    char names[512];
    seq_label(m->q, names, sizeof names);
    unsigned char *pkey = NULL;
    size_t pkey_len = 0, bc_size = 0, meta_size = 0;
    void *bc = NULL, *meta = NULL;
    m->quiet = 1;
    int rc = make_cached(m, names, &pkey, &pkey_len, &bc, &bc_size, &meta, &meta_size);
    m->quiet = 0;
    free(pkey);
    free(bc);
    free(meta);
    m->why[0] = 0;
    if (rc != MAKE_BUILD) return 0; /* served by the cache, or refused otherwise: make() says it */
    no_clang(m);
    return 1;
}

static int make(void *arg, void **bitcode, size_t *bitcode_size, void **meta, size_t *meta_size)
{
    struct make_ctx *m = arg;
    char names[512];
    m->made = 1;
    seq_label(m->q, names, sizeof names);
    unsigned char *pkey = NULL;
    size_t pkey_len = 0;
    int rc = make_cached(m, names, &pkey, &pkey_len, bitcode, bitcode_size, meta, meta_size);
    if (rc != MAKE_BUILD) return rc;
    /* A kernel built from source is compiled to IR by clang: without it,
     * refused before LLVM is loaded (tens of ms of the application's,
     * for nothing, on a GPU machine without clang). */
    if (needs_clang(m->q) && !clang_available()) {
        free(pkey);
        return no_clang(m);
    }
    uint64_t t0 = now_ns();
    const struct clshim_llvm_api *api = llvm_api();
    if (!api) {
        free(pkey);
        m->permanent = 1; /* this process will not load it later */
        return snprintf(m->why, m->why_len, "libclshim-llvm.so cannot be loaded"), -1;
    }
    struct make_inputs in = {0};
    rc = -1;
    if (inputs_load(m, api, &in) == 0) {
        uint32_t nmods = in.nmods;
        log_msg(LOG_INFO, "fusion: building the fused kernel for %s (%u program%s to IR%s)", names,
                (unsigned)nmods, nmods == 1 ? "" : "s", m->flags & FB_SOURCE ? ", then generated OpenCL C" :
                m->flags & FB_PTX ? ", then PTX (route (a))" : "");
        rc = make_built(m, api, &in, names, pkey, pkey_len, t0, bitcode, bitcode_size, meta, meta_size);
    }
    free(pkey);
    inputs_free(&in, api);
    return rc;
}

/* Reads metadata into the memo, checking it against the held kernels. */
static int read_meta(struct fb_memo *e, const struct fq *q, const unsigned char *p, size_t len)
{
    uint32_t head[4];
    if (len < 16 + 9 * 8 + 4) return -1;
    memcpy(head, p, 16);
    int source = head[1] == META_VERSION_NAMED;
    if (head[0] != META_MAGIC || (head[1] != META_VERSION && !source) || head[3] < 1 || head[3] > 3) return -1;
    uint32_t np = head[2];
    size_t need = 16 + 9 * 8 + 4 + (size_t)np * 8;
    if (np > 65536 || len < need) return -1;
    snprintf(e->name, sizeof e->name, "%s", FUSED_NAME);
    if (source) {
        uint32_t nl;
        if (len < need + np + 4) return -1;
        memcpy(&nl, p + need + np, 4);
        if (nl == 0 || nl >= sizeof e->name || len != need + np + 4 + nl) return -1;
        if (!(e->is_buf = malloc(np ? np : 1))) return -1;
        memcpy(e->is_buf, p + need, np);
        memcpy(e->name, p + need + np + 4, nl);
        e->name[nl] = 0;
    } else if (len != need) {
        return -1;
    }
    uint64_t v[9];
    memcpy(v, p + 16, sizeof v);
    e->nparams = np;
    e->dim = head[3];
    for (int d = 0; d < 3; d++) {
        e->gws[d] = (size_t)v[d];
        e->lws[d] = (size_t)v[3 + d];
        e->off[d] = (size_t)v[6 + d];
    }
    e->pk = malloc((np ? np : 1) * sizeof *e->pk);
    e->pi = malloc((np ? np : 1) * sizeof *e->pi);
    if (!e->pk || !e->pi) return -1;
    memcpy(e->pk, p + 16 + 72 + 4, np * 4u);
    memcpy(e->pi, p + 16 + 72 + 4 + np * 4u, np * 4u);
    for (uint32_t i = 0; i < np; i++)
        if (e->pk[i] >= q->nheld || e->pi[i] >= q->held[e->pk[i]].nargs) return -1;
    return 0;
}

/* ---- the memo --------------------------------------------------------------------------- */

static int memo_matches(const struct fb_memo *e, const struct fq *q, const struct bytes *key)
{
    return e->ctx == q->ctx && e->dev == q->dev && e->key_len == key->len && !memcmp(e->key, key->p, key->len);
}

static struct fb_memo *memo_find(const struct fq *q, const struct bytes *key)
{
    pthread_mutex_lock(&memo_lock);
    struct fb_memo *e = memos;
    while (e && !memo_matches(e, q, key)) e = e->next;
    pthread_mutex_unlock(&memo_lock);
    return e;
}

/* The memo entries of q's context and device whose key starts with the
 * first base_len bytes of `key` and is longer (FB_CONST: the programs with
 * baked values of one sequence). */
static unsigned memo_count_prefix(const struct fq *q, const struct bytes *key, size_t base_len)
{
    unsigned count = 0;
    pthread_mutex_lock(&memo_lock);
    for (const struct fb_memo *e = memos; e; e = e->next)
        count += e->ctx == q->ctx && e->dev == q->dev && e->key_len > base_len && !memcmp(e->key, key->p, base_len);
    pthread_mutex_unlock(&memo_lock);
    return count;
}

static void memo_drop(struct fb_memo *e)
{
    fk_free_args(e->set, e->nparams);
    if (e->kernel) fb()->real->clReleaseKernel(e->kernel);
    if (e->prog) fb()->real->clReleaseProgram(e->prog);
    free(e->key);
    free(e->reason);
    free(e->pk);
    free(e->pi);
    free(e->is_buf);
    pthread_mutex_destroy(&e->lock);
    free(e);
}

/* What memo_build starts from when the capture helper had the job
 * (memo_by_helper): the program it made (prog, with its metadata, both
 * taken over), or none (lost: why not). NULL: the program is made here. */
struct memo_from {
    cl_program prog;
    void *meta;
    size_t meta_size;
    const char *lost;
};

/* Builds the entry for `key` (success or remembered failure); NULL on OOM. */
static struct fb_memo *memo_build(const struct fq *q, int flags, const char *internal_args, const uint32_t *cls,
                                  const struct bytes *key, const char *options, const struct memo_from *from)
{
    struct fb_memo *e = calloc(1, sizeof *e);
    if (!e) {
        if (from && from->prog) fb()->real->clReleaseProgram(from->prog);
        if (from) free(from->meta);
        return NULL;
    }
    pthread_mutex_init(&e->lock, NULL);
    e->ctx = q->ctx;
    e->dev = q->dev;
    if (!(e->key = malloc(key->len ? key->len : 1))) {
        if (from && from->prog) fb()->real->clReleaseProgram(from->prog);
        if (from) free(from->meta);
        pthread_mutex_destroy(&e->lock);
        free(e);
        return NULL;
    }
    memcpy(e->key, key->p, key->len);
    e->key_len = key->len;
    char why[600] = "";
    struct make_ctx mc = {q, flags, internal_args, cls, e->key, e->key_len, why, sizeof why, 0, 0, 0, options, NULL, 0, 0};
    void *meta = NULL;
    size_t meta_size = 0;
    cl_int err = CL_SUCCESS;
    char *remembered = NULL;
    if (from && from->prog) {
        e->prog = from->prog;
        meta = from->meta;
        meta_size = from->meta_size;
    }
    if (e->prog) {
        /* made by the capture helper: its metadata is read below */
    } else if (pc_derived_refusal_get(q->dev, options, e->key, e->key_len, REFUSED_BY, &remembered,
                                      &mc.permanent) == 0) {
        /* Refused by an earlier process on this driver (or the helper): not made again. */
        snprintf(why, sizeof why, "%s (remembered from an earlier run)", remembered);
        free(remembered);
    } else if (from) {
        snprintf(why, sizeof why, "%s", from->lost ? from->lost : "the capture helper made no fused program");
    } else if (cannot_make_here(&mc)) {
        /* why says it, unless the cache has the program for this device */
        if ((e->prog = pc_derived_lookup(q->ctx, q->dev, options, e->key, e->key_len, &meta, &meta_size))) {
            why[0] = 0;
            mc.permanent = 0;
        }
    } else if (!(e->prog = pc_build_derived(q->ctx, q->dev, options, e->key, e->key_len, make, &mc, &meta,
                                            &meta_size, &err))) {
        int failed = !why[0]; /* made, and the driver's build failed */
        if (failed) snprintf(why, sizeof why, "building the fused program failed (error %d)", err);
        if ((failed && err == CL_BUILD_PROGRAM_FAILURE) || (!failed && mc.by_key)) /* any process would fail so */
            pc_derived_refusal_put(q->dev, options, e->key, e->key_len, REFUSED_BY, why, mc.permanent);
    }
    if (!e->prog) {
        /* why says it */
    } else if (read_meta(e, q, meta, meta_size) != 0) {
        snprintf(why, sizeof why, "the fused program's metadata is invalid");
    } else if (!(e->kernel = fb()->real->clCreateKernel(e->prog, e->name, &err)) || err != CL_SUCCESS) {
        snprintf(why, sizeof why, "creating the fused kernel failed (error %d)", err);
        e->kernel = NULL;
    }
    free(meta);
    if (!why[0] && !from) {
        /* Have the driver produce the binary now: clshim stores it at exit
         * (pc_build_derived), and on PoCL producing it compiles, which can
         * crash once LLVM's static destructors have run at exit. */
        size_t bin_size = 0;
        fb()->real->clGetProgramInfo(e->prog, CL_PROGRAM_BINARY_SIZES, sizeof bin_size, &bin_size, NULL);
    }
    if (why[0]) e->reason = strdup(why);
    e->ptx_refused = mc.ptx_refused;
    e->permanent = mc.permanent;
    e->made_here = mc.made;
    if (why[0] && !e->reason) {
        memo_drop(e);
        return NULL;
    }
    pthread_mutex_lock(&memo_lock);
    struct fb_memo *other = memos;
    while (other && !(other->ctx == e->ctx && other->dev == e->dev && other->key_len == e->key_len &&
                      !memcmp(other->key, e->key, e->key_len)))
        other = other->next;
    if (!other) {
        e->next = memos;
        memos = e;
    }
    pthread_mutex_unlock(&memo_lock);
    if (other) {
        memo_drop(e);
        return other;
    }
    return e;
}

/* ---- made by the capture helper (fusion/fjob.h) ------------------------------------------ */

/* Keys handed to the capture helper and not answered yet, by context and
 * device (under memo_lock). A few per process: one per learned sequence. */
struct fb_handed {
    struct fb_handed *next;
    cl_context ctx;
    cl_device_id dev;
    unsigned char *key;
    size_t key_len;
};
static struct fb_handed *handed;

static struct fb_handed **handed_at(const struct fq *q, const struct bytes *key)
{
    struct fb_handed **at = &handed;
    while (*at && !((*at)->ctx == q->ctx && (*at)->dev == q->dev && (*at)->key_len == key->len &&
                    !memcmp((*at)->key, key->p, key->len)))
        at = &(*at)->next;
    return at;
}

static int handed_has(const struct fq *q, const struct bytes *key)
{
    pthread_mutex_lock(&memo_lock);
    int has = *handed_at(q, key) != NULL;
    pthread_mutex_unlock(&memo_lock);
    return has;
}

static void handed_note(const struct fq *q, const struct bytes *key, int present)
{
    pthread_mutex_lock(&memo_lock);
    struct fb_handed **at = handed_at(q, key), *h = *at;
    if (present && !h) {
        unsigned char *k = (h = calloc(1, sizeof *h)) ? malloc(key->len ? key->len : 1) : NULL;
        if (k) { /* else not noted: the next request hands it again, harmless */
            memcpy(k, key->p, key->len);
            *h = (struct fb_handed){handed, q->ctx, q->dev, k, key->len};
            handed = h;
        } else {
            free(h);
        }
    } else if (!present && h) {
        *at = h->next;
        free(h->key);
        free(h);
    }
    pthread_mutex_unlock(&memo_lock);
}

/* Whether a fused program the cache lacks is made by the capture helper:
 * automatic fusion (CLSHIM_FUSION_BUILD=helper), the IR route or route
 * (b) without the options whose programs depend on more than the job holds
 * (the extension API's and a plan's internal, const, force-barrier, and
 * route (a), NVIDIA's, where no helper runs). */
static int by_helper(const struct fq *q, int flags)
{
    return fb()->automatic && fb()->build_by_helper && !q->ext &&
           !(flags & (FB_FORCE_BARRIER | FB_INTERNAL | FB_CONST | FB_PTX));
}

/* The fused program for `key` from the capture helper: handed over at the
 * first request, then looked for at each one until it is there
 * (PC_HELPER_PENDING meanwhile: nothing to launch, the held kernels run
 * unfused). Its entry in *out once answered: the program, or the helper's
 * refusal remembered in the cache, or "made none" (memo_build). Where no
 * helper serves (PC_HELPER_NONE, also when the job cannot be written: a
 * buffer argument the argument info does not name), *out stays NULL and
 * the caller makes the program itself. */
static int memo_by_helper(const struct fq *q, int flags, const uint32_t *cls, const struct bytes *key,
                          const char *options, struct fb_memo **out)
{
    int sent = handed_has(q, key);
    char *remembered = NULL;
    int permanent;
    if (!sent && pc_derived_refusal_get(q->dev, options, key->p, key->len, REFUSED_BY, &remembered, &permanent) == 0) {
        free(remembered);
        return PC_HELPER_NONE; /* memo_build finds it */
    }
    struct key_buf job = {0};
    if (!sent && (fjob_encode(q, flags, cls, key->p, key->len, &job) != 0 || job.oom)) {
        key_free(&job);
        return PC_HELPER_NONE;
    }
    struct memo_from from = {0};
    enum pc_helper_state st;
    from.prog = pc_derived_by_helper(q->ctx, q->dev, options, key->p, key->len, sent ? NULL : job.data, job.len,
                                     &from.meta, &from.meta_size, &st);
    key_free(&job);
    if (!from.prog && st == PC_HELPER_PENDING) {
        if (!sent) {
            handed_note(q, key, 1);
            if (log_enabled(LOG_INFO)) {
                char names[512];
                seq_label(q, names, sizeof names);
                log_msg(LOG_INFO, "fusion: the fused kernel for %s is made by the capture helper; its occurrences "
                                  "run unfused until it is ready", names);
            }
        }
        return PC_HELPER_PENDING;
    }
    if (sent) handed_note(q, key, 0);
    if (!from.prog && st == PC_HELPER_NONE) return PC_HELPER_NONE;
    if (!from.prog) from.lost = "the capture helper made no fused program (`clshim cache wait` says why)";
    *out = memo_build(q, flags, NULL, cls, key, options, &from);
    return st;
}

/* The capture helper's side (fjob.c): what make() makes of a job. */
int fb_make_job(const struct fq *q, int flags, const struct pc_origin *origins, const uint32_t *cls,
                const unsigned char *key, size_t key_len, const char *options, void **program, size_t *size,
                void **meta, size_t *meta_size, int *by_key, int *permanent, char *why, size_t why_len)
{
    struct make_ctx mc = {q, flags, NULL, cls, key, key_len, why, why_len, 0, 0, 0, options, origins, 0, 0};
    why[0] = 0;
    int rc = make(&mc, program, size, meta, meta_size);
    *by_key = mc.by_key;
    *permanent = mc.permanent;
    return rc;
}

int fb_meta_shape(const struct fq *q, const void *meta, size_t meta_size, struct fb_shape *out)
{
    struct fb_memo e;
    memset(&e, 0, sizeof e);
    memset(out, 0, sizeof *out);
    int rc = read_meta(&e, q, meta, meta_size);
    if (rc == 0) {
        memcpy(out->name, e.name, sizeof out->name);
        out->dim = e.dim;
        memcpy(out->gws, e.gws, sizeof e.gws);
        memcpy(out->lws, e.lws, sizeof e.lws);
        memcpy(out->off, e.off, sizeof e.off);
        out->nparams = e.nparams;
        out->pk = e.pk, out->pi = e.pi;
        e.pk = e.pi = NULL;
    }
    free(e.pk);
    free(e.pi);
    free(e.is_buf);
    return rc;
}

const char *fb_refused_by(void) { return REFUSED_BY; }

/* ---- the fused kernel's arguments ------------------------------------------------------ */

struct fb_repeat;
static uint64_t repeat_serial(const struct fb_repeat *r);

/* Whether e's kernel already holds the arguments of q's launch record `r`
 * (a repeat of it is being launched: its held arguments are r's): the last
 * launch of e, from any queue, set exactly r's arguments, at r's present
 * serial (r changes only through repeat_save, which bumps it; a record is
 * never freed, so the pointer names one queue's), and no buffer was
 * released since. Then not even the comparison with e->set is needed: a
 * loop relaunching one chain costs no clSetKernelArg and no comparison.
 * Under e->lock (launch takes it; not asserted: every fused launch passes here). */
static int args_known(const struct fb_memo *e, const struct fb_repeat *r, int gen)
{
    return r && e->set_by == r && e->set_serial == repeat_serial(r) && e->set_gen == gen;
}

/* Sets the fused kernel's arguments from q's held snapshots, calling
 * clSetKernelArg only for those that differ from what it holds (e->set);
 * `r` is q's launch record when the held kernels repeat it (else NULL), so
 * that the next repeat can skip even the comparison. Under e->lock (see args_known). */
static cl_int set_fused_args(struct fq *q, struct fb_memo *e, const struct fb_repeat *r, int gen)
{
    if (args_known(e, r, gen)) return CL_SUCCESS;
    cl_int rc = CL_SUCCESS;
    if (e->set && e->set_gen != gen)
        for (uint32_t p = 0; p < e->nparams; p++) fk_arg_clear(&e->set[p]);
    if (!e->set) e->set = calloc(e->nparams ? e->nparams : 1, sizeof *e->set);
    e->set_gen = gen;
    for (uint32_t p = 0; p < e->nparams && rc == CL_SUCCESS; p++) {
        const struct fk_arg *a = &q->held[e->pk[p]].args[e->pi[p]];
        if (e->set && fk_arg_equal(&e->set[p], a)) continue; /* a loop re-launching with the same arguments */
        rc = fb()->real->clSetKernelArg(e->kernel, p, a->size, a->kind == FK_LOCAL ? NULL : FK_BYTES(a));
        if (e->set) {
            fk_arg_clear(&e->set[p]);
            if (rc == CL_SUCCESS) fk_arg_copy(&e->set[p], a);
        }
    }
    e->set_by = rc == CL_SUCCESS ? r : NULL;
    e->set_serial = r ? repeat_serial(r) : 0;
    return rc;
}

static cl_int launch(struct fq *q, struct fb_memo *e, const struct fb_repeat *repeat_of, cl_event *rev)
{
    size_t total = 0;
    for (uint32_t i = 0; i < q->nheld; i++) total += q->held[i].nwaits;
    cl_event buf[16];
    cl_event *waits = total <= 16 ? buf : malloc(total * sizeof *waits);
    if (!waits) return CL_OUT_OF_HOST_MEMORY;
    cl_uint nw = 0, nreal = 0; /* the first nreal waits are real events retained here */
    for (uint32_t i = 0; i < q->nheld; i++)
        for (cl_uint j = 0; j < q->held[i].nwaits; j++) {
            /* Only clshim holds these events now: fev_look, not fev_find. */
            cl_event w = q->held[i].waits[j];
            struct fev_look v;
            int tracked = fev_look(w, &v);
            cl_uint k;
            if (tracked && v.q == q && v.held) { /* a command of this launch */
                if (v.real) fb()->real->clReleaseEvent(v.real);
                continue;
            }
            if (v.real) {
                for (k = 0; k < nw && waits[k] != v.real; k++) continue;
                if (k < nw) {
                    fb()->real->clReleaseEvent(v.real);
                    continue;
                }
                if (nreal < nw) waits[nw] = waits[nreal]; /* keep the retained ones first */
                waits[nreal++] = v.real;
                nw++;
                continue;
            }
            for (k = 0; k < nw && waits[k] != w; k++) continue;
            if (k == nw) waits[nw++] = w;
        }
    pthread_mutex_lock(&e->lock);
    cl_int rc = set_fused_args(q, e, repeat_of, __atomic_load_n(&fb()->mem_gen, __ATOMIC_ACQUIRE));
    int has_lws = e->lws[0] || e->lws[1] || e->lws[2];
    int has_off = e->off[0] || e->off[1] || e->off[2];
    if (rc == CL_SUCCESS)
        rc = fb()->real->clEnqueueNDRangeKernel(q->q, e->kernel, e->dim, has_off ? e->off : NULL, e->gws,
                                             has_lws ? e->lws : NULL, nw, nw ? waits : NULL, rev);
    pthread_mutex_unlock(&e->lock);
    for (cl_uint i = 0; i < nreal; i++) fb()->real->clReleaseEvent(waits[i]);
    if (waits != buf) free(waits);
    return rc;
}

/* ---- repeats ------------------------------------------------------------------------------ */

/* What a queue's last fused launch held. A loop that fuses the same
 * sequence again — the same kernel records, ND-ranges and argument bytes,
 * and no buffer released since (a released handle may come back as another
 * buffer) — has the same argument classes, hence the same key: its fused
 * program is reused without classes, key material or memo lookups. */
struct fb_repeat_kernel {
    uint64_t id, args_gen;
    uint64_t dim, nargs, has_lws, has_off;
    uint64_t gws[3], lws[3], off[3];
};

struct fb_repeat {
    int valid, flags, gen;
    int seq;              /* the plan sequence launched, or -1 (the extension API) */
    uint64_t serial;      /* bumped by every repeat_save (args_known); records are never freed */
    char *internal_args;  /* a copy of the launch's internal= list, or NULL */
    struct fb_memo *memo;
    struct fb_repeat_kernel *kernels;
    uint32_t n, kernels_cap;
    struct fk_arg *args; /* every held kernel's arguments, in order */
    uint32_t nargs, args_cap;
};

static uint64_t repeat_serial(const struct fb_repeat *r) { return r->serial; }

static void repeat_kernel_of(const struct held *h, struct fb_repeat_kernel *k)
{
    k->id = h->rec->id;
    k->args_gen = h->args_gen;
    k->dim = h->dim;
    k->nargs = h->nargs;
    k->has_lws = (uint64_t)h->has_lws;
    k->has_off = (uint64_t)h->has_off;
    for (int d = 0; d < 3; d++) {
        k->gws[d] = h->gws[d];
        k->lws[d] = h->lws[d];
        k->off[d] = h->off[d];
    }
}

/* repeat_kernel_of(h) equals k, compared field by field (no copy). */
static int repeat_kernel_same(const struct held *h, const struct fb_repeat_kernel *k)
{
    if (k->id != h->rec->id || k->dim != h->dim || k->nargs != h->nargs || k->has_lws != (uint64_t)h->has_lws ||
        k->has_off != (uint64_t)h->has_off)
        return 0;
    for (int d = 0; d < 3; d++)
        if (k->gws[d] != h->gws[d] || k->lws[d] != h->lws[d] || k->off[d] != h->off[d]) return 0;
    return 1;
}

static int same_args_list(const char *a, const char *b)
{
    return a == b || (a && b && !strcmp(a, b));
}

static struct fb_memo *repeat_match(const struct fq *q, int flags, const char *internal_args, int gen)
{
    const struct fb_repeat *r = q->repeat;
    if (!r || !r->valid || r->flags != flags || r->gen != gen || r->n != q->nheld ||
        !same_args_list(r->internal_args, internal_args))
        return NULL;
    if (q->replayed == q->nheld) return r->memo; /* each held kernel was found equal to r's as it came */
    const struct fk_arg *a = r->args;
    for (uint32_t i = 0; i < q->nheld; i++) {
        const struct held *h = &q->held[i];
        if (!repeat_kernel_same(h, &r->kernels[i])) return NULL;
        if (h->args_gen == r->kernels[i].args_gen) { /* the same record, its arguments not set since */
            a += h->nargs;
            continue;
        }
        for (cl_uint j = 0; j < h->nargs; j++)
            if (!fk_arg_equal(a++, &h->args[j])) return NULL;
    }
    return r->memo;
}

/* Remembers the held kernels of a launch of e (best effort: on OOM the next
 * launch takes the full path). */
static void repeat_save(struct fq *q, int flags, const char *internal_args, int gen, int seq, struct fb_memo *e)
{
    struct fb_repeat *r = q->repeat;
    if (!r && !(r = q->repeat = calloc(1, sizeof *r))) return;
    r->valid = 0;
    r->serial++; /* its arguments change: no fused kernel holds them now (args_known) */
    if (!same_args_list(r->internal_args, internal_args)) {
        free(r->internal_args);
        r->internal_args = NULL;
        if (internal_args && !(r->internal_args = strdup(internal_args))) return;
    }
    for (uint32_t i = 0; i < r->nargs; i++) fk_arg_clear(&r->args[i]);
    r->nargs = 0;
    uint32_t total = 0;
    for (uint32_t i = 0; i < q->nheld; i++) total += q->held[i].nargs;
    if (q->nheld > r->kernels_cap) {
        struct fb_repeat_kernel *k = realloc(r->kernels, q->nheld * sizeof *k);
        if (!k) return;
        r->kernels = k;
        r->kernels_cap = q->nheld;
    }
    if (total > r->args_cap) {
        struct fk_arg *a = realloc(r->args, total * sizeof *a);
        if (!a) return;
        r->args = a;
        r->args_cap = total;
    }
    for (uint32_t i = 0; i < q->nheld; i++) {
        const struct held *h = &q->held[i];
        repeat_kernel_of(h, &r->kernels[i]);
        for (cl_uint j = 0; j < h->nargs; j++) {
            if (fk_arg_copy(&r->args[r->nargs], &h->args[j]) != 0) return; /* valid stays 0 */
            r->nargs++;
        }
    }
    r->n = q->nheld;
    r->flags = flags;
    r->gen = gen;
    r->seq = seq;
    r->memo = e;
    r->valid = 1;
}

int fb_repeat_seq(const struct fq *q, int mem_gen)
{
    const struct fb_repeat *r = q->repeat;
    return r && r->valid && r->gen == mem_gen ? r->seq : FB_NO_REPEAT;
}

int fb_repeat_same(const struct fq *q, const struct held *h)
{
    const struct fb_repeat *r = q->repeat;
    uint32_t i = q->nheld;
    return r && r->valid && i < r->n && r->kernels[i].args_gen == h->args_gen && repeat_kernel_same(h, &r->kernels[i]);
}

/* The held kernels' ND-ranges against the fuser's rules (fuse_ranges.h),
 * before anything is compiled: 0, or CLSHIM_EUNSUPPORTED with `why`. */
static int ranges_refused(const struct fq *q, int flags, char *why, size_t why_len)
{
    struct fuse_kernel ks[PLAN_MAX_SEQ];
    if (q->nheld > PLAN_MAX_SEQ) /* never: the extension API submits past it, plans are no longer */
        return snprintf(why, why_len, "more than %d kernels", PLAN_MAX_SEQ), CLSHIM_EUNSUPPORTED;
    memset(ks, 0, q->nheld * sizeof *ks);
    for (uint32_t i = 0; i < q->nheld; i++) fuse_kernel_of(&q->held[i], &ks[i]);
    struct fuse_ranges r;
    return fuse_ranges_check(ks, q->nheld, !(flags & FB_SOURCE), &r, why, why_len);
}

/* What a fused program's first load in this process took (fusion/fhistory.h). */
struct fb_load {
    struct fh_entry *hist;   /* NULL: not timed */
    double t0;               /* ms, before the load */
    struct fb_memo *e;       /* the entry loaded */
};

/* The fused program for q's held kernels: a repeat of the last launch, else
 * through classes and key material (memo, cache, build). NULL with `why`,
 * *lasting set to FB_REFUSED_KEY when the request is refused by its key
 * (its ranges, the memo's or the cache's refusal), FB_REFUSED_ALWAYS for
 * a cause no other request of these kernels escapes, and *ptx_refused when
 * route (a) refused it. */
static struct fb_memo *fused_program(struct fq *q, int flags, const char *internal_args, int gen, int seq,
                                     int *repeat, int *lasting, int *ptx_refused, struct fb_load *ld, char *why,
                                     size_t why_len)
{
    struct fb_memo *e = repeat_match(q, flags, internal_args, gen);
    *repeat = e != NULL;
    if (e) return e;
    size_t total = 0;
    for (uint32_t i = 0; i < q->nheld; i++) total += q->held[i].nargs;
    uint32_t cls_buf[STACK_ARGS];
    uint32_t *cls = total <= STACK_ARGS ? cls_buf : malloc(total * sizeof *cls);
    struct bytes key;
    bytes_init(&key);
    char *options = NULL;
    if (!cls) {
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    if (ranges_refused(q, flags, why, why_len)) {
        *lasting = FB_REFUSED_KEY; /* the ranges are in the key */
        goto out;
    }
    int rc = make_classes(q, cls, (flags & (FB_SOURCE | FB_PTX)) != 0, why, why_len);
    if (rc) {
        if (rc == -2) *lasting = FB_REFUSED_ALWAYS;
        goto out;
    }
    key_material(q, flags, internal_args, cls, &key);
    size_t base_len = key.len;
    if (flags & FB_CONST) key_values(q, &key);
    if (key.oom) {
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    e = q->last && memo_matches(q->last, q, &key) ? q->last : memo_find(q, &key);
    if (!e && (flags & FB_CONST) && memo_count_prefix(q, &key, base_len) >= CONST_PROGRAMS) {
        fb_log_kind("const: %u programs with other values of %s..%s exist: its scalars are passed as "
                    "arguments from now on", CONST_PROGRAMS, q->held[0].rec->name, q->held[q->nheld - 1].rec->name);
        flags &= ~FB_CONST; /* the key without the values and with this flags word: the plain fusion's */
        uint32_t word = (uint32_t)flags;
        memcpy(key.p + KEY_FLAGS_AT, &word, sizeof word);
        key.len = base_len;
        e = q->last && memo_matches(q->last, q, &key) ? q->last : memo_find(q, &key);
    }
    if (!e && !(options = flags & FB_SOURCE ? source_options(q) : shared_options(q))) {
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    if (!e && fh_defers(q, seq, &ld->hist, why, why_len)) {
        *lasting = FB_NOT_YET;
        goto out;
    }
    if (!e && ld->hist) ld->t0 = fs_now_ms();
    if (!e && by_helper(q, flags) && !(needs_clang(q) && !clang_available()) && memo_by_helper(q, flags, cls, &key, options, &e) == PC_HELPER_PENDING) {
        snprintf(why, why_len, "its fused program is being made by the capture helper");
        *lasting = FB_DEFERRED;
        goto out;
    }
    if (!e && !(e = memo_build(q, flags, internal_args, cls, &key, options, NULL))) {
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    if (e && ld->t0 && !e->made_here) ld->e = e; /* loaded: timed to the end of its launch */
    if (e && e->reason) {
        snprintf(why, why_len, "%s", e->reason);
        *lasting = e->permanent ? FB_REFUSED_ALWAYS : FB_REFUSED_KEY;
        *ptx_refused = e->ptx_refused;
        e = NULL;
    }
    if (e && e->is_buf && (rc = check_analysed_buffers(q, e, why, why_len)) != 0) {
        if (rc == -2) *lasting = FB_REFUSED_ALWAYS;
        e = NULL;
    }
out:
    if (cls != cls_buf) free(cls);
    bytes_free(&key);
    free(options);
    return e;
}

int fb_fuse_held(struct fq *q, int flags, const char *internal_args, int seq, struct fb_pending *p,
                 cl_event *out_event, uint32_t *nparams, int *lasting, char *why, size_t why_len)
{
    *lasting = FB_REFUSED_ONCE;
    flags |= fr_route(q, flags);
    if ((flags & (FB_SOURCE | FB_CONST)) == (FB_SOURCE | FB_CONST)) {
        fb_log_kind("const: not applied: generated OpenCL C (route (b)) passes every scalar as an argument");
        flags &= ~FB_CONST;
    }
    if (!(flags & FB_INTERNAL)) internal_args = NULL;
    int gen = __atomic_load_n(&fb()->mem_gen, __ATOMIC_ACQUIRE), repeat = 0, ptx_refused = 0;
    int asked = flags; /* a launch repeating this one finds the program by these flags */
    struct fb_load ld = {NULL, 0, NULL};
    struct fb_memo *e =
        fused_program(q, flags, internal_args, gen, seq, &repeat, lasting, &ptx_refused, &ld, why, why_len);
    if (!e && ptx_refused && fr_fallback(q, flags, why)) {
        flags = (flags & ~(FB_PTX | FB_CONST)) | FB_SOURCE;
        *lasting = FB_REFUSED_ONCE;
        ld = (struct fb_load){NULL, 0, NULL};
        e = fused_program(q, flags, internal_args, gen, seq, &repeat, lasting, &ptx_refused, &ld, why, why_len);
        repeat = 0;
    }
    if (!e) return -1;
    q->last = e;
    cl_event rev = NULL;
    int want_event = out_event != NULL;
    for (uint32_t i = 0; i < q->nheld; i++) want_event |= q->held[i].ev != NULL;
    cl_int err = launch(q, e, repeat ? q->repeat : NULL, want_event ? &rev : NULL); /* an event costs the driver time */
    if (err != CL_SUCCESS) {
        snprintf(why, why_len, "enqueueing the fused kernel failed (error %d)", err);
        return -1;
    }
    if (ld.e == e) /* the load and the first launch, as the application's thread paid them */
        fh_loaded(ld.hist, (fs_now_ms() - ld.t0) * 1e3);
    if (!repeat) repeat_save(q, asked, internal_args, gen, seq, e);
    if (__atomic_load_n(&profile_active, __ATOMIC_RELAXED)) profile_fused_launch(q, rev);
    /* Launched: every held command's work is in rev. */
    uint32_t n = q->nheld;
    for (uint32_t i = 0; i < n; i++) {
        struct held *h = &q->held[i];
        if (h->ev) {
            fb()->real->clRetainEvent(rev);
            h->ev->part = i, h->ev->parts = n; /* published by the release store */
            __atomic_store_n(&h->ev->real, rev, __ATOMIC_RELEASE);
            h->ev->held = 0;
            fb_pending_add(p, h->ev, rev, CL_SUCCESS);
        }
    }
    for (uint32_t i = 0; i < n; i++) fb_held_clear(&q->held[i]);
    __atomic_store_n(&q->nheld, 0, __ATOMIC_RELEASE); /* read unlocked by cancel_where */
    q->ncand = 0;
    __atomic_sub_fetch(&fb()->held_total, (int)n, __ATOMIC_RELEASE);
    if (out_event) *out_event = rev;
    else if (rev) fb()->real->clReleaseEvent(rev);
    *nparams = e->nparams;
    return 0;
}
