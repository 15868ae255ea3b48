/* plan.h — fusion plans: which kernel sequences to fuse.
 *
 * A plan names sequences of kernels (by function name) that clshim fuses
 * when an application enqueues them back to back on one in-order queue
 * (fusion/batch.h does the holding and fusing). Two sources, merged:
 *
 *   CLSHIM_FUSION_PLAN=FILE, one directive per line:
 *       # a comment (to the end of the line)
 *       fuse scale offset square            names separated by white space
 *       fuse blur+sharpen force-barrier     ... or by '+'; then options
 *   CLSHIM_FUSE="k1+k2+k3;k4+k5:force-barrier"  (the inline form: sequences
 *       separated by ';', names by '+', options after ':' separated by ',')
 *
 * Names are C identifiers (at most PLAN_MAX_NAME bytes). Options:
 *   force-barrier   fuse even where the analysis says a barrier is needed,
 *                   inserting a work-group barrier between the bodies (the
 *                   plan's author promises that every dependency between the
 *                   kernels stays inside a work-group; docs/fusion.md).
 *   internal        every buffer written by one kernel of the sequence and
 *                   read by a later one is not needed after the sequence:
 *                   the fused kernel keeps it in registers where it can
 *                   prove that safe, and its contents after the sequence are
 *                   undefined (docs/fusion.md, "Internalisation"). In a
 *                   file the word `internal` alone is this option: a
 *                   kernel of that name is written joined (fuse a+internal).
 *   const           the scalar (by-value) arguments are baked into the fused
 *                   kernel as constants; their values are part of the fused
 *                   program's key, so other values make another program
 *                   (docs/fusion.md, "Constant propagation").
 *   internal=K.A,...  the same promise for the named buffers only: each item
 *                   names a kernel of the sequence and one of its parameters,
 *                   by name (kernel_arg_name) or by 0-based index as in
 *                   clSetKernelArg: `internal=k1.t1,k2.1` (no spaces). An
 *                   item names the buffer bound to that parameter (in every
 *                   occurrence of a repeated kernel). A kernel not in the
 *                   sequence is a parse error; a parameter name the kernel
 *                   lacks is found when fusing (the fusion is then refused,
 *                   naming the plan position). Not with `internal` alone.
 * A sequence has 2..PLAN_MAX_SEQ kernels (a name may repeat); a plan has at
 * most PLAN_MAX_SEQS sequences. A sequence may not repeat another, nor be a
 * prefix of another (the batcher could not tell where it ends). Automatic
 * fusion keeps the rule among the sequences that can still be held: a
 * window it learns may be the prefix of a learned sequence it retired,
 * which is never a candidate again (fusion/fauto.c).
 *
 * Parsing never trusts its input (it is fuzzed): any byte sequence yields a
 * plan or one error "ORIGIN:LINE:COLUMN: message" (ORIGIN is the file path
 * or "CLSHIM_FUSE"; lines and columns count from 1, columns in bytes).
 */
#ifndef CLSHIM_PLAN_H
#define CLSHIM_PLAN_H

#include <stddef.h>
#include <stdint.h>

#define PLAN_MAX_NAME 255
#define PLAN_MAX_SEQ 64
#define PLAN_MAX_SEQS 4096
#define PLAN_MAX_FILE (4u << 20) /* bytes of a plan file */

struct plan_seq {
    char **names;       /* n kernel names, in enqueue order */
    uint32_t n;
    int force_barrier;
    int internal;       /* the `internal` option (also set by internal=) */
    int consts;         /* the `const` option */
    char *internal_args;/* internal=LIST: "K.A,K.A" as written; NULL: every
                           candidate (plain `internal`) */
    char *where;        /* "ORIGIN:LINE:COLUMN" of the sequence, for messages */
};

struct fusion_plan {
    struct plan_seq *seqs;
    uint32_t nseqs;
};

enum plan_form { PLAN_FILE_FORM, PLAN_INLINE_FORM };

/* Parses `len` bytes of plan text (need not be NUL-terminated; NUL bytes are
 * errors) in the given form, appending its sequences to *plan (allocate it
 * zeroed, or pass one returned before). `origin` names the source in
 * messages. Returns 0, or CLSHIM_EINVAL with err = "ORIGIN:L:C: message"
 * (plan then holds what was parsed before the error; free it), or
 * CLSHIM_ENOMEM. */
int plan_parse(struct fusion_plan *plan, const char *text, size_t len, enum plan_form form, const char *origin,
               char *err, size_t err_len);

/* Builds the process's plan from CLSHIM_FUSION_PLAN's file (`path`, may be
 * NULL or "") and CLSHIM_FUSE's text (`inline_text`, may be NULL or ""), and
 * checks the whole for repeats and prefixes. Returns 0 with *out (NULL when
 * both are empty; free with plan_free), or CLSHIM_EINVAL / CLSHIM_EIO (the
 * file cannot be read; err names it and the errno text) / CLSHIM_ENOMEM with
 * *out NULL and err set. */
int plan_load(const char *path, const char *inline_text, struct fusion_plan **out, char *err, size_t err_len);

/* Checks a parsed plan: no sequence repeats or is a prefix of another.
 * Returns 0 or CLSHIM_EINVAL with err naming both sequences' positions. */
int plan_check(const struct fusion_plan *plan, char *err, size_t err_len);

/* Checks the syntax of an internal= list ("K.A,..." as in the plan; no
 * kernel names are checked). Returns 0 or CLSHIM_EINVAL. The extension
 * API's CL_FUSION_INTERNAL_ARGS_CLSHIM uses it. */
int plan_internal_args_valid(const char *list);

/* Nonzero when `name` appears in some sequence of the plan. */
int plan_has_kernel(const struct fusion_plan *plan, const char *name);

/* Nonzero when the program text (OpenCL C source, or a SPIR-V module with
 * `il` set) may define a kernel the plan names: some name occurs as an
 * identifier (in SPIR-V, as a NUL-terminated string). Over-approximates
 * (a name in a comment counts); a name made by a macro is missed, which only
 * leaves that kernel without argument info (docs/fusion.md). */
int plan_names_in_program(const struct fusion_plan *plan, const void *text, size_t len, int il);

void plan_free(struct fusion_plan *plan);

#endif
