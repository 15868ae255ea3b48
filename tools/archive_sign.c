/* archive_sign.c — signed cache exports (format and key files in
 * archive_sign.h). */
#include "tools/archive_sign.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char trailer_magic[8] = {'C', 'L', 'S', 'H', 'I', 'M', 'S', '1'};
static const char secret_tag[] = "clshim-ed25519-secret ";
static const char public_tag[] = "clshim-ed25519-public ";

static int failf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

static int ready(char *err, size_t errlen)
{
    return sodium_init() < 0 ? failf(err, errlen, "libsodium cannot be initialised") : 0;
}

/* Writes one key line to a new file (never an existing one). */
static int write_key(const char *path, mode_t mode, const char *tag, const unsigned char *key, size_t len,
                     char *err, size_t errlen)
{
    char hex[2 * crypto_sign_SECRETKEYBYTES + 1];
    sodium_bin2hex(hex, sizeof hex, key, len);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return failf(err, errlen, "cannot create %s: %s%s", path, strerror(errno),
                     errno == EEXIST ? " (it is not overwritten)" : "");
    FILE *f = fdopen(fd, "w");
    int bad = !f || fprintf(f, "%s%s\n", tag, hex) < 0;
    bad |= f ? fclose(f) != 0 : close(fd) != 0;
    sodium_memzero(hex, sizeof hex);
    return bad ? failf(err, errlen, "cannot write %s", path) : 0;
}

/* Reads the key of a key file: the line must be `tag` and exactly
 * 2 * len hex digits. */
static int read_key(const char *path, const char *tag, unsigned char *key, size_t len, char *err, size_t errlen)
{
    char line[256];
    FILE *f = fopen(path, "r");
    if (!f) return failf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t taglen = strlen(tag), bin_len = 0;
    if (got) line[strcspn(line, "\r\n")] = 0;
    int ok = got && strncmp(line, tag, taglen) == 0 && strlen(line + taglen) == 2 * len &&
             sodium_hex2bin(key, len, line + taglen, 2 * len, NULL, &bin_len, NULL) == 0 && bin_len == len;
    sodium_memzero(line, sizeof line);
    if (!ok)
        return failf(err, errlen, "%s is not a clshim %s key file (a line '%s' and %zu hex digits)", path,
                     tag == secret_tag ? "secret" : "public", tag, 2 * len);
    return 0;
}

int archive_keygen(const char *path, char *err, size_t errlen)
{
    if (ready(err, errlen)) return -1;
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], sk[crypto_sign_SECRETKEYBYTES];
    char pub[4200];
    if (snprintf(pub, sizeof pub, "%s.pub", path) >= (int)sizeof pub) return failf(err, errlen, "name too long");
    crypto_sign_keypair(pk, sk);
    int rc = write_key(path, 0600, secret_tag, sk, sizeof sk, err, errlen);
    sodium_memzero(sk, sizeof sk);
    if (rc == 0 && (rc = write_key(pub, 0644, public_tag, pk, sizeof pk, err, errlen)) != 0) unlink(path);
    return rc;
}

int archive_sign_copy(FILE *body, FILE *out, const char *keyfile, char *err, size_t errlen)
{
    if (ready(err, errlen)) return -1;
    unsigned char sk[crypto_sign_SECRETKEYBYTES], sig[crypto_sign_BYTES], buf[65536];
    if (read_key(keyfile, secret_tag, sk, sizeof sk, err, errlen)) return -1;
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
    return bad ? failf(err, errlen, "cannot write the signed export") : 0;
}

int archive_verify(FILE *archive, const char *pubfile, char *err, size_t errlen)
{
    if (ready(err, errlen)) return -1;
    unsigned char pk[crypto_sign_PUBLICKEYBYTES], trailer[ARCHIVE_TRAILER_SIZE], buf[65536];
    if (read_key(pubfile, public_tag, pk, sizeof pk, err, errlen)) return -1;
    struct stat st;
    if (fflush(archive) != 0 || fstat(fileno(archive), &st) != 0) return failf(err, errlen, "cannot read it");
    if (st.st_size < ARCHIVE_TRAILER_SIZE || fseeko(archive, st.st_size - ARCHIVE_TRAILER_SIZE, SEEK_SET) != 0 ||
        fread(trailer, 1, sizeof trailer, archive) != sizeof trailer ||
        memcmp(trailer, trailer_magic, sizeof trailer_magic) != 0)
        return failf(err, errlen, "it is not signed");
    if (sodium_memcmp(trailer + 8, pk, sizeof pk) != 0)
        return failf(err, errlen, "it is signed by another key than %s", pubfile);
    crypto_sign_ed25519ph_state ph;
    crypto_sign_ed25519ph_init(&ph);
    rewind(archive);
    off_t left = st.st_size - ARCHIVE_TRAILER_SIZE;
    while (left > 0) {
        size_t want = left < (off_t)sizeof buf ? (size_t)left : sizeof buf;
        if (fread(buf, 1, want, archive) != want) return failf(err, errlen, "cannot read it");
        crypto_sign_ed25519ph_update(&ph, buf, want);
        left -= (off_t)want;
    }
    if (crypto_sign_ed25519ph_final_verify(&ph, trailer + 8 + sizeof pk, pk) != 0)
        return failf(err, errlen, "its signature does not match its contents (changed after signing)");
    rewind(archive);
    return 0;
}
