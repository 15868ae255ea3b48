/* test_driver_writes.c — a hit's driver files synced once in the background
 * (cache/driver_writes.h), called as interpose/files.c calls it. The
 * integration test (test_driver_writes) runs it under PoCL; here each
 * promise is checked on its own: which syncs are skipped, what the marker
 * names, that the syncer deletes it, and what a recovery removes (only
 * what a marker of another boot names, whole and inside the driver's
 * cache directory). */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

#include "cache/driver_writes.h"
#include "tests/unit/tmpdir.h"

static char dir[256], root[300], mdir[300];

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    static char buf[65536];
    FILE *f = fopen(path, "r");
    if (!f) return NULL;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    return buf;
}

static void mkdirs(const char *path)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", path);
    assert_int_equal(system(cmd), 0);
}

/* The markers in mdir (the lock file is not one). */
static int markers(char *first, size_t len)
{
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls '%s' | grep -v '^lock$'", mdir);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    int n = 0;
    char line[200];
    while (fgets(line, sizeof line, p)) {
        line[strcspn(line, "\n")] = 0;
        if (!n++ && first) snprintf(first, len, "%s/%s", mdir, line);
    }
    pclose(p);
    return n;
}

static void summed_line(char *out, size_t len, const char *tag, const char *path, int good)
{
    unsigned long long h = XXH64(path, strlen(path), 0);
    snprintf(out, len, "%s %s %016llx\n", tag, path, good ? h : h ^ 1);
}

/* A marker as a writer of boot `boot`, process `pid`, leaves it. */
static void plant_marker(const char *name, const char *boot, long pid, const char *const *dirs, const int *good,
                         int ndirs, const char *tail)
{
    char path[800], text[8192], line[1200];
    snprintf(text, sizeof text, "clshim-unsynced 1\nboot %s\npid %ld\n", boot, pid);
    summed_line(line, sizeof line, "root", root, 1);
    strcat(text, line);
    for (int i = 0; i < ndirs; i++) {
        summed_line(line, sizeof line, "dir", dirs[i], good[i]);
        strcat(text, line);
    }
    if (tail) strcat(text, tail);
    snprintf(path, sizeof path, "%s/%s", mdir, name);
    write_file(path, text);
}

static int setup(void **state)
{
    (void)state;
    assert_int_equal(tmpdir_make(dir, sizeof dir, "dwrites"), 0);
    snprintf(root, sizeof root, "%s/kcache", dir);
    snprintf(mdir, sizeof mdir, "%s/cache/unsynced", dir);
    char cache[300];
    snprintf(cache, sizeof cache, "%s/cache", dir);
    mkdirs(cache);
    mkdirs(root);
    /* Read once, at the first config_get(): before any test calls in. */
    setenv("CLSHIM_CACHE_DIR", cache, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tmpdir_remove(dir);
}

/* Opens (creating) a file for writing, as PoCL writes its cache files. */
static int create(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "x", 1), 1);
    return fd;
}

static void skips_only_the_drivers_cache_files(void **state)
{
    (void)state;
    char prog[400], shallow[400], outside[400], f[500], m[800];
    snprintf(prog, sizeof prog, "%s/AB/HASH1", root);
    snprintf(shallow, sizeof shallow, "%s/AB", root);
    snprintf(outside, sizeof outside, "%s/user", dir);
    mkdirs(prog);
    mkdirs(outside);

    struct driver_writes *w = driver_writes_begin(root);
    assert_non_null(w);
    int ret = -1;
    snprintf(f, sizeof f, "%s/program.bc", prog);
    int fd = create(f);
    assert_int_equal(driver_writes_sync(fd, &ret), 1); /* inside: skipped */
    assert_int_equal(ret, 0);
    close(fd);
    snprintf(f, sizeof f, "%s/index", shallow);
    fd = create(f);
    assert_int_equal(driver_writes_sync(fd, &ret), 0); /* one level in: synced */
    close(fd);
    snprintf(f, sizeof f, "%s/data", outside);
    fd = create(f);
    assert_int_equal(driver_writes_sync(fd, &ret), 0); /* the user's: synced */
    close(fd);

    /* The marker is durable before the skip returns, and names the
     * program's directory and the root. */
    assert_int_equal(markers(m, sizeof m), 1);
    char *text = read_text(m);
    assert_non_null(text);
    assert_non_null(strstr(text, "clshim-unsynced 1\n"));
    char want[600];
    snprintf(want, sizeof want, "\ndir %s ", prog);
    assert_non_null(strstr(text, want));
    snprintf(want, sizeof want, "\nroot %s ", root);
    assert_non_null(strstr(text, want));

    /* A rename into a directory not yet named extends the marker first. */
    char other[400], to[500];
    snprintf(other, sizeof other, "%s/CD/HASH2/k/64-1-1", root);
    mkdirs(other);
    snprintf(to, sizeof to, "%s/k.so", other);
    driver_writes_before_rename(AT_FDCWD, to);
    text = read_text(m);
    snprintf(want, sizeof want, "\ndir %s ", other);
    assert_non_null(strstr(text, want));

    driver_writes_end(w);
    assert_int_equal(driver_writes_settle(10000), 0);
    assert_int_equal(markers(NULL, 0), 0); /* synced, then deleted */
    struct driver_writes_stats st;
    driver_writes_stats(&st);
    assert_true(st.syncs_skipped >= 1);
    assert_true(st.markers >= 1);
}

static void no_window_without_a_root(void **state)
{
    (void)state;
    assert_null(driver_writes_begin(NULL));
    assert_null(driver_writes_begin(""));
    assert_null(driver_writes_begin("/a/../b")); /* not clean */
    int ret = -1, fd = create("/dev/null");
    assert_int_equal(driver_writes_sync(fd, &ret), 0); /* no window: the real call */
    close(fd);
}

static void recovery_removes_only_what_another_boot_named(void **state)
{
    (void)state;
    char good[400], badsum[400], outside[400], shallow[400], cut[400], path[600];
    snprintf(good, sizeof good, "%s/AB/GOOD", root);
    snprintf(badsum, sizeof badsum, "%s/AB/BADSUM", root);
    snprintf(outside, sizeof outside, "%s/user/keep", dir);
    snprintf(shallow, sizeof shallow, "%s/AB", root);
    snprintf(cut, sizeof cut, "%s/AB/CUT", root);
    const char *dirs[] = {good, badsum, outside, shallow};
    const int sums[] = {1, 0, 1, 1};
    for (int i = 0; i < 4; i++) mkdirs(dirs[i]);
    mkdirs(cut);
    snprintf(path, sizeof path, "%s/k.so", good);
    write_file(path, "");
    /* The last line has no end: cut by the crash, never synced. */
    char tail[600];
    snprintf(tail, sizeof tail, "dir %s %016llx", cut, (unsigned long long)XXH64(cut, strlen(cut), 0));
    plant_marker("1-1-1", "another-boot", 4242, dirs, sums, 4, tail);

    assert_int_equal(driver_writes_recover(mdir, "this-boot"), 1);
    struct stat st;
    assert_int_not_equal(stat(good, &st), 0);   /* named, whole, inside: removed */
    assert_int_equal(stat(badsum, &st), 0);     /* its checksum is wrong */
    assert_int_equal(stat(outside, &st), 0);    /* not the driver's */
    assert_int_equal(stat(shallow, &st), 0);    /* a level of the index */
    assert_int_equal(stat(cut, &st), 0);        /* a line cut short */
    assert_int_equal(markers(NULL, 0), 0);      /* the marker goes with them */
}

static void this_boots_markers_are_synced_not_removed(void **state)
{
    (void)state;
    char prog[400];
    snprintf(prog, sizeof prog, "%s/EF/LIVE", root);
    mkdirs(prog);
    const char *dirs[] = {prog};
    const int sums[] = {1};
    pid_t child = fork();
    if (!child) _exit(0);
    assert_true(child > 0);
    waitpid(child, NULL, 0);
    plant_marker("dead", "this-boot", child, dirs, sums, 1, NULL);  /* its writer is gone */
    plant_marker("alive", "this-boot", 1, dirs, sums, 1, NULL);     /* init lives on */
    assert_int_equal(driver_writes_recover(mdir, "this-boot"), 0);
    assert_int_equal(driver_writes_settle(10000), 0);
    struct stat st;
    assert_int_equal(stat(prog, &st), 0);
    char m[800];
    assert_int_equal(markers(m, sizeof m), 1);
    assert_non_null(strstr(m, "/alive"));
    unlink(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(skips_only_the_drivers_cache_files),
        cmocka_unit_test(no_window_without_a_root),
        cmocka_unit_test(recovery_removes_only_what_another_boot_named),
        cmocka_unit_test(this_boots_markers_are_synced_not_removed),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
