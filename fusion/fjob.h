/* fjob.h — automatic fusion's fused programs made off the application's
 * thread, by the capture helper (program/capture_proc.h).
 *
 * Under CLSHIM_FUSION=auto, a learned sequence whose fused program the
 * cache lacks is not made at its first fused occurrence on the
 * application's thread (clang, the fuser, the driver's build: about 90 ms
 * of a 135 ms run on PoCL). The application hands a job to the capture
 * helper instead (flaunch.c memo_by_helper, program/origin.h
 * pc_derived_by_helper) and runs the sequence's occurrences unfused until
 * the helper has stored the program under the key a build in the
 * application would have used; the next occurrence after its answer loads
 * it from the in-process tier and is fused. The helper makes it when it
 * captures (the application idle or gone: tools/capture_helper.c), first
 * among its requests. The application never waits for it: a run that
 * ends first ran unfused, and the next run hits.
 *
 * The job holds all make() needs (flaunch.c): per held kernel its
 * program's input as the application built it (source or IL, options,
 * specialization constants), its name and ND-range, the argument classes,
 * the flags and the key material; and, for the first launch, each
 * argument's kind and size (a buffer's CL_MEM_SIZE, a value's bytes).
 * The helper's capture process (`clshim-tool capture-one`) makes the
 * fused program from it exactly as make() would in the application,
 * builds it, launches it once over zero-filled buffers of the
 * application's sizes with the application's scalar values, so that the
 * driver generates the code of that launch (PoCL does so at a kernel's
 * first enqueue: without it the application's first fused launch would
 * pay it), reads the binary and answers with the value
 * pc_build_derived() stores. A refusal of the analysis is recorded in the
 * cache under the device's identity, as the application records one
 * (pc_derived_refusal_put), so the application's next look finds why.
 * The launch runs in the capture process, under its CPU budget: a kernel
 * that would fault or loop on zeros harms nothing but that process.
 */
#ifndef CLSHIM_FUSION_FJOB_H
#define CLSHIM_FUSION_FJOB_H

#include <stddef.h>
#include <stdint.h>

enum fjob_arg_kind { FJOB_BUFFER = 1, FJOB_LOCAL, FJOB_VALUE };

struct fjob_arg {
    int kind;          /* enum fjob_arg_kind */
    size_t size;       /* a buffer's bytes (0: a NULL buffer), local memory's, a value's */
    const void *value; /* FJOB_VALUE: its bytes */
};

/* What the helper's process makes of a job. */
struct fjob_made {
    void *program;      /* OpenCL C (is_source) or SPIR bitcode */
    size_t program_size;
    int is_source;
    void *meta;         /* the metadata stored before the binary (program/origin.h) */
    size_t meta_size;
    char name[32];      /* the fused kernel */
    uint32_t dim;
    size_t gws[3], lws[3], off[3];
    uint32_t nparams;
    struct fjob_arg *params; /* the first launch's arguments, one per fused parameter */
    void *job;          /* the decoded job the pointers above point into */
};

/* Makes the fused program of a job (the parts of a capture request of kind
 * KEY_FUSION). 0 with *out filled; FJOB_REFUSED with why when the analysis
 * or the machine refuses it (the answer to the job, not a loss: a refusal
 * by the key is recorded for `identity` first, as the application would
 * record it); -1 with why when it could not be made (memory, a malformed
 * job). fjob_made_free() frees *out either way. */
#define FJOB_REFUSED (-2)
int fjob_make(const void *job, size_t len, const char *identity, const char *device, const char *options,
              struct fjob_made *out, char *why, size_t why_len);
/* The driver failed to build what fjob_make() made (CL_BUILD_PROGRAM_FAILURE):
 * recorded as the application records it, so no process makes it again on
 * that driver. */
void fjob_note_build_failed(const struct fjob_made *m, const char *identity, const char *device,
                            const char *options, int err);
void fjob_made_free(struct fjob_made *m);

#endif
