/* error.h — clshim's internal error codes.
 *
 * Internal functions return 0 (CLSHIM_OK) or one of these; LMDB, zstd and
 * errno codes are mapped here, never leaked. None of them ever reaches an
 * application: the interposer turns every internal failure into the real
 * driver path.
 */
#ifndef CLSHIM_ERROR_H
#define CLSHIM_ERROR_H

enum clshim_err {
    CLSHIM_OK = 0,
    CLSHIM_ENOTFOUND = -30001, /* no such entry */
    CLSHIM_ECORRUPT = -30002,  /* entry or file fails verification */
    CLSHIM_ECOLLISION = -30003,/* hash matches, key material differs */
    CLSHIM_ENOMEM = -30004,
    CLSHIM_EIO = -30005,       /* read/write/open failure */
    CLSHIM_EFULL = -30006,     /* map or disk full even after eviction */
    CLSHIM_EPERM = -30007,     /* unsafe ownership or permissions */
    CLSHIM_EREADONLY = -30008, /* write refused: read-only cache */
    CLSHIM_EBUSY = -30009,     /* another live owner holds it */
    CLSHIM_EINVAL = -30010,    /* bad argument or malformed input */
    CLSHIM_ETOOBIG = -30011,   /* outside the entry size limits */
    CLSHIM_EUNSUPPORTED = -30012,
    CLSHIM_EDISABLED = -30013, /* feature turned off by configuration */
    CLSHIM_ENOSPC = -30014,    /* the file system holding the cache is full */
    CLSHIM_EUNTRUSTED = -30015, /* an entry not sealed by a trusted key (CLSHIM_TRUST) */
};

/* A short English description; never NULL. */
const char *clshim_strerror(int err);

#endif
