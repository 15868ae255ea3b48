/* archive_sign.h — signed cache exports: `clshim cache export --sign KEYFILE`
 * and `clshim cache import --trust PUBKEY`, with ed25519 from libsodium.
 *
 * Design. A signed export is an ordinary export stream (store.h's format)
 * followed by a trailer of ARCHIVE_TRAILER_SIZE bytes: the 8 bytes
 * "CLSHIMS1", the signer's ed25519 public key (32 bytes) and the ed25519ph
 * signature (64 bytes: ed25519 over the SHA-512 of the message, libsodium's
 * crypto_sign_ed25519ph) of every byte before the trailer. An import that
 * trusts no key reads the stream up to its end marker and never looks at the
 * trailer, so a signed export imports anywhere. An import that trusts a key
 * verifies the whole file first and stores nothing unless it is signed, by
 * that key, and unchanged.
 *
 * The signature proves who made the archive; it is what lets a fleet accept
 * only caches its own builder made. (Every record is also checked as any
 * import checks it: decoding, key hash, binding of binary to key.)
 *
 * Key files are cache/sign.h's (`clshim cache keygen`, sign_keygen()), the
 * same ones that sign remote values.
 *
 * Every function returns 0, or -1 with one line (no newline) in err.
 */
#ifndef CLSHIM_ARCHIVE_SIGN_H
#define CLSHIM_ARCHIVE_SIGN_H

#include <stddef.h>
#include <stdio.h>

#define ARCHIVE_TRAILER_SIZE (8 + 32 + 64)

/* Copies `body` from its start to `out`, then appends the trailer signed
 * with the secret key in `keyfile`. */
int archive_sign_copy(FILE *body, FILE *out, const char *keyfile, char *err, size_t errlen);

/* Checks that `archive` (seekable, read from its start) ends with a trailer
 * made by the public key in `pubfile` and that its signature matches every
 * byte before it. On success the file is positioned at its start again.
 * The caller must make sure nobody else can change the file between this
 * check and reading it (cache_cmd.c copies the input to a private
 * temporary file first). */
int archive_verify(FILE *archive, const char *pubfile, char *err, size_t errlen);

#endif
