/* rel_probe — the two sides of the directory swap race (test_security_race).
 *
 *   rel_probe plant DIR TEXT   stores TEXT as the binary of the one probe key
 *   rel_probe get DIR          opens DIR as an application would and prints
 *                              the probe key's binary, "miss" (not there),
 *                              "error: ..." (the lookup failed) or "refused"
 *                              (the cache was not used); exit 0
 *   rel_probe swap A B         exchanges A and B (renameat2 RENAME_EXCHANGE)
 *                              as fast as it can until killed; prints how
 *                              many exchanges succeeded when SIGTERM comes
 *
 * The victim runs `get` in a fresh process each time, so each run opens the
 * cache from scratch while the attacker runs `swap` as another user. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/entry.h"
#include "cache/store.h"
#include "common/error.h"

static const char probe_key[] = "clshim-key 2\nkind=source\noptions=\ninput=the swap race probe";

static struct cache_hash probe_hash(void) { return entry_xxh3_128(probe_key, sizeof probe_key - 1); }

static int plant(const char *dir, const char *text)
{
    struct store_options o = {.dir = dir, .compress_level = 0};
    store *s;
    int rc = store_open(&o, &s);
    if (rc == CLSHIM_OK) {
        struct store_record r = {text, strlen(text), "", 1, ENTRY_ORIGIN_SOURCE, "probe", NULL};
        rc = store_put(s, probe_hash(), probe_key, sizeof probe_key - 1, &r);
        store_close(s);
    }
    if (rc) fprintf(stderr, "rel_probe: plant %s: %s\n", dir, clshim_strerror(rc));
    return rc ? 1 : 0;
}

static int get(const char *dir)
{
    struct store_options o = {.dir = dir, .compress_level = 0};
    store *s;
    if (store_open(&o, &s) != CLSHIM_OK) {
        puts("refused");
        return 0;
    }
    struct store_record r;
    void *arena;
    int rc = store_get(s, probe_hash(), probe_key, sizeof probe_key - 1, &r, &arena);
    if (rc == CLSHIM_OK) printf("%.*s\n", (int)r.binary_size, (const char *)r.binary);
    else if (rc == CLSHIM_ENOTFOUND) puts("miss");
    else printf("error: %s\n", clshim_strerror(rc));
    store_record_free(arena);
    store_close(s);
    return 0;
}

static volatile sig_atomic_t stop;
static void on_term(int sig) { (void)sig; stop = 1; }

static int swap(const char *a, const char *b)
{
    signal(SIGTERM, on_term);
    unsigned long n = 0, failed = 0;
    while (!stop) {
        if (renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE) == 0) n++;
        else failed++;
    }
    printf("%lu exchanges, %lu failed\n", n, failed);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && !strcmp(argv[1], "plant")) return plant(argv[2], argv[3]);
    if (argc == 3 && !strcmp(argv[1], "get")) return get(argv[2]);
    if (argc == 4 && !strcmp(argv[1], "swap")) return swap(argv[2], argv[3]);
    fprintf(stderr, "usage: rel_probe plant DIR TEXT | get DIR | swap A B\n");
    return 2;
}
