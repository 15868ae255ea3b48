/* bench_guard — what keeping SIGBUS out of a lookup costs, two ways
 * (docs/security.md, issue 17).
 *
 *   bench_guard
 *
 * A store lookup reads a value of 1-4 KiB from LMDB's map. If data.mdb
 * shrinks under the map, that read raises SIGBUS. The two ways to survive
 * it: arm a guard around the read (store_guard.c: a thread-local push, a
 * sigsetjmp that saves no mask, a pop; a lookup arms two), or read the
 * value with pread instead of the map. This measures one guard and one
 * 2 KiB pread from the page cache, each the best of 5 rounds, next to a
 * 2 KiB copy from a map (what the guarded read does). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "cache/store_int.h"

#define VALUE 2048
#define FILE_SIZE (1 << 20)

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* One guarded no-op, as store_get arms it. */
__attribute__((noinline)) static int guarded(volatile int *x)
{
    struct store_guard g;
    store_guard_arm(&g);
    if (sigsetjmp(g.jb, 0)) return -1;
    (*x)++;
    store_guard_disarm(&g);
    return 0;
}

int main(void)
{
    store_guard_install();
    char path[] = "/tmp/bench_guard.XXXXXX";
    int fd = mkstemp(path);
    if (fd < 0) return 1;
    unlink(path);
    char *block = malloc(FILE_SIZE), buf[VALUE];
    memset(block, 7, FILE_SIZE);
    if (write(fd, block, FILE_SIZE) != FILE_SIZE) return 1;
    const char *map = mmap(NULL, FILE_SIZE, PROT_READ, MAP_SHARED, fd, 0);
    if (map == MAP_FAILED) return 1;
    double guard = 1e18, pr = 1e18, copy = 1e18;
    volatile int x = 0;
    for (int round = 0; round < 5; round++) {
        double t = now_ns();
        for (int i = 0; i < 10000000; i++) guarded(&x);
        double ns = (now_ns() - t) / 1e7;
        guard = ns < guard ? ns : guard;
        t = now_ns();
        for (int i = 0; i < 200000; i++)
            if (pread(fd, buf, VALUE, ((off_t)i * 4096) % (FILE_SIZE - 4096)) != VALUE) return 1;
        ns = (now_ns() - t) / 2e5;
        pr = ns < pr ? ns : pr;
        t = now_ns();
        for (int i = 0; i < 2000000; i++) {
            memcpy(buf, map + ((size_t)i * 4096) % (FILE_SIZE - 4096), VALUE);
            __asm__ volatile("" : : "r"(buf) : "memory");
        }
        ns = (now_ns() - t) / 2e6;
        copy = ns < copy ? ns : copy;
    }
    printf("bench_guard: best of 5 rounds\n");
    printf("  one guard (arm, sigsetjmp, disarm)      %7.1f ns   (a lookup arms 2)\n", guard);
    printf("  pread of a %d-byte value              %7.1f ns\n", VALUE, pr);
    printf("  copy of a %d-byte value from the map  %7.1f ns\n", VALUE, copy);
    free(block);
    return 0;
}
