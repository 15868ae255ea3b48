/* fuzz_plan — fusion plan files and the inline CLSHIM_FUSE form
 * (fusion/plan.h) on hostile text.
 *
 * Input: one form byte (even: file form, odd: inline form), then the text.
 * Properties: plan_parse returns 0, CLSHIM_EINVAL with a message
 * "ORIGIN:LINE:COLUMN: ..." on one line, or CLSHIM_ENOMEM; every parsed
 * sequence has 2..PLAN_MAX_SEQ names, each a non-empty C identifier of at
 * most PLAN_MAX_NAME bytes, found by plan_has_kernel; plan_check on a parsed
 * plan answers 0 or EINVAL with a message; everything frees cleanly. */
#include <ctype.h>

#include "common/error.h"
#include "fusion/plan.h"
#include "tests/fuzz/fuzz.h"

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    return 0;
}

static int is_ident(const char *s)
{
    if (!*s || !(isalpha((unsigned char)*s) || *s == '_')) return 0;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || *s == '_')) return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) return 0;
    enum plan_form form = data[0] % 2 ? PLAN_INLINE_FORM : PLAN_FILE_FORM;
    const char *origin = form == PLAN_FILE_FORM ? "plan.txt" : "CLSHIM_FUSE";
    size_t len = size - 1;
    char *text = malloc(len ? len : 1); /* not NUL-terminated */
    if (!text) return 0;
    memcpy(text, data + 1, len);

    struct fusion_plan *pp = calloc(1, sizeof *pp); /* plan_free frees it */
    if (!pp) abort();
#define plan (*pp)
    char err[512];
    memset(err, 'x', sizeof err);
    int rc = plan_parse(&plan, text, len, form, origin, err, sizeof err);
    FUZZ_ASSERT(rc == 0 || rc == CLSHIM_EINVAL || rc == CLSHIM_ENOMEM);
    if (rc == CLSHIM_EINVAL) {
        FUZZ_ASSERT(memchr(err, 0, sizeof err) != NULL);
        FUZZ_ASSERT(strncmp(err, origin, strlen(origin)) == 0 && err[strlen(origin)] == ':');
        FUZZ_ASSERT(strchr(err, '\n') == NULL);
    }
    FUZZ_ASSERT(plan.nseqs <= PLAN_MAX_SEQS);
    for (uint32_t i = 0; i < plan.nseqs; i++) {
        const struct plan_seq *q = &plan.seqs[i];
        FUZZ_ASSERT(q->n >= 2 && q->n <= PLAN_MAX_SEQ);
        FUZZ_ASSERT(q->where && strncmp(q->where, origin, strlen(origin)) == 0);
        /* internal=: a well-formed list, each item naming a kernel of the sequence */
        FUZZ_ASSERT(!q->internal_args || (q->internal && plan_internal_args_valid(q->internal_args) == 0));
        for (const char *it = q->internal_args; it && *it;) {
            size_t klen = strcspn(it, "."), known = 0;
            for (uint32_t j = 0; j < q->n && !known; j++)
                known = strlen(q->names[j]) == klen && !memcmp(q->names[j], it, klen);
            FUZZ_ASSERT(known);
            it += strcspn(it, ",");
            if (*it) it++;
        }
        for (uint32_t j = 0; j < q->n; j++) {
            FUZZ_ASSERT(q->names[j] && strlen(q->names[j]) <= PLAN_MAX_NAME);
            FUZZ_ASSERT(is_ident(q->names[j]));
            FUZZ_ASSERT(plan_has_kernel(&plan, q->names[j]));
        }
    }
    if (rc == 0 && plan.nseqs) {
        char cerr[512] = "";
        int crc = plan_check(&plan, cerr, sizeof cerr);
        FUZZ_ASSERT(crc == 0 || (crc == CLSHIM_EINVAL && cerr[0]));
    }
    plan_free(pp);
#undef plan
    free(text);
    return 0;
}
