/* check.h — invariants stated in code: CLSHIM_ASSERT and lock ownership.
 *
 *     if (!CLSHIM_ASSERT(q->nheld <= MAX_HELD)) return forward_unchanged(...);
 *
 * CLSHIM_ASSERT(cond) is an expression: 1 when cond holds. When it does not,
 * the shim must still never make a working app fail, so what happens
 * depends on the build and the run:
 *   - under CLSHIM_STRICT=1 (tests/run-all.sh sets it) and in sanitizer
 *     builds (compiled with CLSHIM_ASSERT_FATAL): one `clshim:` line naming
 *     the file, line and condition, then abort(), so a broken invariant
 *     fails the test that broke it;
 *   - release builds: the same line, once per site, and the expression is 0:
 *     the caller takes the driver's path (forwards the call unchanged,
 *     declines to cache, runs kernels unfused), as it does for any fault.
 * Every use must therefore sit where 0 has such a path; a condition that
 * cannot fail in a way the caller can route around belongs in a comment.
 *
 * CLSHIM_ASSERT_HELD(m) / CLSHIM_ASSERT_NOT_HELD(m): the calling thread owns
 * (does not own) the pthread mutex m — the "caller holds the lock" of a
 * function's contract. They read the owner glibc records in every default
 * mutex (its own pthread_mutex_lock asserts on it); elsewhere they hold
 * trivially. Cost: a load and a cached gettid.
 */
#ifndef CLSHIM_CHECK_H
#define CLSHIM_CHECK_H

#include <pthread.h>

/* Logs the broken invariant (once per site: *once) and aborts when asserts
 * are fatal. Returns 0 (the expression's value). */
int check_failed(int *once, const char *cond, const char *file, int line, const char *func);

/* 1 when a broken invariant aborts (tests, sanitizer builds). */
int check_fatal(void);

/* 1 when the calling thread owns m, 0 when it does not, -1 when unknown. */
int check_mutex_owned(const pthread_mutex_t *m);

#define CLSHIM_ASSERT(cond)                                                    \
    (__builtin_expect(!!(cond), 1) ? 1 : ({                                    \
        static int check_once_;                                                \
        check_failed(&check_once_, #cond, __FILE__, __LINE__, __func__);       \
    }))

#define CLSHIM_ASSERT_HELD(m) CLSHIM_ASSERT(check_mutex_owned(m) != 0)
#define CLSHIM_ASSERT_NOT_HELD(m) CLSHIM_ASSERT(check_mutex_owned(m) != 1)

#endif
