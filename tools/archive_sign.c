/* archive_sign.c — signed cache exports (format in archive_sign.h; key
 * files in cache/sign.h). */
#include "tools/archive_sign.h"

#include <sodium.h>
#include <string.h>
#include <sys/stat.h>

#include "cache/sign.h"

static const char trailer_magic[8] = {'C', 'L', 'S', 'H', 'I', 'M', 'S', '1'};

/* One line into err (`what` takes one %s: arg). */
static int fail(char *err, size_t errlen, const char *what, const char *arg)
{
    snprintf(err, errlen, what, arg);
    return -1;
}

int archive_sign_copy(FILE *body, FILE *out, const char *keyfile, char *err, size_t errlen)
{
    unsigned char sk[crypto_sign_SECRETKEYBYTES], sig[crypto_sign_BYTES], buf[65536];
    if (sign_read_secret(keyfile, sk, err, errlen)) return -1;
    crypto_sign_ed25519ph_state st;
    crypto_sign_ed25519ph_init(&st);
    rewind(body);
    size_t n;
    int bad = 0;
    while ((n = fread(buf, 1, sizeof buf, body)) > 0) {
        crypto_sign_ed25519ph_update(&st, buf, n);
        if (fwrite(buf, 1, n, out) != n) bad = 1;
    }
    bad |= ferror(body);
    crypto_sign_ed25519ph_final_create(&st, sig, NULL, sk);
    if (!bad) {
        bad |= fwrite(trailer_magic, 1, sizeof trailer_magic, out) != sizeof trailer_magic;
        bad |= fwrite(sk + crypto_sign_SEEDBYTES, 1, crypto_sign_PUBLICKEYBYTES, out) != crypto_sign_PUBLICKEYBYTES;
        bad |= fwrite(sig, 1, sizeof sig, out) != sizeof sig;
        bad |= fflush(out) != 0;
    }
    sodium_memzero(sk, sizeof sk);
    return bad ? fail(err, errlen, "%s", "cannot write the signed export") : 0;
}

int archive_verify(FILE *archive, const char *pubfile, char *err, size_t errlen)
{
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], trailer[ARCHIVE_TRAILER_SIZE], buf[65536];
    if (sign_read_public(pubfile, pk, err, errlen)) return -1;
    struct stat st;
    if (fflush(archive) != 0 || fstat(fileno(archive), &st) != 0) return fail(err, errlen, "%s", "cannot read it");
    if (st.st_size < ARCHIVE_TRAILER_SIZE || fseeko(archive, st.st_size - ARCHIVE_TRAILER_SIZE, SEEK_SET) != 0 ||
        fread(trailer, 1, sizeof trailer, archive) != sizeof trailer ||
        memcmp(trailer, trailer_magic, sizeof trailer_magic) != 0)
        return fail(err, errlen, "%s", "it is not signed");
    if (sodium_memcmp(trailer + 8, pk, sizeof pk) != 0)
        return fail(err, errlen, "it is signed by another key than %s", pubfile);
    crypto_sign_ed25519ph_state ph;
    crypto_sign_ed25519ph_init(&ph);
    rewind(archive);
    off_t left = st.st_size - ARCHIVE_TRAILER_SIZE;
    while (left > 0) {
        size_t want = left < (off_t)sizeof buf ? (size_t)left : sizeof buf;
        if (fread(buf, 1, want, archive) != want) return fail(err, errlen, "%s", "cannot read it");
        crypto_sign_ed25519ph_update(&ph, buf, want);
        left -= (off_t)want;
    }
    if (crypto_sign_ed25519ph_final_verify(&ph, trailer + 8 + sizeof pk, pk) != 0)
        return fail(err, errlen, "%s", "its signature does not match its contents (changed after signing)");
    rewind(archive);
    return 0;
}
