/* driver.c — what the driver built: binaries, build logs, retries.
 *
 * Kept apart because every path (build, compile, link, derived programs,
 * late capture, queries) reads binaries the same careful way: one reader
 * at a time (PoCL grows a binary at its first read) and never where a
 * driver quirk would make the read abort.
 */
#include "program/program_int.h"

#include <stdio.h>
#include <sys/resource.h>
#include <unistd.h>

#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/quirks.h"

static int read_binaries_locked(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes);

static uint64_t clock_ns(clockid_t which)
{
    struct timespec ts;
    clock_gettime(which, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }
uint64_t process_cpu_ns(void) { return clock_ns(CLOCK_PROCESS_CPUTIME_ID); }

/* Every read of a program's binaries, clshim's and the app's, one at a
 * time: PoCL generates code at a program's first read, and two reads at
 * once (the capture worker's and the app's own CL_PROGRAM_BINARY_SIZES)
 * crashed in a clean root (test_cache, two devices). */
pthread_mutex_t pc_binary_reads = PTHREAD_MUTEX_INITIALIZER;

/* After a driver call that failed with `err`: nonzero when it is to be
 * made once more. A driver out of memory or resources may fail for what
 * the in-memory tier holds (binaries, and built programs lent to it that
 * keep the driver's code alive): the tier is emptied of every entry no
 * build uses, and the call retried when that freed anything. */
int retry_after_emptying_tier(cl_int err, const char *what)
{
    if (err != CL_OUT_OF_RESOURCES && err != CL_OUT_OF_HOST_MEMORY) return 0;
    uint64_t dropped = pipeline_memory_clear();
    if (dropped)
        log_msg(LOG_INFO, "%s: the driver is out of %s; emptied the in-memory tier (%llu entries), retrying once",
                what, err == CL_OUT_OF_RESOURCES ? "resources" : "host memory", (unsigned long long)dropped);
    return dropped != 0;
}

/* The address space left under RLIMIT_AS (UINT64_MAX: no limit). */
static uint64_t address_space_left(void)
{
    struct rlimit lim;
    if (getrlimit(RLIMIT_AS, &lim) != 0 || lim.rlim_cur == RLIM_INFINITY) return UINT64_MAX;
    unsigned long pages = 0;
    FILE *statm = fopen("/proc/self/statm", "re");
    int got = statm && fscanf(statm, "%lu", &pages) == 1;
    if (statm) fclose(statm);
    if (!got) return 0; /* unknown under a limit: as if short */
    uint64_t used = (uint64_t)pages * (uint64_t)sysconf(_SC_PAGESIZE);
    return lim.rlim_cur > used ? (uint64_t)lim.rlim_cur - used : 0;
}

/* Nonzero when reading the binaries of `prog` would make a device's driver
 * abort or crash: a kernel name is too long (QUIRK_LONG_KERNEL_NAME_CODEGEN),
 * or too little address space is left (QUIRK_BINARY_SCRATCH). */
int binaries_unsafe(cl_program prog, size_t n, const struct pc_dev *want)
{
    int quirk = 0, scratch = 0;
    for (size_t i = 0; i < n; i++) {
        const struct device_info *info = device_info(pc_real, want[i].dev);
        quirk |= info && (info->quirks & QUIRK_LONG_KERNEL_NAME_CODEGEN);
        scratch |= info && (info->quirks & QUIRK_BINARY_SCRATCH);
    }
    uint64_t left = scratch ? address_space_left() : UINT64_MAX;
    if (left < QUIRK_BINARY_HEADROOM) {
        LOG_ONCE(LOG_INFO, "not reading program binaries: %llu MiB of address space left under the process's "
                           "limit (%s)", (unsigned long long)(left >> 20), quirk_description(QUIRK_BINARY_SCRATCH));
        return 1;
    }
    size_t len = 0;
    if (!quirk || pc_real->clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, 0, NULL, &len) != CL_SUCCESS)
        return 0; /* a compiled object has no kernel names and nothing to generate */
    char *names = calloc(1, len + 1);
    if (!names || pc_real->clGetProgramInfo(prog, CL_PROGRAM_KERNEL_NAMES, len, names, NULL) != CL_SUCCESS) {
        free(names);
        return 1;
    }
    size_t longest = 0;
    for (char *p = names; *p;) {
        size_t n = strcspn(p, ";");
        if (n > longest) longest = n;
        p += n + (p[n] == ';');
    }
    free(names);
    if (longest <= QUIRK_KERNEL_NAME_MAX) return 0;
    log_msg(LOG_INFO, "not caching program %p: a kernel name of %zu characters (%s)", (void *)prog, longest,
            quirk_description(QUIRK_LONG_KERNEL_NAME_CODEGEN));
    return 1;
}

/* Reads the binaries of `prog` for the given devices (in its device order).
 * One reader at a time: on PoCL the first read generates code and grows the
 * binary, so a second reader between another's size and bytes queries
 * would copy more than it allocated. */
int read_binaries(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes)
{
    if (binaries_unsafe(prog, n, want)) return -1;
    pthread_mutex_lock(&pc_binary_reads);
    int rc = read_binaries_locked(prog, n, want, bins, sizes);
    pthread_mutex_unlock(&pc_binary_reads);
    return rc;
}

static int read_binaries_locked(cl_program prog, size_t n, const struct pc_dev *want, void **bins, size_t *sizes)
{
    cl_uint ndev = 0;
    if (pc_real->clGetProgramInfo(prog, CL_PROGRAM_NUM_DEVICES, sizeof ndev, &ndev, NULL) != CL_SUCCESS || !ndev)
        return -1;
    cl_device_id *devs = calloc(ndev, sizeof *devs);
    size_t *all_sizes = calloc(ndev, sizeof *all_sizes);
    unsigned char **all = calloc(ndev, sizeof *all);
    int rc = -1;
    if (!devs || !all_sizes || !all) goto out;
    if (pc_real->clGetProgramInfo(prog, CL_PROGRAM_DEVICES, ndev * sizeof *devs, devs, NULL) != CL_SUCCESS ||
        pc_real->clGetProgramInfo(prog, CL_PROGRAM_BINARY_SIZES, ndev * sizeof *all_sizes, all_sizes, NULL) !=
            CL_SUCCESS)
        goto out;
    for (cl_uint i = 0; i < ndev; i++) {
        int wanted = 0;
        for (size_t j = 0; j < n; j++) wanted |= want[j].dev == devs[i];
        if (wanted && all_sizes[i] && !(all[i] = malloc(all_sizes[i]))) goto out;
    }
    if (pc_real->clGetProgramInfo(prog, CL_PROGRAM_BINARIES, ndev * sizeof *all, all, NULL) != CL_SUCCESS) goto out;
    rc = 0;
    for (size_t j = 0; j < n; j++) {
        bins[j] = NULL;
        sizes[j] = 0;
        for (cl_uint i = 0; i < ndev; i++)
            if (devs[i] == want[j].dev && all[i]) {
                bins[j] = all[i];
                sizes[j] = all_sizes[i];
                all[i] = NULL;
            }
        if (!bins[j]) rc = -1;
    }
out:
    for (cl_uint i = 0; i < ndev && all; i++) free(all[i]);
    free(all);
    free(all_sizes);
    free(devs);
    return rc;
}

char *read_build_log(cl_program prog, cl_device_id dev)
{
    size_t n = 0;
    if (pc_real->clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, 0, NULL, &n) != CL_SUCCESS) return strdup("");
    char *log = calloc(1, n + 1);
    if (log && pc_real->clGetProgramBuildInfo(prog, dev, CL_PROGRAM_BUILD_LOG, n, log, NULL) != CL_SUCCESS) log[0] = 0;
    return log;
}
