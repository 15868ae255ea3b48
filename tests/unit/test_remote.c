/* test_remote.c — the remote tier without a server: URL forms, password
 * redaction, and failing fast (breaker) when the server is not there. The
 * tier against a real redis-server: tests/integration/test_remote.sh. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/entry.h"
#include "cache/remote.h"
#include "common/config.h"
#include "common/error.h"
#include "common/log.h"

static int opens(const char *url)
{
    struct remote_options o = {.url = url};
    remote *r = NULL;
    int rc = remote_open(&o, &r);
    remote_close(r, NULL);
    return rc;
}

/* the two URL forms and their parts are accepted; anything else is not */
static void url_forms(void **state)
{
    assert_int_equal(opens("redis://localhost"), CLSHIM_OK);
    assert_int_equal(opens("redis://127.0.0.1:6380/3"), CLSHIM_OK);
    assert_int_equal(opens("redis://user:pw@host:1"), CLSHIM_OK);
    assert_int_equal(opens("redis://:pw@host"), CLSHIM_OK);
    assert_int_equal(opens("redis://[::1]:6379"), CLSHIM_OK);
    assert_int_equal(opens("unix:///run/redis.sock"), CLSHIM_OK);
    assert_int_equal(opens("unix:///run/redis.sock?db=2"), CLSHIM_OK);
    assert_int_equal(opens("unix://user:pw@/run/redis.sock"), CLSHIM_OK);
    assert_int_equal(opens("unix://user:pw@run/redis.sock"), CLSHIM_EINVAL);
    assert_int_equal(opens(""), CLSHIM_EINVAL);
    assert_int_equal(opens("ftp://host"), CLSHIM_EINVAL);
    assert_int_equal(opens("redis://"), CLSHIM_EINVAL);
    assert_int_equal(opens("redis://host:port"), CLSHIM_EINVAL);
    assert_int_equal(opens("redis://host:70000"), CLSHIM_EINVAL);
    assert_int_equal(opens("redis://host/x"), CLSHIM_EINVAL);
    assert_int_equal(opens("unix://relative.sock"), CLSHIM_EINVAL);
    assert_int_equal(opens("unix:///s.sock?db=x"), CLSHIM_EINVAL);
    /* a password file that cannot be read */
    struct remote_options o = {.url = "redis://h", .password_file = "/nonexistent/pw"};
    remote *r = NULL;
    assert_int_equal(remote_open(&o, &r), CLSHIM_EINVAL);
    assert_null(r);
}

/* HTTP and S3 URLs (remote_http.c): a host is needed; s3:// needs a bucket
 * and the AWS keys */
static void http_url_forms(void **state)
{
    (void)state;
    assert_int_equal(opens("http://127.0.0.1:8080/ci"), CLSHIM_OK);
    assert_int_equal(opens("https://cache.example/a/b/"), CLSHIM_OK);
    assert_int_equal(opens("https://u:pw@cache.example"), CLSHIM_OK);
    assert_int_equal(opens("http://"), CLSHIM_EINVAL);
    assert_int_equal(opens("http:///path"), CLSHIM_EINVAL);
    unsetenv("AWS_ACCESS_KEY_ID");
    setenv("AWS_SECRET_ACCESS_KEY", "s", 1);
    assert_int_equal(opens("s3://bucket/prefix"), CLSHIM_EINVAL); /* no key id */
    setenv("AWS_ACCESS_KEY_ID", "k", 1);
    assert_int_equal(opens("s3://bucket/prefix"), CLSHIM_OK);
    assert_int_equal(opens("s3://bucket"), CLSHIM_OK);
    assert_int_equal(opens("s3://"), CLSHIM_EINVAL);
    assert_int_equal(opens("s3:///prefix"), CLSHIM_EINVAL);
    unsetenv("AWS_ACCESS_KEY_ID"), unsetenv("AWS_SECRET_ACCESS_KEY");
    struct remote_options o = {.url = "http://h/p", .password_file = "/nonexistent/pw"};
    remote *r = NULL;
    assert_int_equal(remote_open(&o, &r), CLSHIM_EINVAL);
    assert_null(r);
}

/* a dead HTTP server: the lookup fails at once (connection refused), the
 * breaker opens, later calls cost nothing and push nothing */
static void http_dead_server_fails_fast(void **state)
{
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    char url[64];
    snprintf(url, sizeof url, "http://127.0.0.1:%d/ci", ntohs(a.sin_port));
    close(fd); /* nobody listens there now */
    struct remote_options o = {.url = url, .timeout_ms = 500};
    remote *r;
    assert_int_equal(remote_open(&o, &r), CLSHIM_OK);
    struct store_record out;
    void *arena;
    struct cache_hash h = {1, 2};
    assert_int_equal(remote_get(r, h, "k", 1, &out, &arena, NULL), CLSHIM_EIO);
    struct store_record rec = {"binary", 6, "", 1, ENTRY_ORIGIN_SOURCE, "dev", NULL};
    assert_int_equal(remote_push(r, h, "k", 1, &rec), CLSHIM_EIO); /* the breaker is open */
    struct remote_counters c;
    remote_close(r, &c);
    assert_int_equal(c.errors, 1);
    assert_int_equal(c.lost, 1);
    assert_int_equal(c.pushes, 0);
}

/* what logs and `clshim config` show never holds the password, nor (issue
 * 46: HTTP stores, S3 endpoints) a token as the user, a query value, a
 * password holding '/' or '@', or a fragment */
static void password_redacted(void **state)
{
    static const char *const cases[][2] = {
        {"redis://user:s3cret@host:1/2", "redis://user:***@host:1/2"},
        {"redis://:s3cret@host", "redis://:***@host"},
        {"redis://host:6379", "redis://host:6379"},
        {"unix://u:pw@/a/b.sock", "unix://u:***@/a/b.sock"},
        {"unix:///a/b.sock", "unix:///a/b.sock"},
        {"unix:///a/b.sock?db=3", "unix:///a/b.sock?db=3"},
        {"https://user:s3cret@host/path", "https://user:***@host/path"},
        {"https://t0ken@host:8080/p", "https://***@host:8080/p"},
        {"https://host/p?token=s3cret&X-Amz-Signature=s3cret;bare&db=1",
         "https://host/p?token=***&X-Amz-Signature=***;***&db=1"},
        {"https://u:a/b@c@host/p?t=s3cret#s3cret", "https://u:***@host/p?t=***#***"},
        {"https://host/a@b/c", "https://host/a@b/c"},
    };
    char buf[256];
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        config_redact_url(cases[i][0], buf, sizeof buf);
        assert_string_equal(buf, cases[i][1]);
    }
    config_redact_url("http://u:s3cret@host/p?token=s3cret", buf, 13); /* cut, never past the buffer */
    assert_string_equal(buf, "http://u:***");
    struct remote_options o = {.url = "redis://u:s3cret@127.0.0.1:1"};
    remote *r;
    assert_int_equal(remote_open(&o, &r), CLSHIM_OK);
    assert_null(strstr(remote_name(r), "s3cret"));
    remote_close(r, NULL);
}

static double now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* no server: the first call fails (counted), later ones fail at once
 * (breaker open), pushes are refused, nothing blocks */
static void no_server_fails_fast(void **state)
{
    char path[64];
    snprintf(path, sizeof path, "unix:///nonexistent-%d/redis.sock", (int)getpid());
    struct remote_options o = {.url = path, .timeout_ms = 50};
    remote *r;
    assert_int_equal(remote_open(&o, &r), CLSHIM_OK);
    struct cache_hash h = {1, 2};
    struct store_record out;
    void *arena;
    double t0 = now_ms();
    assert_int_equal(remote_get(r, h, "k", 1, &out, &arena, NULL), CLSHIM_EIO);
    assert_null(arena);
    for (int i = 0; i < 100; i++) assert_int_equal(remote_fetch(r, h, "k", 1, 1000, &out, &arena, NULL), CLSHIM_EIO);
    struct store_record rec = {"binary", 6, "", 1, ENTRY_ORIGIN_SOURCE, "dev", NULL};
    assert_int_equal(remote_push(r, h, "k", 1, &rec), CLSHIM_EIO);
    assert_true(now_ms() - t0 < 1000);
    struct remote_counters c;
    remote_close(r, &c);
    assert_int_equal(c.errors, 1); /* one failure; the rest never reached the network */
    assert_int_equal(c.hits + c.misses + c.pushes, 0);
}

/* a read-only tier refuses pushes before encoding anything */
static void readonly_refuses_push(void **state)
{
    struct remote_options o = {.url = "redis://127.0.0.1:1", .readonly = 1};
    remote *r;
    assert_int_equal(remote_open(&o, &r), CLSHIM_OK);
    struct cache_hash h = {1, 2};
    struct store_record rec = {"binary", 6, "", 1, ENTRY_ORIGIN_SOURCE, "dev", NULL};
    assert_int_equal(remote_push(r, h, "k", 1, &rec), CLSHIM_EREADONLY);
    remote_close(r, NULL);
}

/* a record larger than max_value is not pushed */
static void push_bounded(void **state)
{
    struct remote_options o = {.url = "redis://127.0.0.1:1", .max_value = 200};
    remote *r;
    assert_int_equal(remote_open(&o, &r), CLSHIM_OK);
    static char big[4096];
    struct store_record rec = {big, sizeof big, "", 1, ENTRY_ORIGIN_SOURCE, "dev", NULL};
    assert_int_equal(remote_push(r, (struct cache_hash){1, 2}, "k", 1, &rec), CLSHIM_ETOOBIG);
    remote_close(r, NULL);
}

/* A server in this process on a unix socket: it accepts, reads, and
 * answers a bulk string one byte every 10 ms (trickle), or nothing
 * (silent), until the test closes its listening socket. */
struct fake {
    int fd, trickle;
    char path[108];
    pthread_t thread;
};

static void *fake_main(void *arg)
{
    struct fake *f = arg;
    int c;
    char buf[4096];
    while ((c = accept(f->fd, NULL, NULL)) >= 0) {
        if (read(c, buf, sizeof buf) > 0 && f->trickle) {
            static const char reply[] = "$1000\r\n";
            for (size_t i = 0; i < 400 && send(c, i < 7 ? reply + i : "x", 1, MSG_NOSIGNAL) == 1; i++)
                usleep(10000);
        }
        /* silent: the connection is kept open until the test ends */
        if (f->trickle) close(c);
    }
    return NULL;
}

static void fake_start(struct fake *f, int trickle)
{
    f->trickle = trickle;
    snprintf(f->path, sizeof f->path, "/tmp/clshim-fake-%d-%d.sock", (int)getpid(), trickle);
    unlink(f->path);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    snprintf(a.sun_path, sizeof a.sun_path, "%s", f->path);
    f->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(f->fd >= 0);
    assert_int_equal(bind(f->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(f->fd, 8), 0);
    assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_stop(struct fake *f)
{
    shutdown(f->fd, SHUT_RDWR); /* accept() returns */
    close(f->fd);
    pthread_join(f->thread, NULL);
    unlink(f->path);
}

/* A remote tier on fake f, its timeout 200 ms. */
static remote *open_on(struct fake *f, int trickle)
{
    fake_start(f, trickle);
    char url[200];
    snprintf(url, sizeof url, "unix://%s", f->path);
    struct remote_options o = {.url = url, .timeout_ms = 200};
    remote *r;
    assert_int_equal(remote_open(&o, &r), CLSHIM_OK);
    return r;
}

struct lookup {
    remote *r;
    int rc;
    double ms;
};

static void *lookup_main(void *arg)
{
    struct lookup *l = arg;
    struct store_record out;
    void *arena;
    double t0 = now_ms();
    l->rc = remote_get(l->r, (struct cache_hash){1, 2}, "k", 1, &out, &arena, NULL);
    l->ms = now_ms() - t0;
    return NULL;
}

/* a server that trickles its reply (each byte 10 ms apart, far inside the
 * 200 ms timeout) is cut off at the lookup's deadline, counted as a
 * timeout; before issue 31 this lookup took the whole reply (4 s) */
static void trickling_server_is_cut_at_the_deadline(void **state)
{
    struct fake f;
    remote *r = open_on(&f, 1);
    struct lookup l = {r, 0, 0};
    lookup_main(&l);
    assert_int_equal(l.rc, CLSHIM_EIO);
    assert_true(l.ms >= 190 && l.ms < 400);
    struct remote_counters c;
    remote_close(r, &c);
    assert_int_equal(c.timeouts, 1);
    assert_int_equal(c.errors, 1);
    fake_stop(&f);
}

/* two threads looking up at once against a silent server: the one waiting
 * for the lookup connection is bounded by its own deadline too */
static void lookups_behind_another_are_bounded(void **state)
{
    struct fake f;
    remote *r = open_on(&f, 0);
    struct lookup l[2] = {{r, 0, 0}, {r, 0, 0}};
    pthread_t t[2];
    for (int i = 0; i < 2; i++) assert_int_equal(pthread_create(&t[i], NULL, lookup_main, &l[i]), 0);
    for (int i = 0; i < 2; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(l[i].rc, CLSHIM_EIO);
        assert_true(l[i].ms < 400);
    }
    struct remote_counters c;
    remote_close(r, &c);
    assert_true(c.timeouts >= 1);
    fake_stop(&f);
}

int main(void)
{
    log_set_level(LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(url_forms),          cmocka_unit_test(password_redacted),
        cmocka_unit_test(no_server_fails_fast), cmocka_unit_test(readonly_refuses_push),
        cmocka_unit_test(push_bounded),       cmocka_unit_test(http_url_forms),
        cmocka_unit_test(http_dead_server_fails_fast),
        cmocka_unit_test(trickling_server_is_cut_at_the_deadline),
        cmocka_unit_test(lookups_behind_another_are_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
