/* profile.c — the recorder of `clshim run --profile` (common/profile.h). */
#include "common/profile.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "common/check.h"
#include "common/config.h"
#include "common/log.h"

int profile_active;

/* A kernel name or a fused sequence, with its sums. */
struct pname {
    char *name;
    enum profile_kind kind;
    uint64_t launches, timed, total_ns, min_ns, max_ns;
    uint64_t replaced;              /* fused: the launches its launches replaced */
    double unfused_ns, fused_ns;    /* fused: the last speed measurement's medians */
};

struct pevent {
    uint32_t name, queue;
    uint64_t start, end; /* the device's clock */
};

struct pbuild {
    char kind[16], key[17], outcome[24], device[128];
    uint64_t start, wall, cpu, compile;
};

/* One launch being timed (the callback's argument). */
struct plaunch {
    const struct profile_api *api;
    uint32_t name, queue;
    uint64_t host_ns; /* when it was enqueued */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct pname *names;
static size_t nnames, names_cap;
static struct pevent *events;
static size_t nevents, events_cap;
static struct pbuild *builds;
static size_t nbuilds, builds_cap;
static const void **queues, **forced;
static size_t nqueues, queues_cap, nforced, forced_cap;
static uint64_t outstanding;  /* callbacks not yet run */
static int have_offset;
static int64_t device_to_host; /* add to a device time for the host's clock */
static char dir[4096];

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int grow(void **v, size_t *cap, size_t n, size_t size)
{
    if (n < *cap) return 0;
    size_t c = *cap ? 2 * *cap : 64;
    void *p = realloc(*v, c * size);
    if (!p) return -1;
    *v = p, *cap = c;
    return 0;
}

/* The index of a name (lock held); SIZE_MAX when out of memory. */
static size_t name_of(const char *name, enum profile_kind kind)
{
    CLSHIM_ASSERT_HELD(&lock);
    for (size_t i = 0; i < nnames; i++)
        if (names[i].kind == kind && !strcmp(names[i].name, name)) return i;
    if (grow((void **)&names, &names_cap, nnames, sizeof *names) != 0) return SIZE_MAX;
    char *copy = strdup(name);
    if (!copy) return SIZE_MAX;
    names[nnames] = (struct pname){.name = copy, .kind = kind, .min_ns = UINT64_MAX};
    return nnames++;
}

static uint32_t queue_of(const void *q)
{
    CLSHIM_ASSERT_HELD(&lock);
    for (size_t i = 0; i < nqueues; i++)
        if (queues[i] == q) return (uint32_t)i;
    if (grow((void **)&queues, &queues_cap, nqueues, sizeof *queues) != 0) return 0;
    queues[nqueues] = q;
    return (uint32_t)nqueues++;
}

static void write_file(void);

static void at_exit(void)
{
    /* The last launches' callbacks: the application finished its queues,
     * the driver may call back a moment later. */
    for (int i = 0; i < 200 && __atomic_load_n(&outstanding, __ATOMIC_ACQUIRE); i++)
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    write_file();
}

static void register_exit(void)
{
    atexit(at_exit);
}

static void init_once(void)
{
    const char *d = config_get()->profile;
    if (!d || !*d) return;
    if (mkdir(d, 0700) != 0 && errno != EEXIST) {
        log_msg(LOG_WARN, "CLSHIM_PROFILE=%s: cannot make the directory (%s); no profile", d, strerror(errno));
        return;
    }
    snprintf(dir, sizeof dir, "%s", d);
    __atomic_store_n(&profile_active, 1, __ATOMIC_RELEASE);
}

void profile_init(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, init_once);
}

static void add_time(struct pname *n, uint64_t ns)
{
    n->timed++;
    n->total_ns += ns;
    if (ns < n->min_ns) n->min_ns = ns;
    if (ns > n->max_ns) n->max_ns = ns;
}

static void CL_CALLBACK on_complete(cl_event ev, cl_int status, void *arg)
{
    struct plaunch *l = arg;
    cl_ulong queued = 0, start = 0, end = 0;
    int timed = status == CL_COMPLETE &&
                l->api->info(ev, CL_PROFILING_COMMAND_QUEUED, sizeof queued, &queued, NULL) == CL_SUCCESS &&
                l->api->info(ev, CL_PROFILING_COMMAND_START, sizeof start, &start, NULL) == CL_SUCCESS &&
                l->api->info(ev, CL_PROFILING_COMMAND_END, sizeof end, &end, NULL) == CL_SUCCESS && end >= start;
    pthread_mutex_lock(&lock);
    if (timed) {
        if (!have_offset) {
            device_to_host = (int64_t)l->host_ns - (int64_t)queued;
            have_offset = 1;
        }
        add_time(&names[l->name], end - start);
        if (nevents < PROFILE_EVENTS_MAX && grow((void **)&events, &events_cap, nevents, sizeof *events) == 0)
            events[nevents++] = (struct pevent){l->name, l->queue, start, end};
    }
    pthread_mutex_unlock(&lock);
    l->api->release(ev);
    free(l);
    __atomic_sub_fetch(&outstanding, 1, __ATOMIC_RELEASE);
}

void profile_launch(const struct profile_api *api, cl_event ev, const char *name, enum profile_kind kind,
                    const void *queue)
{
    static pthread_once_t exit_once = PTHREAD_ONCE_INIT;
    /* After the driver started (its exit handlers run after this one). */
    pthread_once(&exit_once, register_exit);
    struct plaunch *l = malloc(sizeof *l);
    pthread_mutex_lock(&lock);
    size_t n = name_of(name, kind);
    if (n != SIZE_MAX) names[n].launches++;
    uint32_t q = queue_of(queue);
    pthread_mutex_unlock(&lock);
    if (!l || n == SIZE_MAX) {
        free(l);
        return;
    }
    *l = (struct plaunch){api, (uint32_t)n, q, mono_ns()};
    if (api->retain(ev) != CL_SUCCESS) {
        free(l);
        return;
    }
    __atomic_add_fetch(&outstanding, 1, __ATOMIC_ACQ_REL);
    if (api->set_callback(ev, CL_COMPLETE, on_complete, l) != CL_SUCCESS) {
        __atomic_sub_fetch(&outstanding, 1, __ATOMIC_RELEASE);
        api->release(ev);
        free(l);
    }
}

void profile_untimed(const char *name, enum profile_kind kind)
{
    pthread_mutex_lock(&lock);
    size_t n = name_of(name, kind);
    if (n != SIZE_MAX) names[n].launches++;
    pthread_mutex_unlock(&lock);
}

void profile_fused(const char *sequence, unsigned kernels)
{
    pthread_mutex_lock(&lock);
    size_t n = name_of(sequence, PROFILE_FUSED);
    if (n != SIZE_MAX) names[n].replaced += kernels;
    pthread_mutex_unlock(&lock);
}

void profile_fused_speed(const char *sequence, double unfused_ns, double fused_ns)
{
    pthread_mutex_lock(&lock);
    size_t n = name_of(sequence, PROFILE_FUSED);
    if (n != SIZE_MAX) names[n].unfused_ns = unfused_ns, names[n].fused_ns = fused_ns;
    pthread_mutex_unlock(&lock);
}

void profile_build(const char *kind, const char *key16, const char *outcome, const char *device, uint64_t start_ns,
                   uint64_t wall_ns, uint64_t cpu_ns, uint64_t compile_ns)
{
    pthread_mutex_lock(&lock);
    if (grow((void **)&builds, &builds_cap, nbuilds, sizeof *builds) == 0) {
        struct pbuild *b = &builds[nbuilds++];
        *b = (struct pbuild){.start = start_ns, .wall = wall_ns, .cpu = cpu_ns, .compile = compile_ns};
        snprintf(b->kind, sizeof b->kind, "%s", kind);
        snprintf(b->key, sizeof b->key, "%s", key16);
        snprintf(b->outcome, sizeof b->outcome, "%s", outcome);
        snprintf(b->device, sizeof b->device, "%s", device ? device : "");
        for (char *c = b->device; *c; c++)
            if (*c == '\t' || *c == '\n') *c = ' ';
    }
    pthread_mutex_unlock(&lock);
}

void profile_queue_added(const void *queue)
{
    pthread_mutex_lock(&lock);
    if (grow((void **)&forced, &forced_cap, nforced, sizeof *forced) == 0) forced[nforced++] = queue;
    pthread_mutex_unlock(&lock);
}

int profile_queue_forced(const void *queue)
{
    int found = 0;
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nforced && !found; i++) found = forced[i] == queue;
    pthread_mutex_unlock(&lock);
    return found;
}

void profile_queue_released(const void *queue)
{
    pthread_mutex_lock(&lock);
    for (size_t i = 0; i < nforced; i++)
        if (forced[i] == queue) {
            forced[i] = forced[--nforced];
            break;
        }
    pthread_mutex_unlock(&lock);
}

/* The name without tabs or newlines (a kernel name has none; a file's). */
static void put_field(FILE *f, const char *s)
{
    for (; *s; s++) fputc(*s == '\t' || *s == '\n' ? ' ' : *s, f);
}

static void write_file(void)
{
    char path[4200], tmp[4300], cmd[256] = "?";
    FILE *c = fopen("/proc/self/comm", "r");
    if (c) {
        if (fgets(cmd, sizeof cmd, c)) cmd[strcspn(cmd, "\n")] = 0;
        fclose(c);
    }
    snprintf(path, sizeof path, "%s/profile.%d.txt", dir, (int)getpid());
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) {
        log_msg(LOG_WARN, "CLSHIM_PROFILE: cannot write %s (%s); this process's profile is lost", tmp, strerror(errno));
        return;
    }
    pthread_mutex_lock(&lock);
    fprintf(f, "clshim-profile\t%d\t%d\t", PROFILE_FORMAT, (int)getpid());
    put_field(f, cmd);
    fputc('\n', f);
    for (size_t i = 0; i < nnames; i++) {
        const struct pname *n = &names[i];
        uint64_t lo = n->timed ? n->min_ns : 0;
        if (n->kind == PROFILE_KERNEL)
            fprintf(f, "kernel\t%s\t%llu\t%llu\t%llu\t%llu\t%llu\n", n->name, (unsigned long long)n->launches,
                    (unsigned long long)n->timed, (unsigned long long)n->total_ns, (unsigned long long)lo,
                    (unsigned long long)n->max_ns);
        else
            fprintf(f, "fused\t%s\t%llu\t%llu\t%llu\t%.0f\t%.0f\n", n->name, (unsigned long long)n->launches,
                    (unsigned long long)n->replaced, (unsigned long long)n->total_ns, n->unfused_ns, n->fused_ns);
    }
    for (size_t i = 0; i < nbuilds; i++) {
        const struct pbuild *b = &builds[i];
        fprintf(f, "build\t%s\t%s\t%s\t%llu\t%llu\t%llu\t%s\n", b->kind, b->key, b->outcome,
                (unsigned long long)b->wall, (unsigned long long)b->cpu, (unsigned long long)b->compile, b->device);
        fprintf(f, "bevent\t%s\t%s\t%s\t%llu\t%llu\n", b->kind, b->key, b->outcome, (unsigned long long)b->start,
                (unsigned long long)(b->start + b->wall));
    }
    for (size_t i = 0; i < nevents; i++) {
        const struct pevent *e = &events[i];
        fprintf(f, "event\t%c\t%s\t%u\t%lld\t%lld\n", names[e->name].kind == PROFILE_KERNEL ? 'K' : 'F',
                names[e->name].name, e->queue, (long long)((int64_t)e->start + device_to_host),
                (long long)((int64_t)e->end + device_to_host));
    }
    pthread_mutex_unlock(&lock);
    if (fclose(f) != 0 || rename(tmp, path) != 0)
        log_msg(LOG_WARN, "CLSHIM_PROFILE: cannot write %s (%s); this process's profile is lost", path, strerror(errno));
}
