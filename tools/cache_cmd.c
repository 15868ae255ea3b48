/* cache_cmd.c — `clshim cache ...`: statistics, listing and maintenance of
 * the persistent cache (docs/cache.md shows every subcommand).
 *
 * Commands that only read open the cache read-only, so looking never
 * creates a cache, runs the age sweep or records a hit. Exit status: 0 done,
 * 1 failed (or bad entries remain), 2 usage. */
#include <ctype.h>
#include <errno.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <time.h>

#include "cache/entry.h"
#include "cache/keydiff.h"
#include "cache/remote.h"
#include "cache/sign.h"
#include "cache/store.h"
#include "common/config.h"
#include "common/error.h"
#include "program/capture_proc.h"
#include "tools/archive_sign.h"
#include "tools/capture_wait.h"
#include "tools/commands.h"
#include "tools/help.h"

static int usage_error(const char *fmt, const char *arg)
{
    fprintf(stderr, "clshim cache: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, " (clshim cache help)\n");
    return 2;
}

/* An unknown option (or value) of `clshim cache SUB`, in one line with its
 * did-you-mean from the command table (tools/help.h). */
static int unknown_option(const char *sub, const char *arg)
{
    char prefix[64], command[64];
    snprintf(prefix, sizeof prefix, "clshim cache: %s", sub);
    snprintf(command, sizeof command, "cache %s", sub);
    return help_unknown(prefix, command, arg);
}

/* Whether arg is option `name`, alone or as "NAME=VALUE". */
static int is_option(const char *arg, const char *name)
{
    size_t n = strlen(name);
    return !strncmp(arg, name, n) && (!arg[n] || arg[n] == '=');
}

static void human_size(uint64_t n, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, len, "%llu B", (unsigned long long)n);
    else snprintf(buf, len, "%.1f %s", v, unit[u]);
}

/* human_size() of a limit to suggest: rounded up, never below n. */
static void human_size_up(uint64_t n, char *buf, size_t len)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    uint64_t scale = 1;
    int u = 0;
    while (u < 4 && n >= scale * 1024) scale *= 1024, u++;
    if (u == 0) {
        snprintf(buf, len, "%llu B", (unsigned long long)n);
        return;
    }
    uint64_t tenths = (n * 10 + scale - 1) / scale;
    snprintf(buf, len, "%llu.%llu %s", (unsigned long long)(tenths / 10), (unsigned long long)(tenths % 10), unit[u]);
}

/* The same limit as a CLSHIM_CACHE_MAX_SIZE value (K or M, rounded up). */
static void knob_size_up(uint64_t n, char *buf, size_t len)
{
    if (n < (1u << 20)) snprintf(buf, len, "%lluK", (unsigned long long)((n + 1023) >> 10));
    else snprintf(buf, len, "%lluM", (unsigned long long)((n + (1u << 20) - 1) >> 20));
}

/* Where CLSHIM_CACHE_MAX_SIZE came from, for `stats`. */
static const char *limit_source(char *buf, size_t len)
{
    switch (config_get()->source[CONFIG_KNOB_CACHE_MAX_SIZE]) {
    case CONFIG_FROM_ENV: return "from the environment";
    case CONFIG_FROM_FILE: {
        char path[4096];
        const char *conf = config_file_path(path, sizeof path);
        snprintf(buf, len, "from the config file %s", conf ? conf : "");
        return buf;
    }
    default: return "the default";
    }
}

/* The line of `stats` under the size limit: how many misses were of
 * evicted entries, and the limit that would have kept those evicted for
 * size (store.h, store_was_evicted(), says how it is estimated). */
static void print_evicted_misses(const struct store_stats *st)
{
    uint64_t n = st->misses_evicted, age = st->misses_evicted_age, size = n > age ? n - age : 0;
    if (!n) return;
    printf("  %llu %s of %llu %s evicted entr%s", (unsigned long long)n, n == 1 ? "miss" : "misses",
           (unsigned long long)st->misses, n == 1 ? "was an" : "were", n == 1 ? "y" : "ies");
    if (size && st->evicted_keep_limit) {
        char human[32], knob[32];
        human_size_up(st->evicted_keep_limit, human, sizeof human);
        knob_size_up(st->evicted_keep_limit, knob, sizeof knob);
        printf(": a limit of %s would have kept ", human);
        if (age) printf("the %llu evicted for size", (unsigned long long)size);
        else printf("%s", n == 1 ? "it" : "them");
        printf(" (CLSHIM_CACHE_MAX_SIZE=%s)", knob);
        if (!st->max_size || st->max_size >= st->evicted_keep_limit) printf("; the limit in force now is no smaller");
    }
    if (age) printf("%s%llu evicted for age (unused for CLSHIM_CACHE_MAX_AGE days)", size ? "; " : ": ",
                    (unsigned long long)age);
    printf("\n");
}

static void human_age(uint64_t secs, char *buf, size_t len)
{
    if (secs < 120) snprintf(buf, len, "%llus", (unsigned long long)secs);
    else if (secs < 7200) snprintf(buf, len, "%llum", (unsigned long long)(secs / 60));
    else if (secs < 2 * 86400) snprintf(buf, len, "%lluh", (unsigned long long)(secs / 3600));
    else snprintf(buf, len, "%llud", (unsigned long long)(secs / 86400));
}

static void hash_hex(struct cache_hash h, char out[33])
{
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)h.hi, (unsigned long long)h.lo);
}

static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\') fprintf(f, "\\%c", *p);
        else if (*p < 0x20 || *p >= 0x7f) fprintf(f, "\\u%04x", *p);
        else fputc(*p, f);
    }
    fputc('"', f);
}

static uint64_t age_of(uint64_t now, uint64_t t) { return now > t ? now - t : 0; }

/* ---- opening ---- */

struct cmd_ctx {
    char dir[4096];
    store *s;
    const sign_trust *trust; /* verify --trust: entries not sealed by these are bad */
};

static int open_cache(struct cmd_ctx *c, int writable)
{
    const struct clshim_config *cfg = config_get();
    struct store_options o = {
        .dir = c->dir, .max_size = cfg->cache_max_size, .max_age_days = cfg->cache_max_age_days,
        .min_entry = cfg->cache_min_entry, .max_entry = cfg->cache_max_entry,
        .readonly = !writable || cfg->cache_readonly, .allow_shared = cfg->cache_allow_shared,
        .compress_level = (int)cfg->cache_compress_level, .trust = c->trust,
    };
    int rc = store_open(&o, &c->s);
    if (rc == CLSHIM_ENOTFOUND) return rc; /* the caller says what that means for it */
    if (rc) {
        fprintf(stderr, "clshim cache: cannot open the cache in %s: %s\n", c->dir, clshim_strerror(rc));
        return rc;
    }
    if (writable && store_is_readonly(c->s)) {
        fprintf(stderr, "clshim cache: the cache in %s is read-only here%s; nothing changed\n", c->dir,
                cfg->cache_readonly ? " (CLSHIM_CACHE_READONLY=1)" : "");
        store_close(c->s);
        c->s = NULL;
        return CLSHIM_EREADONLY;
    }
    return CLSHIM_OK;
}

/* ---- stats, zero ---- */

/* The remote tier's counters of this cache (`stats`, `remote stats`). */
static void print_remote_counters(const struct store_stats *st)
{
    const struct { const char *label; uint64_t n; const char *note; } rows[] = {
        {"Remote hits", st->remote_hits, ""},
        {"Remote misses", st->remote_misses, ""},
        {"Remote errors", st->remote_errors, ""},
        {"  timeouts", st->remote_timeouts, " (a lookup's deadline passed)"},
        {"  connections lost", st->remote_lost, ""},
        {"  garbage replies", st->remote_garbage, ""},
        {"  oversize replies", st->remote_oversize, ""},
        {"  refused commands", st->remote_refused, ""},
        {"Remote values ignored", st->remote_corrupt, " (failed verification)"},
        {"Remote values untrusted", st->remote_untrusted, " (ignored: untrusted)"},
        {"Remote copies deleted", st->remote_distrusted, " (signer no longer trusted)"},
        {"Remote pushes", st->remote_pushes, ""},
        {"Remote pushes refused", st->remote_pushes_refused, " (the server answered with an error)"},
        {"Entries untrusted", st->untrusted, " (not sealed by a key in CLSHIM_TRUST: ignored, kept)"},
    };
    for (size_t i = 0; i < sizeof rows / sizeof *rows; i++)
        printf("%-25s%llu%s\n", rows[i].label, (unsigned long long)rows[i].n, rows[i].note);
}

/* Hits the counters do not place: those a record written before disk_hits
 * and memory_hits existed (or by an older clshim) counted in hits only. */
static uint64_t hits_not_split(const struct store_stats *st)
{
    uint64_t placed = st->disk_hits + st->memory_hits + st->remote_hits;
    return st->hits > placed ? st->hits - placed : 0;
}

static int cmd_stats(struct cmd_ctx *c, int argc, char **argv)
{
    int json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else return unknown_option("stats", argv[i]);
    }
    struct store_stats st = {0};
    int rc = open_cache(c, 0);
    if (rc && rc != CLSHIM_ENOTFOUND) return 1;
    if (rc == CLSHIM_OK) {
        rc = store_stats_get(c->s, &st);
        if (rc) {
            fprintf(stderr, "clshim cache: cannot read statistics: %s\n", clshim_strerror(rc));
            return 1;
        }
    } else {
        st.max_size = config_get()->cache_max_size;
    }
    uint64_t lookups = st.hits + st.misses;
    double rate = lookups ? 100.0 * (double)st.hits / (double)lookups : 0;
    double ratio = st.stored_bytes ? (double)st.uncompressed_bytes / (double)st.stored_bytes : 0;
    if (json) {
        static const char *const source_names[] = {"default", "config file", "environment"};
        printf("{\"dir\": ");
        json_string(stdout, c->dir);
        printf(", \"exists\": %s, \"hits\": %llu, \"misses\": %llu, \"hit_rate\": %.4f, \"stores\": %llu, "
               "\"evictions_size\": %llu, \"evictions_age\": %llu, \"rejected\": %llu, \"collisions\": %llu, "
               "\"corrupt\": %llu, \"entries\": %llu, \"stored_bytes\": %llu, \"uncompressed_bytes\": %llu, "
               "\"compression_ratio\": %.3f, \"max_size\": %llu, \"compile_ns_saved\": %llu, \"uncacheable\": %llu, "
               "\"uncacheable_headers\": %llu, \"uncacheable_time_macros\": %llu, \"remote_hits\": %llu, "
               "\"remote_misses\": %llu, \"remote_errors\": %llu, \"remote_corrupt\": %llu, \"remote_pushes\": %llu, "
               "\"remote_timeouts\": %llu, \"remote_lost\": %llu, \"remote_garbage\": %llu, \"remote_oversize\": %llu, "
               "\"remote_refused\": %llu, \"remote_untrusted\": %llu, \"remote_distrusted\": %llu, "
               "\"remote_pushes_refused\": %llu, ",
               c->s ? "true" : "false", (unsigned long long)st.hits, (unsigned long long)st.misses,
               rate / 100, (unsigned long long)st.stores, (unsigned long long)st.evictions_size,
               (unsigned long long)st.evictions_age, (unsigned long long)st.rejected,
               (unsigned long long)st.collisions, (unsigned long long)st.corrupt, (unsigned long long)st.entries,
               (unsigned long long)st.stored_bytes, (unsigned long long)st.uncompressed_bytes, ratio,
               (unsigned long long)st.max_size, (unsigned long long)st.compile_ns_saved,
               (unsigned long long)st.uncacheable, (unsigned long long)st.uncacheable_headers,
               (unsigned long long)st.uncacheable_time_macros, (unsigned long long)st.remote_hits,
               (unsigned long long)st.remote_misses, (unsigned long long)st.remote_errors,
               (unsigned long long)st.remote_corrupt, (unsigned long long)st.remote_pushes,
               (unsigned long long)st.remote_timeouts, (unsigned long long)st.remote_lost,
               (unsigned long long)st.remote_garbage, (unsigned long long)st.remote_oversize,
               (unsigned long long)st.remote_refused, (unsigned long long)st.remote_untrusted,
               (unsigned long long)st.remote_distrusted, (unsigned long long)st.remote_pushes_refused);
        printf("\"disk_hits\": %llu, \"memory_hits\": %llu, \"hits_not_split\": %llu, \"untrusted\": %llu, ",
               (unsigned long long)st.disk_hits, (unsigned long long)st.memory_hits,
               (unsigned long long)hits_not_split(&st), (unsigned long long)st.untrusted);
        printf("\"misses_evicted\": %llu, \"misses_evicted_age\": %llu, \"evicted_keep_limit\": %llu, "
               "\"max_size_source\": \"%s\", ", (unsigned long long)st.misses_evicted,
               (unsigned long long)st.misses_evicted_age, (unsigned long long)st.evicted_keep_limit,
               source_names[config_get()->source[CONFIG_KNOB_CACHE_MAX_SIZE]]);
        uint64_t lost = 0;
        for (int i = 0; i < CAPTURE_LOST_COUNT; i++) lost += st.capture_lost[i];
        printf("\"captures_handed\": %llu, \"captures_stored\": %llu, \"captures_lost\": %llu, "
               "\"captures_lost_by_reason\": {",
               (unsigned long long)st.captures_handed, (unsigned long long)st.captures_stored,
               (unsigned long long)lost);
        for (int i = 0; i < CAPTURE_LOST_COUNT; i++)
            printf("%s\"%s\": %llu", i ? ", " : "", capture_lost_name((enum capture_lost)i),
                   (unsigned long long)st.capture_lost[i]);
        printf("}}\n");
        return 0;
    }
    char a[32], b[32], lim[32], from[4200];
    human_size(st.stored_bytes, a, sizeof a);
    human_size(st.uncompressed_bytes, b, sizeof b);
    printf("Cache directory          %s%s\n", c->dir, c->s ? "" : " (no cache yet)");
    printf("Hits                     %llu", (unsigned long long)st.hits);
    if (st.hits) {
        /* Where they came from: `cache list`'s DISK HITS sum to the first. */
        printf(" (%llu from disk, %llu from memory", (unsigned long long)st.disk_hits,
               (unsigned long long)st.memory_hits);
        if (st.remote_hits) printf(", %llu from the remote tier", (unsigned long long)st.remote_hits);
        if (hits_not_split(&st))
            printf(", %llu not split: counted before clshim split them", (unsigned long long)hits_not_split(&st));
        printf("; %.1f %% of lookups)", rate);
    } else if (lookups) {
        printf(" (%.1f %%)", rate);
    }
    printf("\nMisses                   %llu\n", (unsigned long long)st.misses);
    printf("  of evicted entries     %llu\n", (unsigned long long)st.misses_evicted);
    printf("Stores                   %llu\n", (unsigned long long)st.stores);
    printf("Evictions (size)         %llu\n", (unsigned long long)st.evictions_size);
    printf("Evictions (age)          %llu\n", (unsigned long long)st.evictions_age);
    printf("Rejected by the driver   %llu\n", (unsigned long long)st.rejected);
    printf("Collisions               %llu\n", (unsigned long long)st.collisions);
    printf("Corrupt entries          %llu\n", (unsigned long long)st.corrupt);
    printf("Uncacheable programs     %llu\n", (unsigned long long)st.uncacheable);
    printf("  headers not listable   %llu\n", (unsigned long long)st.uncacheable_headers);
    printf("  time macros            %llu\n", (unsigned long long)st.uncacheable_time_macros);
    printf("Entries                  %llu\n", (unsigned long long)st.entries);
    printf("Stored size              %s", a);
    if (st.stored_bytes) printf(" (%s uncompressed, ratio %.2f)", b, ratio);
    if (st.max_size) {
        human_size(st.max_size, lim, sizeof lim);
        printf("\nSize limit               %s (%.1f %% used; CLSHIM_CACHE_MAX_SIZE, %s)\n", lim,
               100.0 * (double)st.stored_bytes / (double)st.max_size, limit_source(from, sizeof from));
    } else {
        printf("\nSize limit               none (CLSHIM_CACHE_MAX_SIZE=0, %s)\n", limit_source(from, sizeof from));
    }
    print_evicted_misses(&st);
    printf("Compile time saved       %.2f s\n", (double)st.compile_ns_saved / 1e9);
    print_remote_counters(&st);
    /* Late captures (PoCL): every one not made is counted by its reason. */
    uint64_t lost = 0;
    for (int i = 0; i < CAPTURE_LOST_COUNT; i++) lost += st.capture_lost[i];
    printf("Captures handed over     %llu (to the capture helper)\n", (unsigned long long)st.captures_handed);
    printf("Captures stored          %llu\n", (unsigned long long)st.captures_stored);
    printf("Captures not made        %llu\n", (unsigned long long)lost);
    for (int i = 0; i < CAPTURE_LOST_COUNT; i++)
        if (st.capture_lost[i])
            printf("  %-22s %llu\n", capture_lost_name((enum capture_lost)i), (unsigned long long)st.capture_lost[i]);
    return 0;
}

static int cmd_zero(struct cmd_ctx *c, int argc, char **argv)
{
    if (argc > 1) return usage_error("zero: unexpected argument '%s'", argv[1]);
    int rc = open_cache(c, 1);
    if (rc == CLSHIM_ENOTFOUND) rc = CLSHIM_OK;
    if (rc) return 1;
    rc = store_stats_zero(c->s);
    if (rc) {
        fprintf(stderr, "clshim cache: cannot zero the statistics: %s\n", clshim_strerror(rc));
        return 1;
    }
    printf("Statistics zeroed.\n");
    return 0;
}

/* ---- list, show ---- */

struct item {
    struct cache_hash hash;
    uint64_t stored, binary, created, last_access, hits;
    uint32_t origin;
    char device[96];
    int from_remote, is_signed, is_sealed;
    char signer[2 * SIGN_PUBLIC_BYTES + 1]; /* hex, when signed */
    char sealer[2 * SIGN_PUBLIC_BYTES + 1]; /* hex, when sealed */
};

/* Where an entry came from, as list and show say it: "here", or
 * "remote/SIGNERID" (16 hex digits), or "remote/unsigned". */
static void source_short(const struct item *it, char *buf, size_t len)
{
    if (!it->from_remote) snprintf(buf, len, "here");
    else snprintf(buf, len, "remote/%.16s", it->is_signed ? it->signer : "unsigned");
}

static void item_source(struct item *it, const struct store_source *src)
{
    it->from_remote = src && src->kind == STORE_SOURCE_REMOTE;
    it->is_signed = it->from_remote && (src->flags & STORE_SOURCE_SIGNED);
    if (it->is_signed) sodium_bin2hex(it->signer, sizeof it->signer, src->signer, SIGN_PUBLIC_BYTES);
    it->is_sealed = src && (src->flags & STORE_SOURCE_SEALED);
    if (it->is_sealed) sodium_bin2hex(it->sealer, sizeof it->sealer, src->seal_signer, SIGN_PUBLIC_BYTES);
}

struct item_list {
    struct item *v;
    size_t n, cap;
    int oom;
};

static int collect_fn(const struct store_entry_info *e, void *ctx)
{
    struct item_list *l = ctx;
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 256;
        struct item *p = realloc(l->v, cap * sizeof *p);
        if (!p) { l->oom = 1; return 1; }
        l->v = p, l->cap = cap;
    }
    struct item *it = &l->v[l->n++];
    *it = (struct item){e->hash, e->stored_size, e->binary_size, e->created, e->last_access, e->hits,
                        e->origin, "", 0, 0, 0, "", ""};
    snprintf(it->device, sizeof it->device, "%s", e->device_name ? e->device_name : "");
    item_source(it, e->source);
    return 0;
}

static int by_key(const void *a, const void *b)
{
    const struct item *x = a, *y = b;
    if (x->hash.hi != y->hash.hi) return x->hash.hi < y->hash.hi ? -1 : 1;
    return x->hash.lo < y->hash.lo ? -1 : x->hash.lo > y->hash.lo;
}
#define CMP_DESC(field) (x->field != y->field ? (x->field > y->field ? -1 : 1) : by_key(a, b))
#define CMP_ASC(field) (x->field != y->field ? (x->field < y->field ? -1 : 1) : by_key(a, b))
static int by_size(const void *a, const void *b) { const struct item *x = a, *y = b; return CMP_DESC(stored); }
static int by_age(const void *a, const void *b) { const struct item *x = a, *y = b; return CMP_ASC(created); }
static int by_hits(const void *a, const void *b) { const struct item *x = a, *y = b; return CMP_DESC(hits); }
static int by_use(const void *a, const void *b) { const struct item *x = a, *y = b; return CMP_ASC(last_access); }

static int cmd_list(struct cmd_ctx *c, int argc, char **argv)
{
    int json = 0;
    int (*cmp)(const void *, const void *) = by_key;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--sort=size")) cmp = by_size;
        else if (!strcmp(argv[i], "--sort=age")) cmp = by_age;
        else if (!strcmp(argv[i], "--sort=hits")) cmp = by_hits;
        else if (!strcmp(argv[i], "--sort=last-use")) cmp = by_use;
        else return unknown_option("list", argv[i]);
    }
    int rc = open_cache(c, 0);
    if (rc && rc != CLSHIM_ENOTFOUND) return 1;
    struct item_list l = {0};
    if (rc == CLSHIM_OK && (rc = store_foreach(c->s, collect_fn, &l)) == CLSHIM_OK && l.oom) rc = CLSHIM_ENOMEM;
    if (rc && rc != CLSHIM_ENOTFOUND) {
        fprintf(stderr, "clshim cache: cannot list the entries: %s\n", clshim_strerror(rc));
        free(l.v);
        return 1;
    }
    if (l.n) qsort(l.v, l.n, sizeof *l.v, cmp);
    uint64_t now = (uint64_t)time(NULL);
    char hex[33];
    if (json) {
        printf("[");
        for (size_t i = 0; i < l.n; i++) {
            struct item *it = &l.v[i];
            hash_hex(it->hash, hex);
            printf("%s\n  {\"key\": \"%s\", \"device\": ", i ? "," : "", hex);
            json_string(stdout, it->device);
            printf(", \"stored_size\": %llu, \"binary_size\": %llu, \"created\": %llu, \"last_access\": %llu, "
                   "\"disk_hits\": %llu, \"origin\": \"%s\", \"source\": \"%s\", \"signer\": ",
                   (unsigned long long)it->stored, (unsigned long long)it->binary, (unsigned long long)it->created,
                   (unsigned long long)it->last_access, (unsigned long long)it->hits, entry_origin_name(it->origin),
                   it->from_remote ? "remote" : "here");
            if (it->is_signed) json_string(stdout, it->signer);
            else printf("null");
            printf(", \"sealed_by\": ");
            if (it->is_sealed) json_string(stdout, it->sealer);
            else printf("null");
            printf("}");
        }
        printf("%s]\n", l.n ? "\n" : "");
    } else {
        printf("%-16s  %-28s  %10s  %10s  %5s  %8s  %9s  %-8s  %s\n", "KEY", "DEVICE", "STORED", "BINARY", "AGE",
               "LAST USE", "DISK HITS", "ORIGIN", "FROM");
        for (size_t i = 0; i < l.n; i++) {
            struct item *it = &l.v[i];
            char st[32], bin[32], age[16], use[16], from[40];
            hash_hex(it->hash, hex);
            hex[16] = 0;
            human_size(it->stored, st, sizeof st);
            human_size(it->binary, bin, sizeof bin);
            human_age(age_of(now, it->created), age, sizeof age);
            human_age(age_of(now, it->last_access), use, sizeof use);
            source_short(it, from, sizeof from);
            printf("%-16s  %-28.28s  %10s  %10s  %5s  %8s  %9llu  %-8s  %s\n", hex, it->device, st, bin, age, use,
                   (unsigned long long)it->hits, entry_origin_name(it->origin), from);
        }
        printf("%zu entr%s\n", l.n, l.n == 1 ? "y" : "ies");
    }
    free(l.v);
    return 0;
}

struct find_ctx {
    const char *prefix; /* lower-case hex */
    size_t matches;
    struct store_entry_info info;
    void *key; /* a copy of the first match's key material */
    char device[256];
    struct store_source source;
    int quiet; /* say nothing of further matches */
};

static int find_fn(const struct store_entry_info *e, void *ctx)
{
    struct find_ctx *f = ctx;
    char hex[33];
    hash_hex(e->hash, hex);
    if (strncmp(hex, f->prefix, strlen(f->prefix)) != 0) return 0;
    if (f->matches++ == 0) {
        f->info = *e;
        f->key = malloc(e->key_len ? e->key_len : 1);
        if (f->key) memcpy(f->key, e->key, e->key_len);
        snprintf(f->device, sizeof f->device, "%s", e->device_name ? e->device_name : "");
        if (e->source) f->source = *e->source;
        f->info.key = f->key, f->info.device_name = f->device, f->info.source = e->source ? &f->source : NULL;
    } else if (!f->quiet) {
        fprintf(stderr, "  %s %s\n", hex, e->device_name);
    }
    return 0;
}

static void hex_dump(const unsigned char *p, size_t n, size_t limit)
{
    size_t shown = n < limit ? n : limit;
    for (size_t off = 0; off < shown; off += 16) {
        printf("    %06zx ", off);
        for (size_t i = 0; i < 16; i++) {
            if (off + i < shown) printf(" %02x", p[off + i]);
            else printf("   ");
        }
        printf("  |");
        for (size_t i = 0; i < 16 && off + i < shown; i++) putchar(isprint(p[off + i]) ? p[off + i] : '.');
        printf("|\n");
    }
    if (shown < n) printf("    ... %zu more bytes\n", n - shown);
}

/* Key material is mostly "name=value" lines: print text lines as they are
 * and hex-dump the stretches that are not text (IL, binaries). */
static void print_material(const unsigned char *p, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t end = i;
        while (end < n && p[end] != '\n') end++;
        int text = 1;
        for (size_t j = i; j < end && text; j++) text = isprint(p[j]) || p[j] == '\t';
        if (text) {
            printf("    %.*s\n", (int)(end - i), (const char *)p + i);
            i = end < n ? end + 1 : end;
            continue;
        }
        /* A binary stretch: up to the next line that reads as text. */
        size_t j = i;
        while (j < n) {
            size_t e = j;
            while (e < n && p[e] != '\n') e++;
            int t = e > j;
            for (size_t k = j; k < e && t; k++) t = isprint(p[k]) && p[k] != '\t';
            if (t && j > i && e - j >= 8) break;
            j = e < n ? e + 1 : e;
        }
        printf("    [%zu bytes, not text]\n", j - i);
        hex_dump(p + i, j - i, 4096);
        i = j;
    }
}

/* A key prefix as typed (1-32 hex digits) in lower case; -1 when it is not one. */
static int parse_prefix(const char *arg, char prefix[33])
{
    size_t n = strlen(arg);
    if (n == 0 || n > 32) return -1;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && !isxdigit((unsigned char)arg[i])) return -1;
        prefix[i] = (char)tolower((unsigned char)arg[i]);
    }
    return 0;
}

/* The one entry whose key starts with prefix into *f (free f->key); -1
 * (said why) when none or several match. */
static int find_one(struct cmd_ctx *c, const char *prefix, struct find_ctx *f, int quiet)
{
    *f = (struct find_ctx){.prefix = prefix, .quiet = quiet};
    int rc = store_foreach(c->s, find_fn, f);
    if (rc) fprintf(stderr, "clshim cache: cannot read the entries: %s\n", clshim_strerror(rc));
    else if (f->matches == 0) fprintf(stderr, "clshim cache: no entry has a key starting with %s\n", prefix);
    else if (f->matches > 1) fprintf(stderr, "clshim cache: %zu entries match %s; give more digits\n", f->matches, prefix);
    else if (!f->key) fprintf(stderr, "clshim cache: out of memory\n");
    if (!rc && f->matches == 1 && f->key) return 0;
    free(f->key);
    f->key = NULL;
    return -1;
}

/* The cache opened to read: 0, or 1 after saying why not (none there). */
static int open_to_read(struct cmd_ctx *c)
{
    int rc = open_cache(c, 0);
    if (rc == CLSHIM_ENOTFOUND) fprintf(stderr, "clshim cache: no cache in %s\n", c->dir);
    return rc ? 1 : 0;
}

static int cmd_show(struct cmd_ctx *c, int argc, char **argv)
{
    if (argc != 2) return usage_error("show: %s", argc < 2 ? "which entry? give a key prefix" : "one key prefix only");
    char prefix[33];
    if (parse_prefix(argv[1], prefix)) return usage_error("show: '%s' is not a key prefix (1-32 hex digits)", argv[1]);
    if (open_to_read(c)) return 1;
    struct find_ctx f;
    if (find_one(c, prefix, &f, 0)) return 1;
    struct store_entry_info *e = &f.info;
    char hex[33], sz[32], bsz[32], when[64];
    uint64_t now = (uint64_t)time(NULL);
    hash_hex(e->hash, hex);
    printf("Key                %s\n", hex);
    printf("Device             %s\n", e->device_name);
    printf("Origin             %s\n", entry_origin_name(e->origin));
    human_size(e->stored_size, sz, sizeof sz);
    human_size(e->binary_size, bsz, sizeof bsz);
    printf("Stored size        %s (binary %s)\n", sz, bsz);
    time_t t = (time_t)e->created;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    human_age(age_of(now, e->created), sz, sizeof sz);
    printf("Created            %s (%s ago)\n", when, sz);
    t = (time_t)e->last_access;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    human_age(age_of(now, e->last_access), sz, sizeof sz);
    printf("Last use           %s (%s ago)\n", when, sz);
    printf("Disk hits          %llu\n", (unsigned long long)e->hits);
    if (e->source && (e->source->flags & STORE_SOURCE_SEALED)) {
        char sealer[2 * SIGN_PUBLIC_BYTES + 1];
        sodium_bin2hex(sealer, sizeof sealer, e->source->seal_signer, SIGN_PUBLIC_BYTES);
        printf("Sealed by          %s\n", sealer);
    } else {
        printf("Sealed by          nobody (unsealed)\n");
    }
    if (!e->source || e->source->kind != STORE_SOURCE_REMOTE) {
        printf("Source             built here\n");
    } else {
        char signer[2 * SIGN_PUBLIC_BYTES + 1] = "";
        if (e->source->flags & STORE_SOURCE_SIGNED)
            sodium_bin2hex(signer, sizeof signer, e->source->signer, SIGN_PUBLIC_BYTES);
        printf("Source             remote: %s\n", e->source->where);
        printf("Signed by          %s\n", *signer ? signer : "nobody (unsigned)");
    }
    struct store_record r;
    void *arena = NULL;
    int rc = store_get(c->s, e->hash, e->key, e->key_len, &r, &arena);
    printf("Check              %s\n", rc == CLSHIM_OK ? "ok" : clshim_strerror(rc));
    if (rc == CLSHIM_OK) printf("Compile time       %.3f s\n", (double)r.compile_ns / 1e9);
    uint64_t load_ns, compile_ns;
    if (store_slow_load(c->s, e->hash, &load_ns, &compile_ns) == CLSHIM_OK)
        printf("Load cost          %.1f ms of CPU time at its first hit, more than its compile (%.1f ms): "
               "not loaded, the driver compiles it\n", load_ns / 1e6, compile_ns / 1e6);
    printf("Key material       %zu bytes:\n", e->key_len);
    struct cache_hash h = entry_xxh3_128(e->key, e->key_len);
    print_material(e->key, e->key_len);
    if (h.lo != e->hash.lo || h.hi != e->hash.hi) printf("    (the material does not hash to this key)\n");
    if (rc == CLSHIM_OK) {
        printf("Build log%s\n", *r.build_log ? ":" : "          (empty)");
        if (*r.build_log) printf("%s%s", r.build_log, r.build_log[strlen(r.build_log) - 1] == '\n' ? "" : "\n");
    }
    store_record_free(arena);
    free(f.key);
    return rc == CLSHIM_OK ? 0 : 1;
}

/* ---- why ---- */

static void print_when(const char *label, uint64_t secs, uint64_t now)
{
    char when[64], age[32];
    time_t t = (time_t)secs;
    strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S", localtime(&t));
    human_age(age_of(now, secs), age, sizeof age);
    printf(" (%s %s, %s ago)\n", label, when, age);
}

/* A value of an item as `why` prints it: "(not in this key)", "(unset)"
 * for a driver variable, "(absent)" for a header absent at that place. */
static const char *why_value(const struct keydiff_item *it, const char *v)
{
    if (!v) return it->field == KEYDIFF_DRIVER_ENV ? "(unset)" : "(not in this key)";
    if (!*v && (it->field == KEYDIFF_HEADER || it->field == KEYDIFF_DRIVER_DIR || it->field == KEYDIFF_HEADER_PLACE))
        return "(absent)";
    return v;
}

static void why_json(const struct keydiff_miss *m, int last, const struct keydiff_near *near)
{
    char hex[33];
    hash_hex(m->hash, hex);
    printf("{\"key\": \"%s\", \"last_miss\": %s", hex, last ? "true" : "false");
    if (last) printf(", \"when\": %llu", (unsigned long long)m->when);
    if (!near->diff) {
        printf(", \"nearest\": null, \"differences\": []}\n");
        return;
    }
    hash_hex(near->hash, hex);
    printf(", \"nearest\": \"%s\", \"nearest_created\": %llu, \"differences\": [", hex,
           (unsigned long long)near->created);
    for (size_t i = 0; i < keydiff_count(near->diff); i++) {
        const struct keydiff_item *it = keydiff_item(near->diff, i);
        char text[1024];
        keydiff_describe(it, text, sizeof text);
        printf("%s{\"field\": ", i ? ", " : "");
        json_string(stdout, keydiff_field_name(it->field));
        printf(", \"name\": ");
        json_string(stdout, it->name);
        printf(", \"stored\": ");
        if (it->stored) json_string(stdout, it->stored);
        else printf("null");
        printf(", \"now\": ");
        if (it->now) json_string(stdout, it->now);
        else printf("null");
        printf(", \"text\": ");
        json_string(stdout, text);
        printf("}");
    }
    printf("]}\n");
}

static void why_text(const struct keydiff_miss *m, int last, const struct keydiff_near *near)
{
    char hex[33];
    uint64_t now = (uint64_t)time(NULL);
    hash_hex(m->hash, hex);
    if (!near->diff) {
        printf("%s: no stored neighbour (the cache holds no other entry of the same program)\n", hex);
        return;
    }
    printf("Key                %s", hex);
    if (last) print_when("the last miss,", m->when, now);
    else printf("\n");
    hash_hex(near->hash, hex);
    printf("Nearest            %s", hex);
    print_when("stored", near->created, now);
    size_t n = keydiff_count(near->diff);
    printf("Differences        %zu (the nearest's, then this key's)\n", n);
    for (size_t i = 0; i < n; i++) {
        const struct keydiff_item *it = keydiff_item(near->diff, i);
        char text[1024];
        keydiff_describe(it, text, sizeof text);
        printf("  %s\n    stored   %s\n    now      %s\n", text, why_value(it, it->stored), why_value(it, it->now));
    }
}

/* `why KEYPREFIX | --last [--json]`: the key (a stored entry's, or the
 * last miss's) against its nearest stored neighbour (cache/keydiff.h). */
static int cmd_why(struct cmd_ctx *c, int argc, char **argv)
{
    int json = 0, last = 0;
    const char *arg = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--json")) json = 1;
        else if (!strcmp(argv[i], "--last")) last = 1;
        else if (argv[i][0] == '-') return unknown_option("why", argv[i]);
        else if (arg) return usage_error("why: %s", "one key prefix only");
        else arg = argv[i];
    }
    if (last == (arg != NULL))
        return usage_error("why: %s", last ? "a key prefix or --last, not both" : "which key? give a key prefix or --last");
    char prefix[33];
    if (arg && parse_prefix(arg, prefix)) return usage_error("why: '%s' is not a key prefix (1-32 hex digits)", arg);
    if (open_to_read(c)) return 1;
    struct keydiff_miss m;
    struct find_ctx f = {0};
    char hex[33] = "";
    /* A prefix of the last miss names it, stored or not (a capture not made). */
    int rc = keydiff_last_miss(c->s, &m);
    if (rc == CLSHIM_OK) hash_hex(m.hash, hex);
    if (rc == CLSHIM_OK && !last && strncmp(hex, prefix, strlen(prefix)) != 0) keydiff_miss_free(&m), rc = CLSHIM_ENOTFOUND;
    if (last && rc == CLSHIM_ENOTFOUND) {
        if (json) printf("{\"key\": null, \"last_miss\": true, \"nearest\": null, \"differences\": []}\n");
        else printf("no miss recorded in %s yet\n", c->dir);
        return 0;
    }
    if (last && rc) {
        fprintf(stderr, "clshim cache: cannot read the last miss: %s\n", clshim_strerror(rc));
        return 1;
    }
    if (!last && rc != CLSHIM_OK) {
        if (find_one(c, prefix, &f, 0)) return 1;
        if (keydiff_miss_of(f.info.hash, f.key, f.info.key_len, &m) != 0) {
            fprintf(stderr, "clshim cache: entry %s: its key material cannot be read\n", prefix);
            free(f.key);
            return 1;
        }
    }
    int from_last = m.buf != NULL; /* the last miss's record, with its time */
    struct keydiff_near near;
    rc = keydiff_nearest(c->s, &m, &near);
    if (rc < 0) {
        fprintf(stderr, "clshim cache: cannot read the entries: %s\n", clshim_strerror(rc));
    } else if (json) {
        why_json(&m, from_last, &near);
    } else {
        why_text(&m, from_last, &near);
    }
    keydiff_free(near.diff);
    keydiff_miss_free(&m);
    free(f.key);
    return rc < 0 ? 1 : 0;
}

/* `rm KEYPREFIX...`: each must name one entry; the others are still removed. */
static int cmd_rm(struct cmd_ctx *c, int argc, char **argv)
{
    if (argc < 2) return usage_error("rm: %s", "which entries? give key prefixes (clshim cache list shows them)");
    char prefix[33];
    for (int i = 1; i < argc; i++)
        if (parse_prefix(argv[i], prefix)) return usage_error("rm: '%s' is not a key prefix (1-32 hex digits)", argv[i]);
    int rc = open_cache(c, 1);
    if (rc == CLSHIM_ENOTFOUND) fprintf(stderr, "clshim cache: no cache in %s\n", c->dir);
    if (rc) return 1;
    int failed = 0;
    for (int i = 1; i < argc; i++) {
        struct find_ctx f;
        parse_prefix(argv[i], prefix);
        if (find_one(c, prefix, &f, 1)) {
            failed = 1;
            continue;
        }
        char hex[33];
        hash_hex(f.info.hash, hex);
        free(f.key);
        if ((rc = store_delete(c->s, f.info.hash)) != CLSHIM_OK) {
            fprintf(stderr, "clshim cache: cannot remove %s: %s\n", hex, clshim_strerror(rc));
            failed = 1;
        } else {
            printf("Removed %s.\n", hex);
        }
    }
    return failed;
}

/* ---- evict, clear, verify, compact ---- */

/* Deletes every local copy of a remote value; *n receives how many. */
static int evict_remote_copies(store *s, uint64_t *n)
{
    struct item_list l = {0};
    int rc = store_foreach(s, collect_fn, &l);
    if (rc == CLSHIM_OK && l.oom) rc = CLSHIM_ENOMEM;
    *n = 0;
    for (size_t i = 0; rc == CLSHIM_OK && i < l.n; i++) {
        if (!l.v[i].from_remote) continue;
        int d = store_delete(s, l.v[i].hash);
        if (d == CLSHIM_OK) ++*n;
        else if (d != CLSHIM_ENOTFOUND) rc = d; /* deleted meanwhile: fine */
    }
    free(l.v);
    return rc;
}

/* An age: a number with s, m, h, d or w (a bare number is days, as before
 * units were accepted) into seconds; -1 when it is not one. */
static int parse_age(const char *text, uint64_t *seconds)
{
    char *end;
    errno = 0;
    if (!isdigit((unsigned char)*text)) return -1;
    unsigned long long v = strtoull(text, &end, 10);
    uint64_t unit;
    switch (*end) {
    case 's': unit = 1; break;
    case 'm': unit = 60; break;
    case 'h': unit = 3600; break;
    case 0:
    case 'd': unit = 86400; break;
    case 'w': unit = 7 * 86400; break;
    default: return -1;
    }
    if (errno || (*end && end[1]) || v > UINT64_MAX / unit) return -1;
    *seconds = v * unit;
    return 0;
}

static int cmd_evict(struct cmd_ctx *c, int argc, char **argv)
{
    uint64_t age = 0, to_size = UINT64_MAX;
    int any = 0, remote_copies = 0;
    for (int i = 1; i < argc; i++) {
        const char *val = NULL;
        if (!strcmp(argv[i], "--origin=remote") ||
            (!strcmp(argv[i], "--origin") && i + 1 < argc && !strcmp(argv[i + 1], "remote") && ++i)) {
            remote_copies = any = 1;
            continue;
        }
        if (!strncmp(argv[i], "--origin", 8))
            return usage_error("evict: %s", "--origin takes one value: remote (every local copy of a remote value)");
        int is_age = is_option(argv[i], "--older-than"), is_size = is_option(argv[i], "--to-size");
        if (!is_age && !is_size) return unknown_option("evict", argv[i]);
        const char *eq = strchr(argv[i], '=');
        if (eq) val = eq + 1;
        else if (i + 1 < argc) val = argv[++i];
        else return usage_error("evict: %s needs a value", argv[i]);
        uint64_t v;
        if (is_age) {
            if (parse_age(val, &v) != 0)
                return usage_error("evict: --older-than '%s' is not an age (like 30m, 12h or 7d)", val);
            if (v == 0) return usage_error("evict: --older-than needs an age above %s", "0");
            age = v;
        } else if (config_parse(CONFIG_SIZE, val, &v) != 0) {
            return usage_error("evict: '%s' is not a size (like 500M or 2G)", val);
        } else {
            to_size = v;
        }
        any = 1;
    }
    if (!any)
        return usage_error("evict: say what to evict: %s",
                           "--older-than AGE, --to-size SIZE and/or --origin=remote");
    int rc = open_cache(c, 1);
    if (rc == CLSHIM_ENOTFOUND) rc = CLSHIM_OK;
    if (rc) return 1;
    uint64_t n = 0, copies = 0;
    if (remote_copies && (rc = evict_remote_copies(c->s, &copies)) != CLSHIM_OK) {
        fprintf(stderr, "clshim cache: eviction of remote copies failed: %s\n", clshim_strerror(rc));
        return 1;
    }
    if (remote_copies) printf("Removed %llu local cop%s of remote values.\n", (unsigned long long)copies,
                              copies == 1 ? "y" : "ies");
    if ((age || to_size != UINT64_MAX) && (rc = store_evict(c->s, age, to_size, &n)) != CLSHIM_OK) {
        fprintf(stderr, "clshim cache: eviction failed: %s\n", clshim_strerror(rc));
        return 1;
    }
    struct store_stats st;
    store_stats_get(c->s, &st);
    char sz[32];
    human_size(st.stored_bytes, sz, sizeof sz);
    printf("Evicted %llu entr%s; %llu left (%s).\n", (unsigned long long)(n + copies),
           n + copies == 1 ? "y" : "ies", (unsigned long long)st.entries, sz);
    return 0;
}

static int cmd_clear(struct cmd_ctx *c, int argc, char **argv)
{
    if (argc > 1) return usage_error("clear: unexpected argument '%s'", argv[1]);
    int rc = open_cache(c, 1);
    if (rc == CLSHIM_ENOTFOUND) rc = CLSHIM_OK;
    if (rc) return 1;
    struct store_stats st;
    store_stats_get(c->s, &st);
    if ((rc = store_clear(c->s)) != CLSHIM_OK) {
        fprintf(stderr, "clshim cache: clear failed: %s\n", clshim_strerror(rc));
        return 1;
    }
    printf("Removed %llu entr%s.\n", (unsigned long long)st.entries, st.entries == 1 ? "y" : "ies");
    return 0;
}

static void print_bad(const char *what, const char *why, void *ctx)
{
    (void)ctx;
    printf("bad %s: %s\n", what, why);
}

static int verify_open(struct cmd_ctx *c, int fix, int trusting);

static int cmd_verify(struct cmd_ctx *c, int argc, char **argv)
{
    int fix = 0;
    const char *trust_files = NULL;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--fix")) fix = 1;
        else if (!strcmp(argv[i], "--trust") && i + 1 < argc) trust_files = argv[++i];
        else if (!strncmp(argv[i], "--trust=", 8)) trust_files = argv[i] + 8;
        else return unknown_option("verify", argv[i]);
    }
    sign_trust *trust = NULL;
    if (trust_files) {
        char err[1024];
        if (sign_trust_load(trust_files, &trust, err, sizeof err) != 0) {
            fprintf(stderr, "clshim cache: verify --trust: %s\n", err);
            sign_trust_free(trust);
            return 2;
        }
        c->trust = trust;
    }
    int rc = open_cache(c, fix);
    if (rc == CLSHIM_OK) rc = verify_open(c, fix, trust != NULL);
    else if (rc == CLSHIM_ENOTFOUND) printf("No cache in %s: nothing to verify.\n", c->dir), rc = 0;
    else rc = 1;
    sign_trust_free(trust);
    c->trust = NULL;
    return rc;
}

static int verify_open(struct cmd_ctx *c, int fix, int trusting)
{
    int rc;
    uint64_t checked = 0, bad = 0;
    if ((rc = store_verify_report(c->s, fix, &checked, &bad, print_bad, NULL)) != CLSHIM_OK) {
        fprintf(stderr, "clshim cache: verify failed: %s\n", clshim_strerror(rc));
        return 1;
    }
    printf("Checked %llu entr%s: %llu bad", (unsigned long long)checked, checked == 1 ? "y" : "ies",
           (unsigned long long)bad);
    if (trusting) printf(" or not sealed by a trusted key");
    if (bad && fix) printf(", removed or repaired");
    else if (bad) printf(" (run `clshim cache verify%s --fix` to remove them)", trusting ? " --trust ..." : "");
    printf(".\n");
    return bad && !fix ? 1 : 0;
}

static int cmd_compact(struct cmd_ctx *c, int argc, char **argv)
{
    if (argc > 1) return usage_error("compact: unexpected argument '%s'", argv[1]);
    int rc = open_cache(c, 1);
    if (rc == CLSHIM_ENOTFOUND) rc = CLSHIM_OK;
    if (rc) return 1;
    char path[4200];
    struct stat st;
    snprintf(path, sizeof path, "%s/data.mdb", c->dir);
    uint64_t before = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if ((rc = store_compact(c->s)) != CLSHIM_OK) {
        if (rc == CLSHIM_EBUSY)
            fprintf(stderr, "clshim cache: the cache is in use by another process; close the applications "
                            "using it and run `clshim cache compact` again\n");
        else
            fprintf(stderr, "clshim cache: compaction failed: %s\n", clshim_strerror(rc));
        return 1;
    }
    uint64_t after = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    char a[32], b[32];
    human_size(before, a, sizeof a);
    human_size(after, b, sizeof b);
    printf("Compacted %s: %s -> %s.\n", path, a, b);
    return 0;
}

/* ---- export, import ---- */

/* Takes "--NAME VALUE" / "--NAME=VALUE" out of argv; 1 when found, -1 when
 * it lacks its value, else 0. */
static int take_option(int *argc, char **argv, const char *name, const char **value)
{
    size_t n = strlen(name);
    for (int i = 1; i < *argc; i++) {
        int with_eq = !strncmp(argv[i], name, n) && argv[i][n] == '=';
        if (strcmp(argv[i], name) != 0 && !with_eq) continue;
        int used = with_eq ? 1 : 2;
        if (!with_eq && i + 1 >= *argc) return -1;
        *value = with_eq ? argv[i] + n + 1 : argv[i + 1];
        memmove(argv + i, argv + i + used, (size_t)(*argc - i - used) * sizeof *argv);
        *argc -= used;
        return 1;
    }
    return 0;
}

/* Takes "--NAME" out of argv; 1 when it was there. */
static int take_flag(int *argc, char **argv, const char *name)
{
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], name)) continue;
        memmove(argv + i, argv + i + 1, (size_t)(*argc - i - 1) * sizeof *argv);
        (*argc)--;
        return 1;
    }
    return 0;
}

/* ---- the capture helpers (program/capture_proc.h) ---- */

/* Seconds from a --timeout value; -1 when it is not a number. */
static long parse_seconds(const char *v)
{
    char *end;
    errno = 0;
    unsigned long s = strtoul(v, &end, 10);
    return errno || end == v || *end || s > 1000000000ul ? -1 : (long)s;
}

/* ---- the drivers' caches (cache/driver_caches.h) beside an export ---- */

/* Runs tar with `args` (a fixed argv, no shell); 0 when it exits 0. */
static int run_tar(char *const args[])
{
    extern char **environ;
    pid_t pid;
    int status = 0;
    if (posix_spawnp(&pid, "tar", NULL, NULL, args, environ) != 0) {
        fprintf(stderr, "clshim cache: cannot run tar: %s\n", strerror(errno));
        return -1;
    }
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR) return -1;
    return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

static int driver_archive_path(const char *file, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s.drivers.tar.gz", file);
    return n > 0 && (size_t)n < len ? 0 : -1;
}

/* <dir>/driver packed into FILE.drivers.tar.gz (an empty directory when
 * the drivers have written nothing there yet). */
static int export_driver_caches(const struct cmd_ctx *c, const char *file)
{
    char archive[4200], sub[4200];
    snprintf(sub, sizeof sub, "%s/driver", c->dir);
    if (driver_archive_path(file, archive, sizeof archive) != 0 || (mkdir(sub, 0700) != 0 && errno != EEXIST)) {
        fprintf(stderr, "clshim cache: cannot prepare %s: %s\n", sub, strerror(errno));
        return -1;
    }
    char *args[] = {"tar", "-C", (char *)c->dir, "-czf", archive, "driver", NULL};
    if (run_tar(args) != 0) {
        fprintf(stderr, "clshim cache: packing the driver caches into %s failed\n", archive);
        remove(archive);
        return -1;
    }
    printf("Exported the driver caches of %s to %s.\n", sub, archive);
    return 0;
}

/* FILE.drivers.tar.gz unpacked into <dir>/driver: only that member, owned
 * by the user, permissions as packed less the umask. */
static int import_driver_caches(const struct cmd_ctx *c, const char *file)
{
    char archive[4200];
    if (driver_archive_path(file, archive, sizeof archive) != 0) return -1;
    char *args[] = {"tar", "-C", (char *)c->dir, "-xzf", archive, "--no-same-owner", "--no-same-permissions",
                    "driver", NULL};
    if (run_tar(args) != 0) {
        fprintf(stderr, "clshim cache: unpacking the driver caches from %s failed\n", archive);
        return -1;
    }
    printf("Imported the driver caches from %s.\n", archive);
    return 0;
}

static int cmd_export(struct cmd_ctx *c, int argc, char **argv)
{
    const char *keyfile = NULL;
    if (take_option(&argc, argv, "--sign", &keyfile) < 0) return usage_error("export: %s", "--sign needs a KEYFILE");
    int drivers = take_flag(&argc, argv, "--with-driver-caches");
    const char *wait_arg = "600";
    if (take_option(&argc, argv, "--wait", &wait_arg) < 0) return usage_error("export: %s", "--wait needs seconds");
    long wait_s = parse_seconds(wait_arg);
    if (wait_s < 0) return usage_error("export: '%s' is not a number of seconds", wait_arg);
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1]) return unknown_option("export", argv[i]);
    if (argc != 2) return usage_error("export: %s", "give one FILE ('-' for standard output)");
    if (drivers && (keyfile || !strcmp(argv[1], "-")))
        return usage_error("export: %s", "--with-driver-caches needs a FILE, and is not signed (no --sign)");
    int to_stdout = !strcmp(argv[1], "-");
    /* Binaries handed to a capture helper are stored after the application
     * exited: an export right after a cold run waits for them. */
    char waiting[4400];
    snprintf(waiting, sizeof waiting, "clshim cache: waiting for the capture helpers of %s (at most %ld s, --wait S)",
             c->dir, wait_s);
    if (wait_s && capture_wait(c->dir, (unsigned long)wait_s, "cache export", waiting))
        fprintf(stderr, "clshim cache: a capture helper still stores into %s after %ld s: exporting what is stored\n",
                c->dir, wait_s);
    int rc = open_cache(c, 0);
    if (rc && rc != CLSHIM_ENOTFOUND) return 1;
    if (rc == CLSHIM_ENOTFOUND) {
        fprintf(stderr, "clshim cache: no cache in %s\n", c->dir);
        return 1;
    }
    /* Signed: the export goes to a private temporary file first, then is
     * copied out with the signature over exactly what was copied. */
    FILE *body = keyfile ? tmpfile() : NULL;
    if (keyfile && !body) {
        fprintf(stderr, "clshim cache: no temporary file: %s\n", strerror(errno));
        return 1;
    }
    FILE *f = to_stdout ? stdout : fopen(argv[1], "wbx");
    if (!f) {
        fprintf(stderr, "clshim cache: cannot create %s: %s%s\n", argv[1], strerror(errno),
                errno == EEXIST ? " (it is not overwritten)" : "");
        if (body) fclose(body);
        return 1;
    }
    uint64_t n = 0;
    char err[512] = "";
    rc = store_export(c->s, body ? body : f, &n);
    if (rc == CLSHIM_OK && body && archive_sign_copy(body, f, keyfile, err, sizeof err) != 0) rc = CLSHIM_EIO;
    if (body) fclose(body);
    if (!to_stdout && fclose(f) != 0 && rc == CLSHIM_OK) rc = CLSHIM_EIO;
    if (rc) {
        fprintf(stderr, "clshim cache: export failed: %s\n", *err ? err : clshim_strerror(rc));
        if (!to_stdout) remove(argv[1]); /* never leave an unsigned file where a signed one was asked for */
        return 1;
    }
    fprintf(to_stdout ? stderr : stdout, "Exported %llu entr%s to %s%s.\n", (unsigned long long)n,
            n == 1 ? "y" : "ies", to_stdout ? "standard output" : argv[1], keyfile ? ", signed" : "");
    return drivers && export_driver_caches(c, argv[1]) != 0 ? 1 : 0;
}

/* The whole of `in` in a private temporary file (unlinked: no one else can
 * change it between the signature check and the import). */
static FILE *private_copy(FILE *in)
{
    FILE *t = tmpfile();
    char buf[65536];
    size_t n;
    while (t && (n = fread(buf, 1, sizeof buf, in)) > 0)
        if (fwrite(buf, 1, n, t) != n) {
            fclose(t);
            return NULL;
        }
    if (t && (ferror(in) || fflush(t) != 0)) {
        fclose(t);
        return NULL;
    }
    if (t) rewind(t);
    return t;
}

static int cmd_import(struct cmd_ctx *c, int argc, char **argv)
{
    const char *pubkey = NULL;
    if (take_option(&argc, argv, "--trust", &pubkey) < 0) return usage_error("import: %s", "--trust needs a PUBKEY");
    int drivers = take_flag(&argc, argv, "--with-driver-caches");
    for (int i = 1; i < argc; i++)
        if (argv[i][0] == '-' && argv[i][1]) return unknown_option("import", argv[i]);
    if (argc != 2) return usage_error("import: %s", "give one FILE ('-' for standard input)");
    if (drivers && (pubkey || !strcmp(argv[1], "-")))
        return usage_error("import: %s", "--with-driver-caches needs a FILE, and cannot be verified (no --trust)");
    FILE *f = strcmp(argv[1], "-") ? fopen(argv[1], "rb") : stdin;
    if (!f) {
        fprintf(stderr, "clshim cache: cannot read %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    if (pubkey) {
        FILE *copy = private_copy(f);
        if (f != stdin) fclose(f);
        f = copy;
        char err[512];
        if (!f) {
            fprintf(stderr, "clshim cache: cannot copy %s to a temporary file: %s\n", argv[1], strerror(errno));
            return 1;
        }
        if (archive_verify(f, pubkey, err, sizeof err) != 0) {
            fprintf(stderr, "clshim cache: %s is refused: %s; nothing imported\n", argv[1], err);
            fclose(f);
            return 1;
        }
    }
    int rc = open_cache(c, 1);
    if (rc) {
        if (f != stdin) fclose(f);
        return 1;
    }
    uint64_t n = 0, rejected = 0;
    rc = store_import(c->s, f, &n, &rejected);
    if (f != stdin) fclose(f);
    printf("Imported %llu entr%s; %llu rejected.\n", (unsigned long long)n, n == 1 ? "y" : "ies",
           (unsigned long long)rejected);
    if (rc == CLSHIM_EINVAL)
        fprintf(stderr, "clshim cache: %s is not a complete clshim cache export (entries before the damage "
                        "were imported)\n", argv[1]);
    else if (rc)
        fprintf(stderr, "clshim cache: import failed: %s\n", clshim_strerror(rc));
    else if (rejected)
        fprintf(stderr, "clshim cache: %llu entr%s failed verification or the size limits and were skipped\n",
                (unsigned long long)rejected, rejected == 1 ? "y" : "ies");
    if (!rc && drivers && import_driver_caches(c, argv[1]) != 0) return 1;
    return rc || rejected ? 1 : 0;
}

static int cmd_keygen(struct cmd_ctx *c, int argc, char **argv)
{
    (void)c;
    /* An option is never taken for a file name (keys named "--help"). */
    if (argc == 2 && argv[1][0] == '-' && argv[1][1])
        return usage_error("keygen: unknown option '%s' (give a FILE; ./-name for one starting with '-')", argv[1]);
    if (argc != 2) return usage_error("keygen: %s", "give one FILE (the secret key; FILE.pub gets the public one)");
    char err[512];
    if (sign_keygen(argv[1], err, sizeof err) != 0) {
        fprintf(stderr, "clshim cache: keygen: %s\n", err);
        return 1;
    }
    printf("Wrote the secret key to %s (keep it private) and the public key to %s.pub.\n", argv[1], argv[1]);
    return 0;
}

/* ---- remote ---- */

static int open_remote(remote **r)
{
    const struct clshim_config *cfg = config_get();
    if (!*cfg->remote) {
        fprintf(stderr, "clshim cache: no remote tier configured (set CLSHIM_REMOTE)\n");
        return 1;
    }
    struct remote_options o = {
        .url = cfg->remote, .password_file = cfg->remote_password_file, .ns = cfg->remote_namespace,
        .endpoint = cfg->remote_endpoint,
        .ca_file = cfg->remote_ca,
        .timeout_ms = cfg->remote_timeout_ms, .max_value = cfg->remote_max_value, .readonly = 1,
    };
    if (remote_open(&o, r) != CLSHIM_OK) {
        char name[512];
        config_redact_url(cfg->remote, name, sizeof name);
        fprintf(stderr, "clshim cache: CLSHIM_REMOTE=%s: not a redis://, unix://, http[s]:// or s3:// "
                        "URL (s3:// needs AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), or its password file "
                        "cannot be read\n", name);
        return 1;
    }
    return 0;
}

/* `remote rm KEYPREFIX...` on the server. */
static int remote_rm(remote *r, int argc, char **argv)
{
    int failed = 0;
    for (int i = 2; i < argc; i++) {
        char prefix[33], hex[33], why[256] = "";
        parse_prefix(argv[i], prefix);
        int rc = remote_delete(r, prefix, hex, why, sizeof why);
        if (rc == CLSHIM_OK) printf("Removed %s from %s.\n", hex, remote_name(r));
        else if (rc == CLSHIM_ENOTFOUND) fprintf(stderr, "clshim cache: remote rm: no entry on %s has a key starting with %s\n", remote_name(r), prefix);
        else if (rc == CLSHIM_EBUSY) fprintf(stderr, "clshim cache: remote rm: several entries match %s; give more digits\n", prefix);
        else fprintf(stderr, "clshim cache: remote rm: %s: %s\n", remote_name(r), why);
        failed |= rc != CLSHIM_OK;
    }
    return failed;
}

/* This cache's remote counters (they count what the server did to this
 * machine's lookups even when the server cannot be asked). */
static void print_local_remote_counters(struct cmd_ctx *c, int json)
{
    struct store_stats st = {0};
    if (open_cache(c, 0) == CLSHIM_OK) store_stats_get(c->s, &st);
    if (json) {
        printf(", \"local\": {\"hits\": %llu, \"misses\": %llu, \"errors\": %llu, \"timeouts\": %llu, "
               "\"lost\": %llu, \"garbage\": %llu, \"oversize\": %llu, \"refused\": %llu, \"corrupt\": %llu, "
               "\"untrusted\": %llu, \"distrusted\": %llu, \"pushes\": %llu, \"pushes_refused\": %llu}",
               (unsigned long long)st.remote_hits, (unsigned long long)st.remote_misses,
               (unsigned long long)st.remote_errors, (unsigned long long)st.remote_timeouts,
               (unsigned long long)st.remote_lost, (unsigned long long)st.remote_garbage,
               (unsigned long long)st.remote_oversize, (unsigned long long)st.remote_refused,
               (unsigned long long)st.remote_corrupt, (unsigned long long)st.remote_untrusted,
               (unsigned long long)st.remote_distrusted, (unsigned long long)st.remote_pushes,
               (unsigned long long)st.remote_pushes_refused);
        return;
    }
    printf("This cache (%s):\n", c->dir);
    print_remote_counters(&st);
}

static int cmd_remote(struct cmd_ctx *c, int argc, char **argv)
{
    const char *sub = argc > 1 ? argv[1] : "";
    int json = argc > 2 && !strcmp(argv[2], "--json");
    if (!*sub) return usage_error("remote: say %s", "ping, stats or rm");
    if (strcmp(sub, "ping") && strcmp(sub, "stats") && strcmp(sub, "rm"))
        return help_unknown("clshim cache: remote", "cache remote", sub);
    char prefix[33];
    if (!strcmp(sub, "rm")) {
        if (argc < 3) return usage_error("remote rm: %s", "which entries? give key prefixes");
        for (int i = 2; i < argc; i++)
            if (parse_prefix(argv[i], prefix))
                return usage_error("remote rm: '%s' is not a key prefix (1-32 hex digits)", argv[i]);
    } else if (argc > 2 + json || (!strcmp(sub, "ping") && argc > 2)) {
        return usage_error("remote: unexpected argument '%s'", argv[argc - 1]);
    }
    remote *r;
    if (open_remote(&r)) return 1;
    char why[256] = "";
    int rc;
    if (!strcmp(sub, "rm")) {
        rc = remote_rm(r, argc, argv);
        remote_close(r, NULL);
        return rc;
    }
    if (!strcmp(sub, "ping")) {
        double ms;
        rc = remote_ping(r, &ms, why, sizeof why);
        if (rc == CLSHIM_OK) printf("%s: PONG in %.2f ms\n", remote_name(r), ms);
    } else {
        struct remote_server_stats st;
        rc = remote_server_stats(r, &st, why, sizeof why);
        const struct clshim_config *cfg = config_get();
        if (rc == CLSHIM_OK && json) {
            printf("{\"server\": ");
            json_string(stdout, remote_name(r));
            printf(", \"namespace\": ");
            json_string(stdout, cfg->remote_namespace);
            printf(", \"version\": ");
            json_string(stdout, st.version);
            printf(", \"maxmemory_policy\": ");
            json_string(stdout, st.policy);
            printf(", \"used_memory\": %llu, \"maxmemory\": %llu, \"entries\": %llu, \"entry_bytes\": %llu, "
                   "\"claims\": %llu, \"hits\": %llu, \"misses\": %llu, \"pushes\": %llu, \"errors\": %llu, "
                   "\"corrupt\": %llu, \"untrusted\": %llu",
                   (unsigned long long)st.used_memory, (unsigned long long)st.maxmemory,
                   (unsigned long long)st.entries, (unsigned long long)st.entry_bytes,
                   (unsigned long long)st.claims, (unsigned long long)st.hits, (unsigned long long)st.misses,
                   (unsigned long long)st.pushes, (unsigned long long)st.errors, (unsigned long long)st.corrupt,
                   (unsigned long long)st.untrusted);
            print_local_remote_counters(c, 1);
            printf("}\n");
        } else if (rc == CLSHIM_OK && st.unlisted) {
            printf("Server                   %s (%s: answers)\n", remote_name(r), st.version);
            printf("Namespace                %s\n", cfg->remote_namespace);
            printf("Entries                  not listed (an object store; its size is the store's)\n");
            printf("Fleet counters           none (kept on Redis only)\n");
            print_local_remote_counters(c, 0);
        } else if (rc == CLSHIM_OK) {
            char used[32], max[32], bytes[32];
            human_size(st.used_memory, used, sizeof used);
            human_size(st.maxmemory, max, sizeof max);
            human_size(st.entry_bytes, bytes, sizeof bytes);
            printf("Server                   %s (Redis %s)\n", remote_name(r), st.version);
            printf("Namespace                %s\n", cfg->remote_namespace);
            printf("Entries                  %llu (%s)\n", (unsigned long long)st.entries, bytes);
            printf("Builds in progress       %llu\n", (unsigned long long)st.claims);
            printf("Fleet hits               %llu\n", (unsigned long long)st.hits);
            printf("Fleet misses             %llu\n", (unsigned long long)st.misses);
            printf("Fleet pushes             %llu\n", (unsigned long long)st.pushes);
            printf("Fleet errors             %llu (failed commands)\n", (unsigned long long)st.errors);
            printf("Fleet values ignored     %llu corrupt, %llu untrusted\n", (unsigned long long)st.corrupt,
                   (unsigned long long)st.untrusted);
            printf("Server memory            %s used, limit %s, policy %s\n", used,
                   st.maxmemory ? max : "none", st.policy);
            if (!st.maxmemory || strncmp(st.policy, "allkeys-", 8))
                printf("Note: without maxmemory and an allkeys-* policy the server never evicts "
                       "(docs/cache.md)\n");
            print_local_remote_counters(c, 0);
        }
    }
    if (rc) fprintf(stderr, "clshim cache: remote %s: %s: %s\n", sub, remote_name(r), why);
    if (rc && !strcmp(sub, "stats") && !json) print_local_remote_counters(c, 0);
    remote_close(r, NULL);
    return rc ? 1 : 0;
}

/* ---- dispatch ---- */

/* ---- wait ---- */

/* Until every capture handed to a helper is stored or dropped
 * (tools/capture_wait.h): not until the applications exit. */
static int cmd_wait(struct cmd_ctx *c, int argc, char **argv)
{
    long timeout_s = 600;
    for (int i = 1; i < argc; i++) {
        const char *v = NULL;
        if (!strcmp(argv[i], "--timeout") && i + 1 < argc) v = argv[++i];
        else if (!strncmp(argv[i], "--timeout=", 10)) v = argv[i] + 10;
        else return unknown_option("wait", argv[i]);
        if ((timeout_s = parse_seconds(v)) < 0) return usage_error("wait: '%s' is not a number of seconds", v);
    }
    int rc = capture_wait(c->dir, (unsigned long)timeout_s, "cache wait", NULL);
    if (rc) {
        fprintf(stderr, "clshim cache: captures still outstanding in %s after %ld s\n", c->dir, timeout_s);
        return rc;
    }
    /* What became of every capture handed over since the last wait: a loss
     * is an exit status, not only a counter in `cache stats`. */
    struct capture_outcomes o;
    if (capture_journal_take(c->dir, &o) != 0) return 0;
    /* Not a lost capture: the binary is in this cache; its peers miss it. */
    if (o.pushes_refused)
        fprintf(stderr, "clshim: %s; %lu push%s refused in all (Remote pushes refused)\n", o.first_refusal,
                o.pushes_refused, o.pushes_refused == 1 ? "" : "es");
    if (!o.lost) {
        fprintf(stderr, "clshim: cache wait: %lu capture%s stored\n", o.stored, o.stored == 1 ? "" : "s");
        return 0;
    }
    char why[600] = "";
    for (unsigned r = 0, len = 0; r < CAPTURE_LOST_COUNT && r < 16; r++)
        if (o.lost_by[r] && len < sizeof why - 64)
            len += (unsigned)snprintf(why + len, sizeof why - len, "%s%lu %s", len ? ", " : "", o.lost_by[r],
                                      capture_lost_name(r));
    fprintf(stderr, "clshim: cache wait: %lu of %lu captures not stored (%s); the first: %s\n", o.lost,
            o.lost + o.stored, why, o.first_lost);
    return 1;
}

int cache_cmd_main(int argc, char **argv)
{
    struct cmd_ctx c = {{0}, NULL, NULL};
    const char *dir = NULL;
    /* --dir may come before or after the subcommand. */
    char **args = calloc((size_t)argc + 1, sizeof *args);
    int n = 0;
    if (!args) return 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--dir")) {
            if (i + 1 >= argc) { free(args); return usage_error("%s needs a directory", "--dir"); }
            dir = argv[++i];
        } else if (!strncmp(argv[i], "--dir=", 6)) {
            dir = argv[i] + 6;
        } else {
            args[n++] = argv[i];
        }
    }
    int rc;
    if (dir && (!*dir || strlen(dir) >= sizeof c.dir)) {
        rc = usage_error("--dir '%s' is not a usable directory name", dir);
    } else if (!dir && config_cache_dir(config_get(), c.dir, sizeof c.dir) != 0) {
        fprintf(stderr, "clshim cache: no cache directory: set CLSHIM_CACHE_DIR or HOME, or use --dir\n");
        rc = 1;
    } else {
        if (dir) snprintf(c.dir, sizeof c.dir, "%s", dir);
        const char *cmd = n ? args[0] : "help";
        char sub[64];
        snprintf(sub, sizeof sub, "cache %s", cmd);
        /* `clshim cache remote ping --help`: the command's help. */
        if (help_asked(n, args) && help_print(stdout, sub) == 0)
            rc = 0;
        else if (!strcmp(cmd, "stats")) rc = cmd_stats(&c, n, args);
        else if (!strcmp(cmd, "zero")) rc = cmd_zero(&c, n, args);
        else if (!strcmp(cmd, "list")) rc = cmd_list(&c, n, args);
        else if (!strcmp(cmd, "show")) rc = cmd_show(&c, n, args);
        else if (!strcmp(cmd, "why")) rc = cmd_why(&c, n, args);
        else if (!strcmp(cmd, "evict")) rc = cmd_evict(&c, n, args);
        else if (!strcmp(cmd, "clear")) rc = cmd_clear(&c, n, args);
        else if (!strcmp(cmd, "verify")) rc = cmd_verify(&c, n, args);
        else if (!strcmp(cmd, "compact")) rc = cmd_compact(&c, n, args);
        else if (!strcmp(cmd, "export")) rc = cmd_export(&c, n, args);
        else if (!strcmp(cmd, "import")) rc = cmd_import(&c, n, args);
        else if (!strcmp(cmd, "keygen")) rc = cmd_keygen(&c, n, args);
        else if (!strcmp(cmd, "remote")) rc = cmd_remote(&c, n, args);
        else if (!strcmp(cmd, "rm")) rc = cmd_rm(&c, n, args);
        else if (!strcmp(cmd, "wait")) rc = cmd_wait(&c, n, args);
        else if (!strcmp(cmd, "warm")) rc = cache_warm_main(c.dir, n, args);
        else if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
            help_print(n ? stdout : stderr, "cache");
            rc = n ? 0 : 2; /* bare `clshim cache` is a usage error */
        } else {
            rc = help_unknown("clshim cache", "cache", cmd);
        }
    }
    store_close(c.s);
    free(args);
    return rc;
}
