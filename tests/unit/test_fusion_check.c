/* test_fusion_check.c — a broken invariant of the fusion batcher
 * (fusion/batch.c, fq_check): a release run (CLSHIM_STRICT unset) logs one
 * line, turns fusion off for the queue and goes on; under CLSHIM_STRICT=1
 * (the test suite, debugging) the process aborts where the bug is found.
 * The queue record is built by hand with the invariant "held kernels in
 * plan mode match some candidate sequence" broken: no driver is involved.
 * Its lock is held, as fq_check's contract asks. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/check.h"
#include "fusion/batch_int.h"

/* One held kernel in plan mode with no candidate sequence left: the state
 * the plan filter once left behind (issue 14's abort). */
static void broken_queue(struct fq *q, struct held *h, struct fk_kernel *rec)
{
    memset(q, 0, sizeof *q);
    memset(h, 0, sizeof *h);
    memset(rec, 0, sizeof *rec);
    static struct fk_arg arg;
    rec->name = "a";
    rec->nargs = 1;
    h->k = (cl_kernel)rec; /* never called: only compared */
    h->rec = rec;
    h->args = &arg;
    h->nargs = 1;
    q->in_order = 1;
    q->held = h;
    q->nheld = 1;
    q->ncand = 0;
    pthread_mutex_lock(&q->lock); /* fq_check's contract */
}

static void intact_queue_passes(void **state)
{
    (void)state;
    struct fq q;
    memset(&q, 0, sizeof q);
    q.in_order = 1;
    pthread_mutex_lock(&q.lock); /* fq_check's contract */
    assert_int_equal(fq_check(&q, "test"), 0);
    assert_int_equal(q.off, 0);
}

/* fq_check on a broken queue in a child, with CLSHIM_STRICT=strict read
 * by the child's first config_get(); the child's wait status. */
static int check_in_child(const char *strict)
{
    fflush(NULL);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (strict) setenv("CLSHIM_STRICT", strict, 1);
        setenv("CLSHIM_LOG_FILE", "/dev/null", 1);
        struct fq q;
        struct held h;
        struct fk_kernel rec;
        broken_queue(&q, &h, &rec);
        fq_check(&q, "test");
        _exit(0); /* not reached when it aborts */
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static void release_run_falls_back(void **state)
{
    (void)state;
    if (check_fatal()) { /* a sanitizer build (CLSHIM_ASSERT_FATAL): every broken invariant aborts */
        int status = check_in_child(NULL);
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGABRT);
        return;
    }
    struct fq q;
    struct held h;
    struct fk_kernel rec;
    broken_queue(&q, &h, &rec);
    q.ext = 0;
    assert_int_equal(fq_check(&q, "test"), 1);
    assert_int_equal(q.off, 1); /* fusion off for this queue; the caller submits unfused */
    assert_int_equal(q.ext, 0);
}

static void strict_run_aborts(void **state)
{
    (void)state;
    int status = check_in_child("1");
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
}

int main(void)
{
    /* This process is the release run (run-all.sh exports CLSHIM_STRICT=1):
     * unset before the configuration is first read; the child sets it. */
    unsetenv("CLSHIM_STRICT");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(strict_run_aborts),
        cmocka_unit_test(intact_queue_passes),
        cmocka_unit_test(release_run_falls_back),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
