/* fjob.c — the job of a fused program made by the capture helper
 * (fusion/fjob.h): written by the application from a queue's held kernels,
 * made into the fused program in the helper's capture process.
 *
 * Format (one machine, one build of clshim: native byte order), after the
 * magic: u32 flags, u32 kernels, the key material (u64 length, bytes), u32
 * argument count and the argument classes (u32 each); per kernel its name,
 * u32 from IL, u32 origin kind, the input (u64 length, bytes), the
 * options, u32 specialization constants and their records, u32 work dim,
 * u32 has local size, 9 u64 (global, local, offset), u32 arguments and per
 * argument u8 kind, u8 mem, u32 size, then a buffer's u64 size or a
 * value's bytes. Strings are a u32 length and the bytes.
 */
#include "fusion/fjob.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/key.h"
#include "common/log.h"
#include "fusion/batch_int.h"
#include "program/origin.h"

#define JOB_MAGIC "clshim-fusion-job 1\n"

static void put32(struct key_buf *b, uint32_t v) { key_append(b, &v, sizeof v); }
static void put64(struct key_buf *b, uint64_t v) { key_append(b, &v, sizeof v); }
static void put_str(struct key_buf *b, const char *s, size_t n)
{
    put32(b, (uint32_t)n);
    key_append(b, s, n);
}

/* A held argument as the job has it: 0, or -1 where the job cannot say
 * what it is (a maybe-buffer: the argument info is off) or the buffer's
 * size cannot be read. */
static int put_arg(struct key_buf *b, const struct fk_arg *a)
{
    if (a->kind != FK_VALUE && a->kind != FK_LOCAL) return -1;
    if (a->kind == FK_VALUE && (a->mem == 2 || (a->mem == 1 && a->size != sizeof(cl_mem)))) return -1;
    key_append(b, &a->kind, 1);
    key_append(b, &a->mem, 1);
    put32(b, a->size);
    if (a->kind == FK_LOCAL) return 0;
    if (!a->mem) {
        key_append(b, FK_BYTES(a), a->size);
        return 0;
    }
    cl_mem m;
    size_t bytes = 0;
    memcpy(&m, a->v.inl, sizeof m);
    if (m && fb()->real->clGetMemObjectInfo(m, CL_MEM_SIZE, sizeof bytes, &bytes, NULL) != CL_SUCCESS) return -1;
    put64(b, bytes);
    return 0;
}

int fjob_encode(const struct fq *q, int flags, const uint32_t *cls, const unsigned char *key, size_t key_len,
                struct key_buf *out)
{
    key_append(out, JOB_MAGIC, sizeof JOB_MAGIC - 1);
    put32(out, (uint32_t)flags);
    put32(out, q->nheld);
    put64(out, key_len);
    key_append(out, key, key_len);
    uint32_t total = 0;
    for (uint32_t i = 0; i < q->nheld; i++) total += q->held[i].nargs;
    put32(out, total);
    key_append(out, cls, total * sizeof *cls);
    for (uint32_t i = 0; i < q->nheld; i++) {
        const struct held *h = &q->held[i];
        const struct fk_kernel *rec = h->rec;
        struct pc_origin o;
        if (pc_kernel_origin(h->k, &o) != 0) return -1;
        put_str(out, rec->name, strlen(rec->name));
        put32(out, (uint32_t)rec->from_il);
        put32(out, (uint32_t)o.kind);
        put64(out, o.input_len);
        key_append(out, o.input, o.input_len);
        put_str(out, o.options, strlen(o.options));
        pc_origin_free(&o);
        put32(out, rec->nspecs);
        key_append(out, rec->specs, rec->nspecs * sizeof *rec->specs);
        put32(out, h->dim);
        put32(out, (uint32_t)h->has_lws);
        for (int d = 0; d < 3; d++) put64(out, h->gws[d]);
        for (int d = 0; d < 3; d++) put64(out, h->lws[d]);
        for (int d = 0; d < 3; d++) put64(out, h->off[d]);
        put32(out, h->nargs);
        for (cl_uint j = 0; j < h->nargs; j++)
            if (put_arg(out, &h->args[j]) != 0) return -1;
    }
    return out->oom ? -1 : 0;
}

/* ---- the helper's side ------------------------------------------------------------------ */

struct reader {
    const unsigned char *p, *end;
    int bad;
};

static const void *take(struct reader *r, size_t n)
{
    if (r->bad || (size_t)(r->end - r->p) < n) {
        r->bad = 1;
        return NULL;
    }
    const void *at = r->p;
    r->p += n;
    return at;
}

static uint32_t get32(struct reader *r)
{
    uint32_t v = 0;
    const void *at = take(r, sizeof v);
    if (at) memcpy(&v, at, sizeof v);
    return v;
}

static uint64_t get64(struct reader *r)
{
    uint64_t v = 0;
    const void *at = take(r, sizeof v);
    if (at) memcpy(&v, at, sizeof v);
    return v;
}

/* A string of the job, NUL-terminated (malloc'd; NULL when malformed). */
static char *get_str(struct reader *r)
{
    uint32_t n = get32(r);
    const char *at = take(r, n);
    return at ? strndup(at, n) : NULL;
}

/* A job decoded into the queue record make() reads (held kernels with
 * their records and snapshots), the kernels' origins and buffer sizes. */
struct job {
    struct fq q;
    int flags;
    const unsigned char *key;
    size_t key_len;
    uint32_t *cls;
    struct pc_origin *origins;
    uint64_t **buf_size; /* per held kernel and argument: a buffer's size */
    char *options;
    unsigned char *bytes; /* the job's own copy */
};

static void job_free(struct job *j)
{
    if (!j) return;
    for (uint32_t i = 0; j->q.held && i < j->q.nheld; i++) {
        struct held *h = &j->q.held[i];
        if (h->rec) free(h->rec->name), free(h->rec->options);
        free(h->rec);
        fk_free_args(h->args, h->nargs);
        free(j->buf_size[i]);
        free(j->origins[i].options);
    }
    free(j->q.held);
    free(j->origins);
    free(j->buf_size);
    free(j->cls);
    free(j->options);
    free(j->bytes);
    free(j);
}

static int get_arg(struct reader *r, struct fk_arg *a, uint64_t *buf_size)
{
    const unsigned char *kind = take(r, 1), *mem = take(r, 1);
    if (!kind || !mem) return -1;
    a->kind = *kind;
    a->mem = *mem;
    a->size = get32(r);
    if (a->kind == FK_LOCAL) return r->bad ? -1 : 0;
    if (a->kind != FK_VALUE) return -1;
    if (a->mem) {
        *buf_size = get64(r);
        return r->bad || a->size != sizeof(cl_mem) ? -1 : 0; /* the handle's bytes stay zero */
    }
    const void *v = take(r, a->size);
    if (!v) return -1;
    if (a->size > 16) {
        if (!(a->v.heap = malloc(a->size))) return -1;
        memcpy(a->v.heap, v, a->size);
    } else {
        memcpy(a->v.inl, v, a->size);
    }
    return 0;
}

static int get_kernel(struct reader *r, struct job *j, uint32_t i)
{
    struct held *h = &j->q.held[i];
    struct pc_origin *o = &j->origins[i];
    if (!(h->rec = calloc(1, sizeof *h->rec)) || !(h->rec->name = get_str(r))) return -1;
    h->rec->from_il = (int)get32(r);
    o->kind = (enum key_kind)get32(r);
    o->input_len = (size_t)get64(r);
    o->input = (void *)take(r, o->input_len);
    if (!o->input || !(o->options = get_str(r)) || !(h->rec->options = strdup(o->options))) return -1;
    uint32_t nspecs = get32(r);
    const void *specs = take(r, (size_t)nspecs * sizeof *h->rec->specs);
    if (!specs || nspecs > FK_MAX_SPECS) return -1;
    h->rec->nspecs = nspecs;
    memcpy(h->rec->specs, specs, nspecs * sizeof *h->rec->specs);
    h->dim = get32(r);
    h->has_lws = (int)get32(r);
    for (int d = 0; d < 3; d++) h->gws[d] = (size_t)get64(r);
    for (int d = 0; d < 3; d++) h->lws[d] = (size_t)get64(r);
    for (int d = 0; d < 3; d++) h->off[d] = (size_t)get64(r);
    h->nargs = h->rec->nargs = get32(r);
    if (r->bad || h->dim < 1 || h->dim > 3 || h->nargs > 4096) return -1;
    h->args = calloc(h->nargs ? h->nargs : 1, sizeof *h->args);
    j->buf_size[i] = calloc(h->nargs ? h->nargs : 1, sizeof *j->buf_size[i]);
    if (!h->args || !j->buf_size[i]) return -1;
    for (cl_uint a = 0; a < h->nargs; a++)
        if (get_arg(r, &h->args[a], &j->buf_size[i][a]) != 0) return -1;
    return 0;
}

static struct job *job_decode(const void *bytes, size_t len)
{
    struct job *j = calloc(1, sizeof *j);
    if (!j || !(j->bytes = malloc(len ? len : 1))) {
        free(j);
        return NULL;
    }
    memcpy(j->bytes, bytes, len);
    struct reader r = {j->bytes, j->bytes + len, 0};
    const void *magic = take(&r, sizeof JOB_MAGIC - 1);
    if (!magic || memcmp(magic, JOB_MAGIC, sizeof JOB_MAGIC - 1)) goto bad;
    j->flags = (int)get32(&r);
    uint32_t n = get32(&r);
    j->key_len = (size_t)get64(&r);
    j->key = take(&r, j->key_len);
    uint32_t total = get32(&r);
    const void *cls = take(&r, (size_t)total * sizeof *j->cls);
    if (!j->key || !cls || n < 2 || n > PLAN_MAX_SEQ || total > 65536) goto bad;
    j->q.held = calloc(n, sizeof *j->q.held);
    j->origins = calloc(n, sizeof *j->origins);
    j->buf_size = calloc(n, sizeof *j->buf_size);
    j->cls = malloc(total ? total * sizeof *j->cls : 1);
    if (!j->q.held || !j->origins || !j->buf_size || !j->cls) goto bad;
    memcpy(j->cls, cls, total * sizeof *j->cls);
    j->q.nheld = n;
    uint32_t args = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (get_kernel(&r, j, i) != 0) goto bad;
        args += j->q.held[i].nargs;
    }
    if (args != total || r.p != r.end) goto bad;
    j->q.in_order = 1;
    return j;
bad:
    job_free(j);
    return NULL;
}

/* The first launch's arguments, one per fused parameter. */
static int first_launch(struct job *j, const struct fb_shape *sh, struct fjob_made *out)
{
    if (!(out->params = calloc(sh->nparams ? sh->nparams : 1, sizeof *out->params))) return -1;
    out->nparams = sh->nparams;
    for (uint32_t p = 0; p < sh->nparams; p++) {
        const struct fk_arg *a = &j->q.held[sh->pk[p]].args[sh->pi[p]];
        struct fjob_arg *o = &out->params[p];
        if (a->kind == FK_LOCAL) *o = (struct fjob_arg){FJOB_LOCAL, a->size, NULL};
        else if (a->mem) *o = (struct fjob_arg){FJOB_BUFFER, (size_t)j->buf_size[sh->pk[p]][sh->pi[p]], NULL};
        else *o = (struct fjob_arg){FJOB_VALUE, a->size, FK_BYTES(a)};
    }
    return 0;
}

int fjob_make(const void *job, size_t len, const char *identity, const char *device, const char *options,
              struct fjob_made *out, char *why, size_t why_len)
{
    memset(out, 0, sizeof *out);
    struct job *j = job_decode(job, len);
    if (!j) return snprintf(why, why_len, "the job cannot be decoded"), -1;
    out->job = j;
    int by_key = 0, permanent = 0;
    int rc = fb_make_job(&j->q, j->flags, j->origins, j->cls, j->key, j->key_len, options, &out->program,
                         &out->program_size, &out->meta, &out->meta_size, &by_key, &permanent, why, why_len);
    if (rc != 0 && rc != 1) {
        /* As memo_build records it: any process would be refused so. */
        if (by_key)
            pc_derived_refusal_put_for(identity, device, options, j->key, j->key_len, fb_refused_by(), why,
                                       permanent);
        return by_key || permanent ? FJOB_REFUSED : -1;
    }
    out->is_source = rc == 1;
    struct fb_shape sh;
    if (fb_meta_shape(&j->q, out->meta, out->meta_size, &sh) != 0)
        return snprintf(why, why_len, "the fused program's metadata is invalid"), -1;
    memcpy(out->name, sh.name, sizeof out->name);
    out->dim = sh.dim;
    memcpy(out->gws, sh.gws, sizeof sh.gws);
    memcpy(out->lws, sh.lws, sizeof sh.lws);
    memcpy(out->off, sh.off, sizeof sh.off);
    rc = first_launch(j, &sh, out);
    free(sh.pk);
    free(sh.pi);
    if (rc != 0) return snprintf(why, why_len, "out of memory"), -1;
    return 0;
}

void fjob_note_build_failed(const struct fjob_made *m, const char *identity, const char *device,
                            const char *options, int err)
{
    const struct job *j = m->job;
    char why[128];
    snprintf(why, sizeof why, "building the fused program failed (error %d)", err);
    if (j) pc_derived_refusal_put_for(identity, device, options, j->key, j->key_len, fb_refused_by(), why, 0);
}

void fjob_made_free(struct fjob_made *m)
{
    free(m->program);
    free(m->meta);
    free(m->params);
    job_free(m->job);
    memset(m, 0, sizeof *m);
}
