/* extstr.c — extension lists with clshim's own names added (extstr.h). */
#include "common/extstr.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"

/* One driver query: the platform's or the device's. */
struct source {
    const struct cl_api *real;
    int is_platform;
    cl_platform_id platform;
    cl_device_id device;
    cl_uint param;
};

int extstr_param(cl_uint param)
{
    return param == CL_PLATFORM_EXTENSIONS || param == CL_PLATFORM_EXTENSIONS_WITH_VERSION ||
           param == CL_DEVICE_EXTENSIONS || param == CL_DEVICE_EXTENSIONS_WITH_VERSION;
}

static int with_version(cl_uint param)
{
    return param == CL_PLATFORM_EXTENSIONS_WITH_VERSION || param == CL_DEVICE_EXTENSIONS_WITH_VERSION;
}

static cl_int query(const struct source *s, size_t size, void *value, size_t *size_ret)
{
    if (s->is_platform) return s->real->clGetPlatformInfo(s->platform, s->param, size, value, size_ret);
    return s->real->clGetDeviceInfo(s->device, s->param, size, value, size_ret);
}

/* Whether the space-separated list has `name` as a whole word. */
static int listed(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == ' ') && (!p[n] || p[n] == ' ')) return 1;
    return 0;
}

static int listed_versioned(const cl_name_version *v, size_t count, const char *name)
{
    for (size_t i = 0; i < count; i++)
        if (!strncmp(v[i].name, name, sizeof v[i].name)) return 1;
    return 0;
}

/* Appends the names to the driver's answer in `buf` (n bytes of it, room
 * for every name); returns the answer's new size. */
static size_t append(int versions, char *buf, size_t n, const char *const *add, size_t nadd)
{
    if (versions) {
        cl_name_version *v = (cl_name_version *)buf;
        size_t count = n / sizeof *v;
        for (size_t i = 0; i < nadd; i++) {
            if (!add[i] || listed_versioned(v, count, add[i])) continue;
            memset(&v[count], 0, sizeof v[count]);
            v[count].version = CL_MAKE_VERSION(1, 0, 0);
            assert(strlen(add[i]) < sizeof v[count].name);
            strncpy(v[count].name, add[i], sizeof v[count].name - 1);
            count++;
        }
        return count * sizeof *v;
    }
    buf[n] = '\0'; /* the buffer has room for one more NUL */
    size_t len = strlen(buf);
    for (size_t i = 0; i < nadd; i++) {
        if (!add[i] || listed(buf, add[i])) continue;
        if (len && buf[len - 1] != ' ') buf[len++] = ' ';
        size_t k = strlen(add[i]);
        memcpy(buf + len, add[i], k + 1);
        len += k;
    }
    return len + 1;
}

static cl_int answer(const struct source *s, const char *const *add, size_t nadd, size_t size, void *value,
                     size_t *size_ret)
{
    int versions = with_version(s->param);
    size_t n = 0, extra = 1;
    cl_int rc = query(s, 0, NULL, &n);
    if (rc != CL_SUCCESS) return rc;
    for (size_t i = 0; i < nadd; i++)
        extra += !add[i] ? 0 : versions ? sizeof(cl_name_version) : strlen(add[i]) + 1;
    char *buf = calloc(1, n + extra);
    if (!buf) {
        LOG_ONCE(LOG_WARN, "out of memory: an extensions query answered without clshim's extensions");
        return query(s, size, value, size_ret);
    }
    rc = query(s, n, buf, NULL);
    if (rc == CL_SUCCESS) {
        size_t total = append(versions, buf, n, add, nadd);
        assert(total <= n + extra);
        if (value && size < total) {
            rc = CL_INVALID_VALUE;
        } else {
            if (value) memcpy(value, buf, total);
            if (size_ret) *size_ret = total;
        }
    }
    free(buf);
    return rc;
}

cl_int extstr_platform(const struct cl_api *real, cl_platform_id platform, cl_platform_info param,
                       const char *const *add, size_t nadd, size_t size, void *value, size_t *size_ret)
{
    return answer(&(struct source){real, 1, platform, NULL, param}, add, nadd, size, value, size_ret);
}

cl_int extstr_device(const struct cl_api *real, cl_device_id device, cl_device_info param, const char *const *add,
                     size_t nadd, size_t size, void *value, size_t *size_ret)
{
    return answer(&(struct source){real, 0, NULL, device, param}, add, nadd, size, value, size_ret);
}
