/* tmpdir.h — a private temp directory for a unit test group: made in
 * setup, removed whole in teardown. Included by one test file each, so
 * everything here is static. */
#ifndef CLSHIM_TEST_TMPDIR_H
#define CLSHIM_TEST_TMPDIR_H

#include <stdio.h>
#include <stdlib.h>

/* /tmp/clshim-TAG.XXXXXX into dir (len bytes), created; 0 or -1. */
static inline int tmpdir_make(char *dir, size_t len, const char *tag)
{
    if ((size_t)snprintf(dir, len, "/tmp/clshim-%s.XXXXXX", tag) >= len) return -1;
    return mkdtemp(dir) ? 0 : -1;
}

/* Removes dir and everything in it; 0 or -1. */
static inline int tmpdir_remove(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

#endif
