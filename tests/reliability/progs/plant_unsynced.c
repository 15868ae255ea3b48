/* plant_unsynced — writes the marker a process of another boot leaves when
 * the machine goes down before its hit's driver files were synced
 * (cache/driver_writes.h: the format is driver_writes.c's):
 *
 *   plant_unsynced MARKER BOOT PID ROOT DIR...
 *
 * test_driver_writes plants one to show that the next run removes what it
 * names. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define XXH_INLINE_ALL
#include <xxhash.h>

static void summed(FILE *f, const char *tag, const char *path)
{
    fprintf(f, "%s %s %016llx\n", tag, path, (unsigned long long)XXH64(path, strlen(path), 0));
}

int main(int argc, char **argv)
{
    if (argc < 6) {
        fprintf(stderr, "usage: plant_unsynced MARKER BOOT PID ROOT DIR...\n");
        return 2;
    }
    FILE *f = fopen(argv[1], "w");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    fprintf(f, "clshim-unsynced 1\nboot %s\npid %s\n", argv[2], argv[3]);
    summed(f, "root", argv[4]);
    for (int i = 5; i < argc; i++) summed(f, "dir", argv[i]);
    return fclose(f) == 0 ? 0 : 1;
}
