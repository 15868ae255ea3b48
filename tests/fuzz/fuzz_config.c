/* fuzz_config — configuration values and files (common/config.h).
 *
 * Input: a config file's text, then optionally a NUL byte and environment
 * entries ("CLSHIM_NAME=value") separated by newlines. Properties:
 * config_load never fails to produce a usable configuration (every PATH and
 * STRING field points at a NUL-terminated string, every invalid value
 * reported: one line each, a config file's several bad lines one summary
 * line), every report is one line, and
 * config_parse accepts for BOOL only 0/1 and for LEVEL only 0..3. */
#include <unistd.h>

#include "common/config.h"
#include "tests/fuzz/fuzz.h"

static char conf_path[64];
static int reports;

static void report(const char *msg)
{
    FUZZ_ASSERT(msg && *msg);
    FUZZ_ASSERT(strchr(msg, '\n') == NULL); /* one log line per condition */
    FUZZ_ASSERT(strlen(msg) < 1024);
    reports++;
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    snprintf(conf_path, sizeof conf_path, "/tmp/clshim-fuzz-config.%d.conf", (int)getpid());
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nul = memchr(data, 0, size);
    size_t conf_len = nul ? (size_t)(nul - data) : size;
    FILE *f = fopen(conf_path, "wb");
    if (!f) abort();
    fwrite(data, 1, conf_len, f);
    fclose(f);

    /* Environment entries after the NUL. */
    char *envtext = nul ? fuzz_strdup(nul + 1, size - conf_len - 1) : fuzz_strdup((const uint8_t *)"", 0);
    char *env[65];
    size_t nenv = 0;
    for (char *save = NULL, *tok = strtok_r(envtext, "\n", &save); tok && nenv < 64;
         tok = strtok_r(NULL, "\n", &save))
        env[nenv++] = tok;
    env[nenv] = NULL;

    struct clshim_config cfg;
    reports = 0;
    int invalid = config_load(&cfg, env, conf_path, report);
    FUZZ_ASSERT(invalid >= 0);
    /* Every invalid value or line is reported: one line each, except a
     * config file's bad lines, which share one summary line when several. */
    FUZZ_ASSERT(invalid == 0 ? reports == 0 : reports >= 1 && reports <= invalid);
    FUZZ_ASSERT(cfg.log_level >= 0 && cfg.log_level <= 3);
    FUZZ_ASSERT(cfg.disable == 0 || cfg.disable == 1);
    FUZZ_ASSERT(cfg.cache_dir && cfg.log_file && cfg.capture && cfg.fuse && cfg.clang && cfg.llvm_lib &&
                cfg.fusion_plan);
    (void)strlen(cfg.cache_dir);
    (void)strlen(cfg.capture);
    char dir[4096];
    (void)config_cache_dir(&cfg, dir, sizeof dir);
    FILE *null = fopen("/dev/null", "w");
    if (null) {
        config_print(null, &cfg);
        fclose(null);
    }
    config_free(&cfg);

    /* Each value type on the whole input as text. */
    char *text = fuzz_strdup(data, conf_len);
    uint64_t num;
    if (config_parse(CONFIG_BOOL, text, &num) == 0) FUZZ_ASSERT(num <= 1);
    if (config_parse(CONFIG_LEVEL, text, &num) == 0) FUZZ_ASSERT(num <= 3);
    (void)config_parse(CONFIG_SIZE, text, &num);
    (void)config_parse(CONFIG_UINT, text, &num);
    FUZZ_ASSERT(config_parse(CONFIG_PATH, text, &num) == 0);
    FUZZ_ASSERT(config_parse(CONFIG_STRING, text, &num) == 0);
    free(text);
    free(envtext);
    return 0;
}
