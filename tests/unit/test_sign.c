/* test_sign.c — cache/sign.h: key files, trust sets, and signed remote
 * values tried like an attacker would (another key, a changed record, a
 * changed or cut signature, a trusted key's name on someone else's
 * signature). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "cache/sign.h"

static char dir[64];

static void path_of(char *buf, size_t len, const char *name) { snprintf(buf, len, "%s/%s", dir, name); }

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/clshim-sign-XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd);
}

/* a key pair made once per test */
static void keypair(const char *name, unsigned char sk[SIGN_SECRET_BYTES], unsigned char pk[SIGN_PUBLIC_BYTES])
{
    char path[256], pub[300], err[512];
    path_of(path, sizeof path, name);
    snprintf(pub, sizeof pub, "%s.pub", path);
    assert_int_equal(sign_keygen(path, err, sizeof err), 0);
    assert_int_equal(sign_read_secret(path, sk, err, sizeof err), 0);
    assert_int_equal(sign_read_public(pub, pk, err, sizeof err), 0);
}

/* keygen writes a 0600 secret and its public key, never over a file */
static void keygen_files(void **state)
{
    (void)state;
    unsigned char sk[SIGN_SECRET_BYTES], pk[SIGN_PUBLIC_BYTES], derived[SIGN_PUBLIC_BYTES];
    keypair("a", sk, pk);
    sign_public_of(sk, derived);
    assert_memory_equal(pk, derived, sizeof pk);
    char path[256], err[512];
    struct stat st;
    path_of(path, sizeof path, "a");
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    assert_int_equal(sign_keygen(path, err, sizeof err), -1);
    assert_non_null(strstr(err, "never overwritten"));
    /* the public key file is not a secret key, nor the reverse */
    char pub[300];
    snprintf(pub, sizeof pub, "%s.pub", path);
    assert_int_equal(sign_read_secret(pub, sk, err, sizeof err), -1);
    assert_int_equal(sign_read_public(path, pk, err, sizeof err), -1);
    assert_non_null(strstr(err, "keygen"));
}

/* a signed value opens to its record and signer; every change is caught */
static void signed_value_checks(void **state)
{
    (void)state;
    unsigned char sk[SIGN_SECRET_BYTES], pk[SIGN_PUBLIC_BYTES], sk2[SIGN_SECRET_BYTES], pk2[SIGN_PUBLIC_BYTES];
    keypair("b", sk, pk);
    keypair("c", sk2, pk2);
    static const char rec[] = "CLSHIME1 a record of some length, as the store writes it";
    size_t n = sizeof rec - 1, len = SIGN_ENVELOPE_SIZE + n;
    unsigned char *v = malloc(len), signer[SIGN_PUBLIC_BYTES];
    sign_value(rec, n, sk, v);
    memcpy(v + SIGN_ENVELOPE_SIZE, rec, n);
    const void *r;
    size_t rlen;
    assert_int_equal(sign_open_value(v, len, &r, &rlen, signer), SIGN_SIGNED);
    assert_int_equal(rlen, n);
    assert_memory_equal(r, rec, n);
    assert_memory_equal(signer, pk, sizeof pk);
    /* a bare record is unsigned, and is all record */
    assert_int_equal(sign_open_value(rec, n, &r, &rlen, signer), SIGN_UNSIGNED);
    assert_ptr_equal(r, rec);
    assert_int_equal(rlen, n);
    /* one flipped bit anywhere after the magic: refused */
    for (size_t i = 8; i < len; i++) {
        v[i] ^= 0x10;
        assert_int_equal(sign_open_value(v, len, &r, &rlen, signer), SIGN_BAD);
        v[i] ^= 0x10;
    }
    /* cut short (the envelope alone, or less): refused */
    assert_int_equal(sign_open_value(v, SIGN_ENVELOPE_SIZE - 1, &r, &rlen, signer), SIGN_BAD);
    assert_int_equal(sign_open_value(v, len - 1, &r, &rlen, signer), SIGN_BAD);
    /* another key's signature under this key's name: refused */
    unsigned char *w = malloc(len);
    sign_value(rec, n, sk2, w);
    memcpy(w + 8, pk, SIGN_PUBLIC_BYTES);
    memcpy(w + SIGN_ENVELOPE_SIZE, rec, n);
    assert_int_equal(sign_open_value(w, len, &r, &rlen, signer), SIGN_BAD);
    /* the envelope of one record around another: refused */
    char other[sizeof rec];
    memcpy(other, rec, sizeof rec);
    other[20] ^= 1;
    memcpy(v + SIGN_ENVELOPE_SIZE, other, n);
    assert_int_equal(sign_open_value(v, len, &r, &rlen, signer), SIGN_BAD);
    free(v);
    free(w);
}

/* trust: every listed key; a file that cannot be read narrows the set */
static void trust_sets(void **state)
{
    (void)state;
    unsigned char sk[SIGN_SECRET_BYTES], pk[SIGN_PUBLIC_BYTES], sk2[SIGN_SECRET_BYTES], pk2[SIGN_PUBLIC_BYTES];
    keypair("d", sk, pk);
    keypair("e", sk2, pk2);
    char list[1024], err[512];
    snprintf(list, sizeof list, "%s/d.pub:%s/e.pub", dir, dir);
    sign_trust *t;
    assert_int_equal(sign_trust_load(list, &t, err, sizeof err), 0);
    assert_int_equal(sign_trust_count(t), 2);
    assert_true(sign_trust_has(t, pk) && sign_trust_has(t, pk2));
    sign_trust_free(t);
    /* a secret key and a missing file in the list: only d trusted, -1 */
    snprintf(list, sizeof list, "%s/e:%s/missing.pub:%s/d.pub", dir, dir, dir);
    assert_int_equal(sign_trust_load(list, &t, err, sizeof err), -1);
    assert_non_null(t);
    assert_int_equal(sign_trust_count(t), 1);
    assert_true(sign_trust_has(t, pk));
    assert_false(sign_trust_has(t, pk2));
    sign_trust_free(t);
    /* nothing readable: an empty set, which trusts nothing */
    snprintf(list, sizeof list, "%s/missing.pub", dir);
    assert_int_equal(sign_trust_load(list, &t, err, sizeof err), -1);
    assert_int_equal(sign_trust_count(t), 0);
    assert_false(sign_trust_has(t, pk));
    sign_trust_free(t);
    assert_false(sign_trust_has(NULL, pk));
}

/* a seal verifies for exactly what was sealed: any byte of the key
 * material, the origin, the log or the binary changed, another sealer
 * named, or the seal itself changed, and it does not */
static void seals(void **state)
{
    (void)state;
    unsigned char sk[SIGN_SECRET_BYTES], pk[SIGN_PUBLIC_BYTES], sk2[SIGN_SECRET_BYTES], pk2[SIGN_PUBLIC_BYTES];
    keypair("s1", sk, pk);
    keypair("s2", sk2, pk2);
    char list[1024], err[512];
    snprintf(list, sizeof list, "%s/s1.pub", dir);
    sign_trust *t;
    assert_int_equal(sign_trust_load(list, &t, err, sizeof err), 0);
    char key[] = "key material", log[] = "build log";
    unsigned char bin[256];
    for (size_t i = 0; i < sizeof bin; i++) bin[i] = (unsigned char)(i * 7);
    struct store_source src = {.kind = STORE_SOURCE_HERE};
    struct store_record r = {bin, sizeof bin, log, 5, 1, "dev", NULL};
    assert_string_equal(sign_check_seal(key, sizeof key, &r, t), "it is not sealed");
    sign_seal(key, sizeof key, &r, sk, &src);
    r.source = &src;
    assert_true(src.flags & STORE_SOURCE_SEALED);
    assert_memory_equal(src.seal_signer, pk, SIGN_PUBLIC_BYTES);
    assert_null(sign_check_seal(key, sizeof key, &r, t));
    /* what the seal does not cover: compile time and device name */
    r.compile_ns = 99, r.device_name = "other";
    assert_null(sign_check_seal(key, sizeof key, &r, t));
    /* what it covers */
    key[0] ^= 1;
    assert_non_null(sign_check_seal(key, sizeof key, &r, t));
    key[0] ^= 1;
    assert_non_null(sign_check_seal(key, sizeof key - 1, &r, t));
    r.origin = 2;
    assert_non_null(sign_check_seal(key, sizeof key, &r, t));
    r.origin = 1;
    log[0] ^= 1;
    assert_non_null(sign_check_seal(key, sizeof key, &r, t));
    log[0] ^= 1;
    for (size_t i = 0; i < sizeof bin; i += 51) {
        bin[i] ^= 0x80;
        assert_non_null(sign_check_seal(key, sizeof key, &r, t));
        bin[i] ^= 0x80;
    }
    r.binary_size--;
    assert_non_null(sign_check_seal(key, sizeof key, &r, t));
    r.binary_size++;
    for (size_t i = 0; i < sizeof src.seal; i += 13) {
        src.seal[i] ^= 1;
        assert_string_equal(sign_check_seal(key, sizeof key, &r, t), "its seal does not verify (forged or changed)");
        src.seal[i] ^= 1;
    }
    assert_null(sign_check_seal(key, sizeof key, &r, t));
    /* another key's seal: not trusted; a trusted key's name on it: forged */
    struct store_source other = {.kind = STORE_SOURCE_HERE};
    sign_seal(key, sizeof key, &r, sk2, &other);
    r.source = &other;
    assert_string_equal(sign_check_seal(key, sizeof key, &r, t), "its sealer is not in CLSHIM_TRUST");
    memcpy(other.seal_signer, pk, SIGN_PUBLIC_BYTES);
    assert_string_equal(sign_check_seal(key, sizeof key, &r, t), "its seal does not verify (forged or changed)");
    (void)pk2;
    sign_trust_free(t);
}

/* a directory in a trust list stands for every FILE.pub in it */
static void trust_directories(void **state)
{
    (void)state;
    unsigned char sk[SIGN_SECRET_BYTES], pk[SIGN_PUBLIC_BYTES], sk2[SIGN_SECRET_BYTES], pk2[SIGN_PUBLIC_BYTES];
    char sub[256], cmd[1024], err[512];
    snprintf(sub, sizeof sub, "%s/keys", dir);
    assert_int_equal(mkdir(sub, 0700), 0);
    keypair("keys/ci-1", sk, pk);
    keypair("keys/ci-2", sk2, pk2);
    snprintf(cmd, sizeof cmd, "rm '%s/ci-1' '%s/ci-2'", sub, sub); /* secrets do not belong there */
    assert_int_equal(system(cmd), 0);
    sign_trust *t;
    assert_int_equal(sign_trust_load(sub, &t, err, sizeof err), 0);
    assert_int_equal(sign_trust_count(t), 2);
    assert_true(sign_trust_has(t, pk) && sign_trust_has(t, pk2));
    sign_trust_free(t);
    snprintf(cmd, sizeof cmd, "rm '%s/ci-1.pub'", sub);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sign_trust_load(sub, &t, err, sizeof err), 0);
    assert_int_equal(sign_trust_count(t), 1);
    assert_true(sign_trust_has(t, pk2) && !sign_trust_has(t, pk));
    sign_trust_free(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keygen_files),
        cmocka_unit_test(signed_value_checks),
        cmocka_unit_test(trust_sets),
        cmocka_unit_test(seals),
        cmocka_unit_test(trust_directories),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
