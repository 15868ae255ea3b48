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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(keygen_files),
        cmocka_unit_test(signed_value_checks),
        cmocka_unit_test(trust_sets),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
