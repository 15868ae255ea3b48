/* test_check — CLSHIM_ASSERT and the lock-ownership checks (common/check.h).
 * Each failing assert runs in a forked child with its own configuration: the
 * fatal one must abort with its line logged, the release one must log one
 * line for any number of failures and let the caller go on. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "common/check.h"

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void *owned_elsewhere(void *arg)
{
    (void)arg;
    return (void *)(intptr_t)check_mutex_owned(&lock);
}

static void ownership(void **state)
{
    (void)state;
    assert_int_equal(check_mutex_owned(&lock), 0);
    assert_int_equal(CLSHIM_ASSERT_NOT_HELD(&lock), 1);
    pthread_mutex_lock(&lock);
    assert_int_equal(check_mutex_owned(&lock), 1);
    assert_int_equal(CLSHIM_ASSERT_HELD(&lock), 1);
    pthread_t t;
    void *other;
    assert_int_equal(pthread_create(&t, NULL, owned_elsewhere, NULL), 0);
    assert_int_equal(pthread_join(t, &other), 0);
    assert_int_equal((intptr_t)other, 0); /* held, but by this thread, not that one */
    pthread_mutex_unlock(&lock);
    assert_int_equal(check_mutex_owned(&lock), 0);
}

/* Runs `failures` failing asserts of one site in a child with CLSHIM_STRICT
 * = strict and its log in `log`; returns the child's wait status. */
static int child_asserts(const char *strict, int failures, const char *log, int *fatal_build)
{
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(pipefd[0]);
        setenv("CLSHIM_STRICT", strict, 1);
        setenv("CLSHIM_LOG_FILE", log, 1);
        char f = (char)check_fatal();
        if (write(pipefd[1], &f, 1) != 1) _exit(3);
        int passed = 0;
        for (int i = 0; i < failures; i++) passed += CLSHIM_ASSERT(i < 0);
        _exit(passed == 0 ? 0 : 4);
    }
    close(pipefd[1]);
    char f = 0;
    assert_int_equal(read(pipefd[0], &f, 1), 1);
    close(pipefd[0]);
    *fatal_build = f;
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return status;
}

static int lines_with(const char *path, const char *text)
{
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char line[512];
    int n = 0;
    while (fgets(line, sizeof line, f))
        if (strstr(line, text) && !strncmp(line, "clshim: ", 8)) n++;
    fclose(f);
    return n;
}

static void strict_aborts(void **state)
{
    (void)state;
    char log[] = "/tmp/test_check.XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    int fatal;
    int status = child_asserts("1", 3, log, &fatal);
    assert_int_equal(fatal, 1);
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGABRT);
    assert_int_equal(lines_with(log, "`i < 0` does not hold; aborting"), 1);
    assert_int_equal(lines_with(log, "test_check.c"), 1);
    unlink(log);
}

static void release_logs_once(void **state)
{
    (void)state;
    char log[] = "/tmp/test_check.XXXXXX";
    int fd = mkstemp(log);
    assert_true(fd >= 0);
    close(fd);
    int fatal;
    int status = child_asserts("0", 5, log, &fatal);
    if (fatal) { /* a sanitizer build (CLSHIM_ASSERT_FATAL): always fatal */
        assert_true(WIFSIGNALED(status));
        assert_int_equal(WTERMSIG(status), SIGABRT);
    } else {
        assert_true(WIFEXITED(status));
        assert_int_equal(WEXITSTATUS(status), 0); /* every failure returned 0 and the child went on */
        assert_int_equal(lines_with(log, "`i < 0` does not hold; taking the driver's path"), 1);
    }
    unlink(log);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ownership),
        cmocka_unit_test(strict_aborts),
        cmocka_unit_test(release_logs_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
