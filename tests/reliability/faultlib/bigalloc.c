/* bigalloc.c — a preloaded allocator that fails every allocation larger than
 * CLFAULT_MALLOC_MAX bytes (ENOMEM), to inject out-of-memory for real on a
 * huge cached binary. Built by test_resources.sh with cc; glibc's __libc_*
 * entry points avoid recursing through dlsym. */
#include <errno.h>
#include <stdlib.h>

extern void *__libc_malloc(size_t);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static size_t limit(void)
{
    static size_t max;
    if (!max) {
        const char *v = getenv("CLFAULT_MALLOC_MAX");
        max = v ? strtoull(v, NULL, 10) : (size_t)-1;
    }
    return max;
}

void *malloc(size_t n)
{
    if (n > limit()) { errno = ENOMEM; return NULL; }
    return __libc_malloc(n);
}

void *calloc(size_t n, size_t m)
{
    if (m && n > limit() / m) { errno = ENOMEM; return NULL; }
    return __libc_calloc(n, m);
}

void *realloc(void *p, size_t n)
{
    if (n > limit()) { errno = ENOMEM; return NULL; }
    return __libc_realloc(p, n);
}
