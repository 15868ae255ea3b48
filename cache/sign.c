/* sign.c — ed25519 keys and signed remote values (format in sign.h). */
#include "cache/sign.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char value_magic[8] = {'C', 'L', 'S', 'H', 'I', 'M', 'V', '1'};
static const char secret_tag[] = "clshim-ed25519-secret ";
static const char public_tag[] = "clshim-ed25519-public ";

struct sign_trust {
    size_t n;
    unsigned char (*keys)[SIGN_PUBLIC_BYTES];
};

static int failf(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return -1;
}

/* sodium_init() is idempotent and thread-safe; it fails only when the
 * system has no randomness source. */
static int ready(char *err, size_t errlen)
{
    return sodium_init() < 0 ? failf(err, errlen, "libsodium cannot be initialised") : 0;
}

/* Writes one key line to a new file (never an existing one). */
static int write_key(const char *path, mode_t mode, const char *tag, const unsigned char *key, size_t len,
                     char *err, size_t errlen)
{
    char hex[2 * SIGN_SECRET_BYTES + 1];
    sodium_bin2hex(hex, sizeof hex, key, len);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0)
        return failf(err, errlen, "cannot create %s: %s%s", path, strerror(errno),
                     errno == EEXIST ? " (an existing key is never overwritten; choose another name)" : "");
    FILE *f = fdopen(fd, "w");
    int bad = !f || fprintf(f, "%s%s\n", tag, hex) < 0;
    bad |= f ? fclose(f) != 0 : close(fd) != 0;
    sodium_memzero(hex, sizeof hex);
    return bad ? failf(err, errlen, "cannot write %s", path) : 0;
}

/* The key of a key file: the line must be `tag` and exactly 2 * len hex digits. */
static int read_key(const char *path, const char *tag, unsigned char *key, size_t len, char *err, size_t errlen)
{
    char line[256];
    FILE *f = fopen(path, "re");
    if (!f) return failf(err, errlen, "cannot read %s: %s", path, strerror(errno));
    int got = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    size_t taglen = strlen(tag), bin_len = 0;
    if (got) line[strcspn(line, "\r\n")] = 0;
    int ok = got && strncmp(line, tag, taglen) == 0 && strlen(line + taglen) == 2 * len &&
             sodium_hex2bin(key, len, line + taglen, 2 * len, NULL, &bin_len, NULL) == 0 && bin_len == len;
    sodium_memzero(line, sizeof line);
    if (!ok)
        return failf(err, errlen, "%s is not a clshim %s key file (a line '%s' and %zu hex digits; "
                     "`clshim cache keygen` makes one)", path, tag == secret_tag ? "secret" : "public", tag, 2 * len);
    return 0;
}

int sign_keygen(const char *path, char *err, size_t errlen)
{
    if (ready(err, errlen)) return -1;
    unsigned char pk[SIGN_PUBLIC_BYTES], sk[SIGN_SECRET_BYTES];
    char pub[4200];
    if (snprintf(pub, sizeof pub, "%s.pub", path) >= (int)sizeof pub) return failf(err, errlen, "name too long");
    /* Refuse before writing anything when the public file is in the way. */
    struct stat st;
    if (lstat(pub, &st) == 0)
        return failf(err, errlen, "%s exists (an existing key is never overwritten; choose another name)", pub);
    crypto_sign_keypair(pk, sk);
    int rc = write_key(path, 0600, secret_tag, sk, sizeof sk, err, errlen);
    sodium_memzero(sk, sizeof sk);
    if (rc == 0 && (rc = write_key(pub, 0644, public_tag, pk, sizeof pk, err, errlen)) != 0) unlink(path);
    return rc;
}

int sign_read_secret(const char *path, unsigned char sk[SIGN_SECRET_BYTES], char *err, size_t errlen)
{
    return ready(err, errlen) ? -1 : read_key(path, secret_tag, sk, SIGN_SECRET_BYTES, err, errlen);
}

int sign_read_public(const char *path, unsigned char pk[SIGN_PUBLIC_BYTES], char *err, size_t errlen)
{
    return ready(err, errlen) ? -1 : read_key(path, public_tag, pk, SIGN_PUBLIC_BYTES, err, errlen);
}

void sign_public_of(const unsigned char sk[SIGN_SECRET_BYTES], unsigned char pk[SIGN_PUBLIC_BYTES])
{
    crypto_sign_ed25519_sk_to_pk(pk, sk);
}

void sign_key_id(const unsigned char pk[SIGN_PUBLIC_BYTES], char *out)
{
    for (int i = 0; i < 8; i++) snprintf(out + 2 * i, 3, "%02x", pk[i]);
}

static int trust_add_file(sign_trust *t, const char *path, char *why, size_t whylen)
{
    unsigned char pk[SIGN_PUBLIC_BYTES];
    if (sign_read_public(path, pk, why, whylen) != 0) return -1;
    if (sign_trust_has(t, pk)) return 0;
    void *k = realloc(t->keys, (t->n + 1) * sizeof *t->keys);
    if (!k) return failf(why, whylen, "out of memory");
    t->keys = k;
    memcpy(t->keys[t->n++], pk, SIGN_PUBLIC_BYTES);
    return 0;
}

/* Every FILE.pub of a directory; 0, or -1 with the first failure in why. */
static int trust_add_dir(sign_trust *t, const char *dir, char *why, size_t whylen)
{
    DIR *d = opendir(dir);
    if (!d) return failf(why, whylen, "%s: %s", dir, strerror(errno));
    int rc = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (e->d_name[0] == '.' || n < 5 || strcmp(e->d_name + n - 4, ".pub")) continue;
        char path[4096], one[512];
        if ((size_t)snprintf(path, sizeof path, "%s/%s", dir, e->d_name) >= sizeof path) continue;
        if (trust_add_file(t, path, one, sizeof one) != 0 && rc == 0) {
            snprintf(why, whylen, "%s", one);
            rc = -1;
        }
    }
    closedir(d);
    return rc;
}

int sign_trust_load(const char *files, sign_trust **out, char *err, size_t errlen)
{
    *out = calloc(1, sizeof **out);
    if (!*out) return failf(err, errlen, "out of memory");
    if (!files) return 0;
    int rc = 0;
    const char *p = files;
    while (*p) {
        size_t n = strcspn(p, ":");
        char path[4096];
        if (n && n < sizeof path) {
            memcpy(path, p, n), path[n] = 0;
            char why[512];
            struct stat st;
            int dir = stat(path, &st) == 0 && S_ISDIR(st.st_mode);
            if ((dir ? trust_add_dir(*out, path, why, sizeof why) : trust_add_file(*out, path, why, sizeof why)) != 0) {
                if (rc == 0) failf(err, errlen, "%s", why);
                rc = -1;
            }
        } else if (n) {
            if (rc == 0) failf(err, errlen, "a file name in the list is too long");
            rc = -1;
        }
        p += n + (p[n] == ':');
    }
    return rc;
}

int sign_trust_has(const sign_trust *t, const unsigned char pk[SIGN_PUBLIC_BYTES])
{
    for (size_t i = 0; t && i < t->n; i++)
        if (memcmp(t->keys[i], pk, SIGN_PUBLIC_BYTES) == 0) return 1;
    return 0;
}

size_t sign_trust_count(const sign_trust *t) { return t ? t->n : 0; }

void sign_trust_free(sign_trust *t)
{
    if (!t) return;
    free(t->keys);
    free(t);
}

/* The state every value signature starts from: the context, with its NUL. */
static void value_hash_init(crypto_sign_ed25519ph_state *st)
{
    crypto_sign_ed25519ph_init(st);
    crypto_sign_ed25519ph_update(st, (const unsigned char *)SIGN_VALUE_CONTEXT, sizeof SIGN_VALUE_CONTEXT);
}

void sign_value(const void *rec, size_t len, const unsigned char sk[SIGN_SECRET_BYTES],
                unsigned char env[SIGN_ENVELOPE_SIZE])
{
    crypto_sign_ed25519ph_state st;
    value_hash_init(&st);
    crypto_sign_ed25519ph_update(&st, rec, len);
    memcpy(env, value_magic, sizeof value_magic);
    sign_public_of(sk, env + 8);
    crypto_sign_ed25519ph_final_create(&st, env + 8 + SIGN_PUBLIC_BYTES, NULL, sk);
}

enum sign_verdict sign_open_value(const void *buf, size_t len, const void **rec, size_t *rec_len,
                                  unsigned char signer[SIGN_PUBLIC_BYTES])
{
    const unsigned char *p = buf;
    *rec = buf, *rec_len = len;
    if (len < sizeof value_magic || memcmp(p, value_magic, sizeof value_magic) != 0) return SIGN_UNSIGNED;
    if (len < SIGN_ENVELOPE_SIZE || sodium_init() < 0) return SIGN_BAD;
    crypto_sign_ed25519ph_state st;
    value_hash_init(&st);
    crypto_sign_ed25519ph_update(&st, p + SIGN_ENVELOPE_SIZE, len - SIGN_ENVELOPE_SIZE);
    if (crypto_sign_ed25519ph_final_verify(&st, p + 8 + SIGN_PUBLIC_BYTES, p + 8) != 0) return SIGN_BAD;
    memcpy(signer, p + 8, SIGN_PUBLIC_BYTES);
    *rec = p + SIGN_ENVELOPE_SIZE, *rec_len = len - SIGN_ENVELOPE_SIZE;
    return SIGN_SIGNED;
}

/* ---- seals ---- */

/* BLAKE2b-512 of what a seal covers (sign.h), then plain ed25519 over that
 * digest: BLAKE2b hashes about twice as fast as the SHA-512 inside
 * ed25519ph here, and the binary is most of what is hashed (bench_seal). */
static void seal_update_len(crypto_generichash_state *st, uint64_t n)
{
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(n >> (8 * i));
    crypto_generichash_update(st, b, sizeof b);
}

static void seal_digest(const void *key, size_t key_len, const struct store_record *rec,
                        unsigned char out[crypto_generichash_BYTES_MAX])
{
    crypto_generichash_state st;
    crypto_generichash_init(&st, NULL, 0, crypto_generichash_BYTES_MAX);
    crypto_generichash_update(&st, (const unsigned char *)SIGN_SEAL_CONTEXT, sizeof SIGN_SEAL_CONTEXT);
    seal_update_len(&st, key_len);
    crypto_generichash_update(&st, key, key_len);
    unsigned char o[4];
    for (int i = 0; i < 4; i++) o[i] = (unsigned char)(rec->origin >> (8 * i));
    crypto_generichash_update(&st, o, sizeof o);
    const char *log = rec->build_log ? rec->build_log : "";
    seal_update_len(&st, strlen(log));
    crypto_generichash_update(&st, (const unsigned char *)log, strlen(log));
    seal_update_len(&st, rec->binary_size);
    crypto_generichash_update(&st, rec->binary, rec->binary_size);
    crypto_generichash_final(&st, out, crypto_generichash_BYTES_MAX);
}

void sign_seal(const void *key, size_t key_len, const struct store_record *rec,
               const unsigned char sk[SIGN_SECRET_BYTES], struct store_source *src)
{
    unsigned char d[crypto_generichash_BYTES_MAX];
    seal_digest(key, key_len, rec, d);
    crypto_sign_detached(src->seal, NULL, d, sizeof d, sk);
    sign_public_of(sk, src->seal_signer);
    src->flags |= STORE_SOURCE_SEALED;
}

const char *sign_check_seal(const void *key, size_t key_len, const struct store_record *rec, const sign_trust *trust)
{
    const struct store_source *src = rec->source;
    if (!src || !(src->flags & STORE_SOURCE_SEALED)) return "it is not sealed";
    if (!sign_trust_has(trust, src->seal_signer)) return "its sealer is not in CLSHIM_TRUST";
    if (sodium_init() < 0) return "libsodium cannot start";
    unsigned char d[crypto_generichash_BYTES_MAX];
    seal_digest(key, key_len, rec, d);
    if (crypto_sign_verify_detached(src->seal, d, sizeof d, src->seal_signer) != 0)
        return "its seal does not verify (forged or changed)";
    return NULL;
}
