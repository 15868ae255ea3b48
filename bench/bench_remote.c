/* bench_remote — time to first result with the remote tier (issue 20).
 *
 *   bench_remote [--quick] [--reps N] [--shim PATH/libclshim.so]
 *
 * The program and the measured span are bench_ttfr's (--program mixed,
 * bench/pipeline.h: fifteen kernels; create, build, kernels, first run,
 * clFinish), measured by bench_ttfr's own child (`bench_ttfr --child source
 * --program mixed`, beside this binary),
 * each run a fresh process. A private redis-server (Debian's) runs on a unix
 * socket in this benchmark's temp dir. Modes, round-robin rep after rep:
 *   cold          no shim, empty POCL_CACHE_DIR: the full compile;
 *   clshim-local  LD_PRELOAD, warm local cache, no remote tier: a local hit;
 *   clshim-remote LD_PRELOAD, an EMPTY local cache dir every run, the remote
 *                 tier filled by an earlier runner: what a fresh CI runner
 *                 sees (the hit is fetched, verified, stored locally, loaded);
 *   clshim-signed the same, the earlier runner signing its pushes
 *                 (CLSHIM_REMOTE_SIGN_KEY) and this one taking only values
 *                 signed by it (CLSHIM_REMOTE_TRUST): what the signature's
 *                 check adds to a hit (issue 31). The check alone, on buffers
 *                 of a few sizes, is measured too (best of 20);
 *   clshim-http   clshim-remote on an HTTP store (CLSHIM_REMOTE=http://...,
 *                 tests/integration/http_store.py on 127.0.0.1, libcurl);
 *   clshim-s3     the same on S3 (moto's S3 server on 127.0.0.1, requests
 *                 signed with SigV4 by libcurl; scripts/install-deps.sh
 *                 installs moto).
 * PoCL's own cache is empty in every mode. Target: clshim-remote at least 5x
 * faster than cold (medians). Every run's checksum must match; clshim-local
 * runs must hit from disk and clshim-remote runs from the remote tier, with
 * no compile. Exits 1 when a run fails or results differ, not when a target
 * is missed; 1 as well when a server (redis-server, http_store.py, moto)
 * cannot be started.
 */
#include "bench/bench_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>

#include "cache/remote.h"
#include "cache/sign.h"
#include "common/error.h"

enum { M_COLD, M_LOCAL, M_REMOTE, M_SIGNED, M_HTTP, M_S3, M_COUNT };
static const char *const mode_names[M_COUNT] = {"cold",          "clshim-local", "clshim-remote",
                                                "clshim-signed", "clshim-http",  "clshim-s3"};
static const char *const mode_desc[M_COUNT] = {
    "no shim, empty PoCL cache (full compile)",
    "LD_PRELOAD, local clshim cache warm",
    "LD_PRELOAD, empty local cache, remote tier (Redis, unix socket) warm",
    "the same, values signed by the writer, the reader trusting only its key",
    "LD_PRELOAD, empty local cache, remote tier (HTTP, 127.0.0.1) warm",
    "LD_PRELOAD, empty local cache, remote tier (S3 on moto, 127.0.0.1) warm"};
static const char *const mode_marks[M_COUNT] = {NULL, "(disk)", "(remote)", "(remote)", "(remote)", "(remote)"};

struct ctx {
    const char *root, *shim;
    char child[4200], remote_url[4300], key[4200], pub[4300], http_url[64], s3_endpoint[64];
    uint64_t checksum;
    int failures;
};

enum { F_TTFR, F_BUILD, F_COUNT };
static const char *const field_names[F_COUNT] = {"ttfr_us", "build_us"};

static int run_mode(struct ctx *c, int mode, int prime, double f[F_COUNT])
{
    struct bu_env e;
    char pocl[4200], cache[4200], log[4200], out[4096];
    bu_env_base(&e);
    bu_set_driver_cache(&e, bu_fresh_dir(c->root, "pocl-empty", pocl, sizeof pocl));
    if (mode != M_COLD) {
        bu_env_set(&e, "LD_PRELOAD", c->shim);
        bu_env_set(&e, "CLSHIM_LOG", "info");
        if (mode == M_LOCAL) {
            snprintf(cache, sizeof cache, "%s/clshim-local", c->root);
        } else {
            bu_fresh_dir(c->root, "clshim-empty", cache, sizeof cache);
            bu_env_set(&e, "CLSHIM_REMOTE", mode == M_HTTP ? c->http_url : mode == M_S3 ? "s3://bench/clshim"
                                                                                     : c->remote_url);
            if (mode == M_S3) bu_env_set(&e, "CLSHIM_REMOTE_ENDPOINT", c->s3_endpoint);
            /* The stores here are Python servers on a shared machine: a
             * lookup may take longer than the default 50 ms, and a miss
             * would time a compile, not a hit. A deadline, not a delay. */
            if (mode == M_HTTP || mode == M_S3) bu_env_set(&e, "CLSHIM_REMOTE_TIMEOUT", "2000");
            bu_env_set(&e, "CLSHIM_REMOTE_NAMESPACE", mode == M_SIGNED ? "bench-signed" : "bench");
            /* The priming run is the signing writer, the timed ones readers. */
            if (mode == M_SIGNED) bu_env_set(&e, prime ? "CLSHIM_REMOTE_SIGN_KEY" : "CLSHIM_REMOTE_TRUST",
                                             prime ? c->key : c->pub);
        }
        bu_env_set(&e, "CLSHIM_CACHE_DIR", cache);
    }
    snprintf(log, sizeof log, "%s/child.log", c->root);
    unlink(log);
    char *argv[] = {c->child, "--child", "source", "--program", "mixed", NULL};
    int rc = bu_run_checked("bench_remote", mode_names[mode], argv, &e, log, out, sizeof out, &c->checksum);
    /* Untimed: the capture helper of a clshim run still builds in the PoCL
     * cache directory the next run empties (and stores what the next run
     * reads). */
    if (mode != M_COLD) bu_wait_capture(c->shim, cache, NULL);
    if (rc) c->failures++;
    if (rc < 0) return -1;
    for (int i = 0; i < F_COUNT; i++) f[i] = bu_field(out, field_names[i], 0);
    if (mode != M_COLD && !prime && (!bu_file_contains(log, mode_marks[mode]) || bu_file_contains(log, "miss "))) {
        fprintf(stderr, "bench_remote: %s run was not a hit %s without a compile\n", mode_names[mode],
                mode_marks[mode]);
        c->failures++;
    }
    return 0;
}

/* Waits until the remote tier at url answers a ping: 0, or -1 (logged). */
static int wait_up(const char *what, const char *url, const char *endpoint)
{
    struct remote_options o = {.url = url, .endpoint = endpoint, .timeout_ms = 200, .readonly = 1};
    remote *r;
    if (remote_open(&o, &r) != CLSHIM_OK) return -1;
    char why[256] = "";
    double ms;
    int up = 0;
    for (int i = 0; i < 400 && !up; i++) {
        up = remote_ping(r, &ms, why, sizeof why) == CLSHIM_OK;
        if (!up) usleep(25000);
    }
    remote_close(r, NULL);
    if (!up) fprintf(stderr, "bench_remote: %s did not answer: %s\n", what, why);
    return up ? 0 : -1;
}

/* redis-server on a unix socket in root; its pid, or -1. */
static pid_t start_redis(struct ctx *c)
{
    char sock[4200], logf[4200];
    snprintf(sock, sizeof sock, "%s/redis.sock", c->root);
    snprintf(logf, sizeof logf, "%s/redis.log", c->root);
    snprintf(c->remote_url, sizeof c->remote_url, "unix://%s", sock);
    char *argv[] = {"redis-server", "--port", "0", "--unixsocket", sock, "--unixsocketperm", "700", "--dir",
                    (char *)c->root, "--save", "", "--appendonly", "no", "--logfile", logf, NULL};
    pid_t pid;
    if (posix_spawnp(&pid, "redis-server", NULL, NULL, argv, environ) != 0) {
        fprintf(stderr, "bench_remote: cannot start redis-server (scripts/install-deps.sh installs it)\n");
        return -1;
    }
    if (wait_up("redis-server", c->remote_url, NULL) != 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        return -1;
    }
    return pid;
}

/* A free TCP port on 127.0.0.1 (for moto, which takes one on its command line). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0) close(fd);
    return port;
}

/* Spawns argv, its output to log (NULL: ours); its pid, or -1. */
static pid_t spawn(char *const argv[], const char *log)
{
    pid_t pid;
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (log) {
        posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_APPEND, 0600);
        posix_spawn_file_actions_adddup2(&fa, 1, 2);
    }
    int rc = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc == 0 ? pid : -1;
}

/* The HTTP store (tests/integration/http_store.py, beside the build's
 * source tree) and moto's S3 server, on 127.0.0.1, with the bucket made;
 * their pids in pids[2] (-1: not started). 0, or -1. */
static int start_object_stores(struct ctx *c, pid_t pids[2])
{
    char dir[4096], store[4300], moto_py[4300], portf[4300], lifetime[] = "7200";
    snprintf(dir, sizeof dir, "%s", bu_self());
    snprintf(store, sizeof store, "%s/../../tests/integration/http_store.py", dirname(dir));
    /* moto lives in the checkout's own virtual environment (install-deps.sh). */
    snprintf(moto_py, sizeof moto_py, "%s/../../.deps/moto/bin/python", dir);
    snprintf(portf, sizeof portf, "%s/http.port", c->root);
    char *http_argv[] = {"python3", store, "store", portf, lifetime, NULL};
    char log[4300];
    snprintf(log, sizeof log, "%s/stores.log", c->root);
    if (access(store, R_OK) != 0 || (pids[0] = spawn(http_argv, log)) < 0) {
        fprintf(stderr, "bench_remote: cannot start %s\n", store);
        return -1;
    }
    int port = 0;
    for (int i = 0; i < 200 && !port; i++) {
        FILE *f = fopen(portf, "r");
        if (f && fscanf(f, "%d", &port) != 1) port = 0;
        if (f) fclose(f);
        if (!port) usleep(25000);
    }
    snprintf(c->http_url, sizeof c->http_url, "http://127.0.0.1:%d/bench", port);
    if (!port || wait_up("the HTTP store", c->http_url, NULL)) return -1;

    /* moto and its clients want credentials; any will do on loopback. */
    setenv("AWS_ACCESS_KEY_ID", "bench", 1), setenv("AWS_SECRET_ACCESS_KEY", "bench", 1);
    setenv("AWS_REGION", "us-east-1", 1);
    char portarg[16];
    snprintf(portarg, sizeof portarg, "%d", free_port());
    snprintf(c->s3_endpoint, sizeof c->s3_endpoint, "http://127.0.0.1:%s", portarg);
    char *moto_argv[] = {moto_py, "-m", "moto.server", "-H", "127.0.0.1", "-p", portarg, NULL};
    if ((pids[1] = spawn(moto_argv, log)) < 0) return -1;
    char make_bucket[256];
    snprintf(make_bucket, sizeof make_bucket,
             "import boto3, time\n"
             "for i in range(200):\n"
             "    try: boto3.client('s3', endpoint_url='%s').create_bucket(Bucket='bench'); break\n"
             "    except Exception: time.sleep(0.05)\n",
             c->s3_endpoint);
    char *mk_argv[] = {moto_py, "-c", make_bucket, NULL};
    pid_t mk = spawn(mk_argv, log);
    int st = 1;
    if (mk > 0) waitpid(mk, &st, 0);
    if (st != 0 || wait_up("moto's S3 server (scripts/install-deps.sh installs moto)", "s3://bench/clshim",
                           c->s3_endpoint))
        return -1;
    return 0;
}

static void stop(pid_t pid)
{
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    waitpid(pid, NULL, 0);
}

/* What checking a value's signature costs, alone: sign_open_value() on a
 * signed buffer of `size` bytes, best of 20, in microseconds. */
static double verify_us(const unsigned char *sk, size_t size)
{
    unsigned char *v = malloc(SIGN_ENVELOPE_SIZE + size), signer[SIGN_PUBLIC_BYTES];
    if (!v) return 0;
    for (size_t i = 0; i < size; i++) v[SIGN_ENVELOPE_SIZE + i] = (unsigned char)(i * 131 + (i >> 9));
    sign_value(v + SIGN_ENVELOPE_SIZE, size, sk, v);
    double best = 1e18;
    for (int i = 0; i < 20; i++) {
        const void *rec;
        size_t len;
        double t0 = bu_now_ns();
        int ok = sign_open_value(v, SIGN_ENVELOPE_SIZE + size, &rec, &len, signer) == SIGN_SIGNED;
        double t = bu_now_ns() - t0;
        if (ok && t < best) best = t;
    }
    free(v);
    return best / 1e3;
}

int main(int argc, char **argv)
{
    struct bu_opts o;
    int rc = bu_parse_opts(argc, argv, "bench_remote", 7, 3, &o);
    if (rc) return rc;
    if (bu_find_shim("bench_remote", &o.shim)) return 1;
    char root[4096], dir[4096];
    struct ctx c = {.root = bu_temp_root("bench_remote", root, sizeof root), .shim = o.shim};
    snprintf(dir, sizeof dir, "%s", bu_self());
    snprintf(c.child, sizeof c.child, "%s/bench_ttfr", dirname(dir));
    if (access(c.child, X_OK) != 0) {
        fprintf(stderr, "bench_remote: no %s (make builds it)\n", c.child);
        return 1;
    }
    char err[512];
    unsigned char sk[SIGN_SECRET_BYTES];
    snprintf(c.key, sizeof c.key, "%s/writer.key", root);
    snprintf(c.pub, sizeof c.pub, "%s.pub", c.key);
    if (sign_keygen(c.key, err, sizeof err) != 0 || sign_read_secret(c.key, sk, err, sizeof err) != 0) {
        fprintf(stderr, "bench_remote: %s\n", err);
        bu_rm_rf(root);
        return 1;
    }
    pid_t redis = start_redis(&c), stores[2] = {-1, -1};
    if (redis < 0 || start_object_stores(&c, stores) != 0) {
        stop(redis), stop(stores[0]), stop(stores[1]);
        bu_rm_rf(root);
        return 1;
    }

    /* Fill the local cache, then the remote tier (a runner with its own,
     * empty cache compiles and pushes). */
    double f[F_COUNT] = {0};
    run_mode(&c, M_LOCAL, 1, f);
    run_mode(&c, M_REMOTE, 1, f);
    double prime_cold = f[F_TTFR];
    run_mode(&c, M_SIGNED, 1, f);
    run_mode(&c, M_HTTP, 1, f);
    run_mode(&c, M_S3, 1, f);

    static double v[M_COUNT][F_COUNT][100];
    int n[M_COUNT] = {0};
    for (int r = 0; r < o.reps && !c.failures; r++)
        for (int m = 0; m < M_COUNT; m++)
            if (run_mode(&c, m, 0, f) == 0) {
                for (int i = 0; i < F_COUNT; i++) v[m][i][n[m]] = f[i];
                n[m]++;
            }

    printf("bench_remote: time to first result of the 15-kernel program (bench_ttfr's span), each run a fresh\n"
           "  process; %d reps per mode, round-robin; first build with the remote tier %.0f ms\n",
           o.reps, prime_cold / 1e3);
    printf("  %-14s %10s %10s %10s %9s %10s  %s\n", "mode", "median", "min", "max", "vs cold", "build", "what");
    double med[M_COUNT] = {0};
    for (int m = 0; m < M_COUNT; m++) {
        if (!n[m]) continue;
        const double *t = v[m][F_TTFR];
        med[m] = bu_median(t, (size_t)n[m]);
        double ms[100];
        for (int i = 0; i < n[m]; i++) ms[i] = t[i] / 1e3;
        bu_csv("remote", "program=mixed", mode_names[m], "ttfr", "ms", ms, (size_t)n[m]);
        printf("  %-14s %7.1f ms %7.1f ms %7.1f ms %8.1fx %7.1f ms  %s\n", mode_names[m], med[m] / 1e3,
               bu_min(t, (size_t)n[m]) / 1e3, bu_quantile(t, (size_t)n[m], 1.0) / 1e3, med[M_COLD] / med[m],
               bu_median(v[m][F_BUILD], (size_t)n[m]) / 1e3, mode_desc[m]);
    }
    if (n[M_COLD] && n[M_REMOTE]) {
        double r = med[M_COLD] / med[M_REMOTE];
        printf("  cold / clshim-remote          = %6.1fx  (target >= 5.0x)  %s\n", r, bu_verdict(r >= 5.0));
    }
    if (n[M_LOCAL] && n[M_REMOTE])
        printf("  clshim-remote / clshim-local  = %6.2fx  (what the fetch, check and local store add)\n",
               med[M_REMOTE] / med[M_LOCAL]);
    for (int m = M_HTTP; m <= M_S3; m++)
        if (n[m] && n[M_REMOTE])
            printf("  %-13s / clshim-remote = %6.2fx  (the store against Redis's unix socket)\n", mode_names[m],
                   med[m] / med[M_REMOTE]);
    if (n[M_REMOTE] && n[M_SIGNED])
        printf("  clshim-signed - clshim-remote = %+6.1f ms (what the signature adds to a hit; noise included)\n",
               (med[M_SIGNED] - med[M_REMOTE]) / 1e3);
    static const size_t sizes[] = {40u << 10, 1u << 20, 16u << 20};
    printf("  signature check alone (sign_open_value, best of 20):");
    for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++)
        printf(" %zu KiB %.0f us%s", sizes[i] >> 10, verify_us(sk, sizes[i]), i + 1 < sizeof sizes / sizeof *sizes ? "," : "\n");
    printf("  results: %s (checksum %016llx)\n", c.failures ? "FAILED" : "identical in every run",
           (unsigned long long)c.checksum);
    stop(redis), stop(stores[0]), stop(stores[1]);
    bu_rm_rf(root);
    return c.failures ? 1 : 0;
}
