/* config.h — clshim's configuration: the knob table made into a struct.
 *
 * Values come from three places, later ones winning: the defaults in
 * common/knobs.h, the file $XDG_CONFIG_HOME/clshim/clshim.conf (else
 * ~/.config/clshim/clshim.conf; lines `CLSHIM_NAME=value`, `#` comments;
 * read only when it is a regular file of at most 1 MiB), and the
 * environment. An invalid value is reported once per application run,
 * naming the knob, what it accepts and (in the file) the line, and the
 * value before it stays; so is an unknown CLSHIM_ name, with the closest
 * knob; a file of many bad lines in one line, with the first. The
 * process-wide configuration is loaded once, on first use: in the shim, at
 * load time (interpose/entry.c's constructor).
 */
#ifndef CLSHIM_CONFIG_H
#define CLSHIM_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "common/knobs.h"

enum config_type { CONFIG_BOOL, CONFIG_LEVEL, CONFIG_SIZE, CONFIG_UINT, CONFIG_PATH, CONFIG_STRING };
enum config_source { CONFIG_FROM_DEFAULT, CONFIG_FROM_FILE, CONFIG_FROM_ENV };

#define CONFIG_CTYPE_BOOL int
#define CONFIG_CTYPE_LEVEL int
#define CONFIG_CTYPE_SIZE uint64_t
#define CONFIG_CTYPE_UINT uint64_t
#define CONFIG_CTYPE_PATH const char *
#define CONFIG_CTYPE_STRING const char *

enum config_knob {
#define CONFIG_ENUM(NAME, type, field, def, since, doc) CONFIG_KNOB_##NAME,
    CLSHIM_KNOBS(CONFIG_ENUM)
#undef CONFIG_ENUM
    CONFIG_KNOB_COUNT
};

struct clshim_config {
#define CONFIG_FIELD(NAME, type, field, def, since, doc) CONFIG_CTYPE_##type field;
    CLSHIM_KNOBS(CONFIG_FIELD)
#undef CONFIG_FIELD
    enum config_source source[CONFIG_KNOB_COUNT];
    /* Where an invalid value was ignored: 0 nowhere, -1 the environment,
     * N line N of the config file (the environment's wins when both). */
    int invalid_line[CONFIG_KNOB_COUNT];
    char *strings; /* owns the text of PATH/STRING values */
    /* CLSHIM_CI_CONTEXT resolved (config_load): 1 when this job may not
     * write what others trust, and why, for the one line that says so. */
    int ci_untrusted;
    char ci_why[160];
};

/* The process-wide configuration, loaded on first call from the environment
 * and the config file. Never NULL; valid until exit; thread-safe. */
const struct clshim_config *config_get(void);

/* Loads a configuration from explicit inputs (for tests and the tool):
 * `env` is a NULL-terminated "NAME=value" array (may be NULL), `conf_path`
 * a config file (NULL or missing file: none; one that is not a regular file
 * of at most 1 MiB, or cannot be read: none, reported). Invalid values are
 * reported through `report` (may be NULL; more than one bad line of the
 * file as one summary) and replaced by the default. Returns the number of
 * invalid values. Release with config_free(). */
int config_load(struct clshim_config *cfg, char *const *env, const char *conf_path,
                void (*report)(const char *message));
void config_free(struct clshim_config *cfg);

/* The config file path that config_get() reads, in buf. Returns buf, or
 * NULL when no home directory is known. */
const char *config_file_path(char *buf, size_t len);

/* Parses one value of a knob's type. Returns 0 on success, -1 when the text
 * is not a valid value (out is then untouched). Every text is a valid
 * PATH or STRING; *out_num is then left alone. */
int config_parse(enum config_type type, const char *text, uint64_t *out_num);

/* What a knob of this type accepts, for messages ("0 or 1", ...). */
const char *config_accepts(enum config_type type);

/* Copies a URL into buf with its credentials replaced by "***": the
 * password of its user part (user:password@, between ':' and the last '@'
 * before the query), a user part without ':' in the host's place (a token
 * as the user: TOKEN@host), every query value but unix://'s db
 * (?token=***), and a fragment. What logs and `clshim config` show of
 * CLSHIM_REMOTE and CLSHIM_REMOTE_ENDPOINT. */
void config_redact_url(const char *url, char *buf, size_t len);

/* A knob's value in effect as `clshim config` prints it (the credentials
 * of CLSHIM_REMOTE and CLSHIM_REMOTE_ENDPOINT hidden). */
void config_format_value(const struct clshim_config *cfg, int knob, char *buf, size_t len);

/* `clshim config`: every knob, its effective value and where it came from. */
void config_print(FILE *out, const struct clshim_config *cfg);

/* docs/config.md, generated from the table. */
void config_print_docs(FILE *out);

/* Resolves the cache directory: CLSHIM_CACHE_DIR, else $XDG_CACHE_HOME/clshim,
 * else $HOME/.cache/clshim. Returns 0, or -1 when none can be formed. */
int config_cache_dir(const struct clshim_config *cfg, char *buf, size_t len);

#endif
