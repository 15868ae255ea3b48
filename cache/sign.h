/* sign.h — ed25519 keys (libsodium) and signed remote values: who may
 * write the remote tier (CLSHIM_REMOTE_SIGN_KEY, CLSHIM_REMOTE_TRUST).
 *
 * Design. Record checksums and the binding (entry.h) catch damage and
 * binaries moved between keys, but anyone who can write the server can
 * compute them. A signature says which builder made a value, so a fleet's
 * readers can take values from its trusted builders only (docs/security.md).
 *
 * Key files (`clshim cache keygen`, also used by signed exports, see
 * tools/archive_sign.h) are one line of text: "clshim-ed25519-secret " and
 * 128 hex digits (libsodium's 64-byte secret key, which holds the public
 * key; created 0600, never overwritten), or "clshim-ed25519-public " and 64
 * hex digits.
 *
 * A signed value is an envelope followed by the record exactly as an
 * unsigned value holds it (entry.h):
 *   offset size
 *        0    8  magic "CLSHIMV1"
 *        8   32  the signer's ed25519 public key
 *       40   64  ed25519ph signature (libsodium crypto_sign_ed25519ph) of
 *                SIGN_VALUE_CONTEXT (with its NUL) followed by the record
 * An unsigned record starts with "CLSHIME1", so the two never look alike. The
 * record holds its key hash and full key material, so a signed value moved
 * under another key still fails the record's checks; the context keeps a
 * value signature from ever passing as an archive signature or the reverse.
 *
 * Thread safety: every function may be called from any thread; a trust set
 * is read-only once loaded. Every function that can fail returns 0, or -1
 * with one line (no newline) in err, unless it says otherwise.
 */
#ifndef CLSHIM_SIGN_H
#define CLSHIM_SIGN_H

#include <stddef.h>

#include "cache/store.h"

#define SIGN_PUBLIC_BYTES 32
#define SIGN_SECRET_BYTES 64
#define SIGN_ENVELOPE_SIZE (8 + 32 + 64)
#define SIGN_VALUE_CONTEXT "clshim remote value 1"

/* Writes a new key pair: the secret key to `path` (0600, O_EXCL) and the
 * public key to `path`.pub (0644, O_EXCL). Neither file is overwritten; when
 * the public one cannot be created, the secret one is removed again. */
int sign_keygen(const char *path, char *err, size_t errlen);

/* Reads a key file of the matching kind (the error names the file and the
 * expected form). */
int sign_read_secret(const char *path, unsigned char sk[SIGN_SECRET_BYTES], char *err, size_t errlen);
int sign_read_public(const char *path, unsigned char pk[SIGN_PUBLIC_BYTES], char *err, size_t errlen);

/* The public half of a secret key. */
void sign_public_of(const unsigned char sk[SIGN_SECRET_BYTES], unsigned char pk[SIGN_PUBLIC_BYTES]);

/* The first 16 hex digits of a public key (how logs and `clshim cache
 * list/show` name a signer); out holds at least 17 bytes. */
void sign_key_id(const unsigned char pk[SIGN_PUBLIC_BYTES], char *out);

/* A set of trusted public keys. */
typedef struct sign_trust sign_trust;

/* Loads the public keys of `files`, a ':'-separated list; an entry that is
 * a directory stands for every FILE.pub in it (key rotation: numbered key
 * files, ci-1.pub, ci-2.pub, dropped in and removed). Returns 0 with
 * every key loaded; -1 when a file cannot be read or is not a public key
 * file (err names the first such file) — *out then still holds the keys
 * that did load, possibly none, so a broken entry narrows trust, never
 * widens it. *out is NULL only when out of memory. */
int sign_trust_load(const char *files, sign_trust **out, char *err, size_t errlen);
/* 1 when pk is in the set (t may be NULL: 0). */
int sign_trust_has(const sign_trust *t, const unsigned char pk[SIGN_PUBLIC_BYTES]);
size_t sign_trust_count(const sign_trust *t);
void sign_trust_free(sign_trust *t);

/* The envelope for `rec` (SIGN_ENVELOPE_SIZE bytes into env), signed with sk. */
void sign_value(const void *rec, size_t len, const unsigned char sk[SIGN_SECRET_BYTES],
                unsigned char env[SIGN_ENVELOPE_SIZE]);

/* ---- seals: entries signed where they were built (CLSHIM_SIGN_KEY) ----
 * A seal is an ed25519 signature of a BLAKE2b-512 digest of
 * SIGN_SEAL_CONTEXT (with its NUL), then what the entry serves: its key
 * material, origin, build log and binary, each length first (little-endian,
 * 8 bytes; the origin 4). Nothing else of the record is in it, so the seal survives
 * what rewrites a record (hit counts, export, a reader's copy with its
 * source), and a binary moved under other key material fails it. */
#define SIGN_SEAL_CONTEXT "clshim entry seal 1"
/* Seals rec into *src: flags gain STORE_SOURCE_SEALED, seal_signer and seal
 * are set; the rest of *src is left as the caller made it. */
void sign_seal(const void *key, size_t key_len, const struct store_record *rec,
               const unsigned char sk[SIGN_SECRET_BYTES], struct store_source *src);
/* NULL when rec carries a seal (rec->source) that verifies, by a sealer in
 * `trust`; else why not, in words ("it is not sealed", ...). */
const char *sign_check_seal(const void *key, size_t key_len, const struct store_record *rec, const sign_trust *trust);

enum sign_verdict {
    SIGN_SIGNED,   /* an envelope whose signature verifies: *signer made it */
    SIGN_UNSIGNED, /* no envelope: the whole of buf is the record */
    SIGN_BAD,      /* an envelope whose signature does not verify (forged, changed, cut short) */
};
/* Looks at a value read from the server: *rec, *rec_len receive the record
 * inside it (for SIGN_SIGNED and SIGN_UNSIGNED), *signer the signer's key
 * (SIGN_SIGNED only). Verifying costs a SHA-512 over the record and one
 * ed25519 verification. */
enum sign_verdict sign_open_value(const void *buf, size_t len, const void **rec, size_t *rec_len,
                                  unsigned char signer[SIGN_PUBLIC_BYTES]);

#endif
