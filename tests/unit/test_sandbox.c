/* test_sandbox.c — the key's snapshot (cache/snapshot.h) and the sandbox a
 * build reads it through (cache/sandbox.h), called as interpose/files.c
 * calls them. The integration test (test_capture_exact) runs them under a
 * real driver; here each promise is checked on its own. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/key.h"
#include "cache/sandbox.h"
#include "cache/snapshot.h"
#include "tests/unit/tmpdir.h"

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static char dir[256];

static int setup(void **state)
{
    (void)state;
    assert_int_equal(tmpdir_make(dir, sizeof dir, "sandbox"), 0);
    assert_int_equal(chdir(dir), 0);
    mkdir("inc", 0700);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    return tmpdir_remove(dir);
}

/* A key of `src` with the scanner (-I inc), its snapshot kept. */
static struct key_buf key_of(const char *src)
{
    struct key_buf k;
    key_begin(&k, KEY_SOURCE, "-I inc");
    k.snap = snapshot_new();
    assert_non_null(k.snap);
    char why[256];
    assert_int_equal(key_add_headers(&k, src, strlen(src), "-I inc", why, sizeof why), 0);
    snapshot_add_aliases(k.snap, &k);
    return k;
}

static char *read_fd_all(int fd)
{
    static char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    assert_true(n >= 0);
    buf[n] = 0;
    return buf;
}

/* paths are made absolute and folded, ".." kept */
static void norm_folds_but_keeps_dotdot(void **state)
{
    (void)state;
    char out[256];
    assert_int_equal(snapshot_norm("/w", "a//b/./c", out, sizeof out), 0);
    assert_string_equal(out, "/w/a/b/c");
    assert_int_equal(snapshot_norm("/w", "/x/../y/.", out, sizeof out), 0);
    assert_string_equal(out, "/x/../y");
    assert_int_equal(snapshot_norm("/w", "./h.h", out, sizeof out), 0);
    assert_string_equal(out, "/w/h.h");
}

/* one version per path: the key and the scanner see the first read */
static void one_version_per_path(void **state)
{
    (void)state;
    write_file("inc/v.h", "#define V 1\n");
    struct key_snapshot *s = snapshot_new();
    const unsigned char *b1, *b2;
    size_t l1, l2;
    char h1[33], h2[33];
    assert_int_equal(snapshot_read(s, "inc/v.h", 1 << 20, &b1, &l1, h1), 0);
    write_file("inc/v.h", "#define V 2222\n");
    assert_int_equal(snapshot_read(s, "./inc//v.h", 1 << 20, &b2, &l2, h2), 0);
    assert_ptr_equal(b1, b2);
    assert_string_equal(h1, h2);
    assert_memory_equal(b2, "#define V 1\n", l2);
    assert_int_equal(s->n, 1);
    snapshot_free(s);
}

/* what travels to the helper comes back whole, and garbage does not */
static void encode_decode(void **state)
{
    (void)state;
    write_file("inc/a.h", "#define A 1\n");
    struct key_buf k = key_of("#include \"a.h\"\n__kernel void k(void) {}\n");
    struct key_buf enc = {0};
    snapshot_encode(k.snap, &enc);
    struct key_snapshot *back = snapshot_decode(enc.data, enc.len);
    assert_non_null(back);
    assert_int_equal(back->n, k.snap->n);
    assert_string_equal(back->files[0].path, k.snap->files[0].path);
    assert_string_equal(back->files[0].hex, k.snap->files[0].hex);
    assert_int_equal(snapshot_matches_key(back, k.data, k.len, NULL, 0), 0);
    assert_null(snapshot_decode(enc.data, enc.len - 1));
    assert_null(snapshot_decode("garbage", 7));
    /* bytes that are not the key's: refused */
    back->files[0].bytes[0] ^= 1;
    memcpy(back->files[0].hex, "00000000000000000000000000000000", 33);
    char why[256];
    assert_int_equal(snapshot_matches_key(back, k.data, k.len, why, sizeof why), -1);
    assert_non_null(strstr(why, "not the content the key names"));
    snapshot_free(back);
    key_free(&enc);
    key_free(&k);
}

/* served from the snapshot whatever the disk holds; absent places absent;
 * an unnamed file of the user's is a violation */
static void serves_the_snapshot(void **state)
{
    (void)state;
    write_file("inc/s.h", "#define S 1\n");
    write_file("other.h", "#define O 1\n");
    struct key_buf k = key_of("#include \"s.h\"\n__kernel void k(void) {}\n");
    write_file("inc/s.h", "#define S 2 /* changed after the key */\n");
    struct sandbox *sb = sandbox_begin(k.snap, k.data, k.len, NULL);
    assert_non_null(sb);
    int fd = -1;
    assert_int_equal(sandbox_open(AT_FDCWD, "inc/s.h", O_RDONLY, &fd), 1);
    assert_true(fd >= 0);
    assert_string_equal(read_fd_all(fd), "#define S 1\n");
    close(fd);
    struct stat st;
    int rc = -1;
    assert_int_equal(sandbox_stat(AT_FDCWD, "inc/s.h", &st, &rc), 1);
    assert_int_equal(rc, 0);
    assert_int_equal(st.st_size, 12);
    /* "s.h" in the working directory is a place the key names as absent */
    write_file("s.h", "#define S 3\n");
    assert_int_equal(sandbox_open(AT_FDCWD, "s.h", O_RDONLY, &fd), 1);
    assert_int_equal(fd, -1);
    assert_int_equal(errno, ENOENT);
    /* the driver's own files pass; a file the key does not name is noted */
    assert_int_equal(sandbox_open(AT_FDCWD, "/etc/hostname", O_RDONLY, &fd), 0);
    assert_int_equal(sandbox_open(AT_FDCWD, "other.h", O_RDONLY, &fd), 1);
    assert_true(fd >= 0);
    close(fd);
    char why[512];
    assert_int_equal(sandbox_end(sb, why, sizeof why), -1);
    assert_non_null(strstr(why, "a file the key does not name"));
    key_free(&k);
}

/* files of one identity are one file to the build (#pragma once) */
static void aliases_share_identity(void **state)
{
    (void)state;
    write_file("inc/real.h", "#pragma once\n");
    unlink("inc/link.h");
    assert_int_equal(symlink("real.h", "inc/link.h"), 0);
    struct key_buf k = key_of("#include \"real.h\"\n#include \"link.h\"\n__kernel void k(void) {}\n");
    assert_non_null(memmem(k.data, k.len, "header-alias ", 13));
    struct sandbox *sb = sandbox_begin(k.snap, k.data, k.len, NULL);
    struct stat a, b;
    int rc;
    assert_int_equal(sandbox_stat(AT_FDCWD, "inc/real.h", &a, &rc), 1);
    assert_int_equal(sandbox_stat(AT_FDCWD, "inc/link.h", &b, &rc), 1);
    assert_int_equal(a.st_ino, b.st_ino);
    assert_int_equal(a.st_dev, b.st_dev);
    sandbox_end(sb, NULL, 0);
    key_free(&k);
    /* a copy instead of the link: another key */
    unlink("inc/link.h");
    write_file("inc/link.h", "#pragma once\n");
    struct key_buf k2 = key_of("#include \"real.h\"\n#include \"link.h\"\n__kernel void k(void) {}\n");
    assert_null(memmem(k2.data, k2.len, "header-alias ", 13));
    key_free(&k2);
}

/* record mode: what the build read is judged against the key made after */
static void record_mode_judges_what_was_read(void **state)
{
    (void)state;
    write_file("inc/r.h", "#define R 1\n");
    struct sandbox *sb = sandbox_begin(NULL, NULL, 0, NULL);
    assert_non_null(sb);
    assert_false(sandbox_sees(sb)); /* no interpose/files.c in this process */
    sandbox_free(sb);
    /* As if interpose/files.c were the process's open (it is not linked
     * here): the verdict is then about what the build read. */
    sandbox_interposer = dlsym(RTLD_DEFAULT, "open");
    sb = sandbox_begin(NULL, NULL, 0, NULL);
    assert_true(sandbox_sees(sb));
    int fd;
    assert_int_equal(sandbox_open(AT_FDCWD, "inc/r.h", O_RDONLY, &fd), 1);
    assert_true(fd >= 0);
    assert_string_equal(read_fd_all(fd), "#define R 1\n");
    close(fd);
    sandbox_stop(sb);
    char why[512];
    struct key_buf same = key_of("#include \"r.h\"\n__kernel void k(void) {}\n");
    assert_int_equal(sandbox_verdict(sb, same.data, same.len, why, sizeof why), 0);
    write_file("inc/r.h", "#define R 2\n"); /* the key made after the build read other bytes */
    struct key_buf other = key_of("#include \"r.h\"\n__kernel void k(void) {}\n");
    assert_int_equal(sandbox_verdict(sb, other.data, other.len, why, sizeof why), -1);
    assert_non_null(strstr(why, "with other content than the key names"));
    struct key_buf none = key_of("__kernel void k(void) {}\n");
    assert_int_equal(sandbox_verdict(sb, none.data, none.len, why, sizeof why), -1);
    assert_non_null(strstr(why, "a file the key does not name"));
    sandbox_free(sb);
    sandbox_interposer = NULL;
    key_free(&same);
    key_free(&other);
    key_free(&none);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(norm_folds_but_keeps_dotdot),
        cmocka_unit_test(one_version_per_path),
        cmocka_unit_test(encode_decode),
        cmocka_unit_test(serves_the_snapshot),
        cmocka_unit_test(aliases_share_identity),
        cmocka_unit_test(record_mode_judges_what_was_read),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
