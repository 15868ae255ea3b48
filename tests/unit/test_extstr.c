/* test_extstr — extension strings with clshim's names added (common/extstr.h),
 * against a fake driver whose extension string and errors the test sets. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "common/extstr.h"

static const char *driver_ext = "cl_khr_a cl_khr_b";
static cl_int driver_error;
static cl_platform_id const PLAT = (cl_platform_id)0x2000;
static cl_device_id const DEV = (cl_device_id)0x1000;

static cl_int text(size_t size, void *value, size_t *ret)
{
    if (driver_error) return driver_error;
    size_t n = strlen(driver_ext) + 1;
    if (value && size < n) return CL_INVALID_VALUE;
    if (value) memcpy(value, driver_ext, n);
    if (ret) *ret = n;
    return CL_SUCCESS;
}

/* The driver's list with versions: cl_khr_a 1.0.0, cl_khr_b 2.1.0. */
static cl_int versions(size_t size, void *value, size_t *ret)
{
    if (driver_error) return driver_error;
    cl_name_version v[2] = {{CL_MAKE_VERSION(1, 0, 0), "cl_khr_a"}, {CL_MAKE_VERSION(2, 1, 0), "cl_khr_b"}};
    if (value && size < sizeof v) return CL_INVALID_VALUE;
    if (value) memcpy(value, v, sizeof v);
    if (ret) *ret = sizeof v;
    return CL_SUCCESS;
}

static cl_int f_platform_info(cl_platform_id p, cl_platform_info param, size_t size, void *value, size_t *ret)
{
    assert_ptr_equal(p, PLAT);
    if (param == CL_PLATFORM_EXTENSIONS_WITH_VERSION) return versions(size, value, ret);
    assert_int_equal(param, CL_PLATFORM_EXTENSIONS);
    return text(size, value, ret);
}

static cl_int f_device_info(cl_device_id d, cl_device_info param, size_t size, void *value, size_t *ret)
{
    assert_ptr_equal(d, DEV);
    if (param == CL_DEVICE_EXTENSIONS_WITH_VERSION) return versions(size, value, ret);
    assert_int_equal(param, CL_DEVICE_EXTENSIONS);
    return text(size, value, ret);
}

static const struct cl_api fake = {.clGetPlatformInfo = f_platform_info, .clGetDeviceInfo = f_device_info};

/* the size counts the combined string and its NUL; the string is the
 * driver's, a space, the names; a buffer one byte short is refused */
static void names_appended_sizes_kept(void **state)
{
    (void)state;
    const char *add[] = {"cl_x_one", NULL, "cl_x_two"};
    static const char want[] = "cl_khr_a cl_khr_b cl_x_one cl_x_two";
    size_t n = 0;
    assert_int_equal(extstr_platform(&fake, PLAT, CL_PLATFORM_EXTENSIONS, add, 3, 0, NULL, &n), CL_SUCCESS);
    assert_int_equal(n, sizeof want);
    char buf[64];
    memset(buf, 'x', sizeof buf);
    size_t n2 = 0;
    assert_int_equal(extstr_device(&fake, DEV, CL_DEVICE_EXTENSIONS, add, 3, n, buf, &n2), CL_SUCCESS);
    assert_string_equal(buf, want);
    assert_int_equal(n2, sizeof want);
    assert_int_equal(buf[n], 'x'); /* nothing past the answer */
    n2 = 77;
    assert_int_equal(extstr_device(&fake, DEV, CL_DEVICE_EXTENSIONS, add, 3, n - 1, buf, &n2), CL_INVALID_VALUE);
    assert_int_equal(n2, 77); /* left alone on the error, as the fake driver does */
}

/* a name the driver lists already is not added twice (a whole word only);
 * an empty driver string gets no leading space */
static void listed_names_not_repeated(void **state)
{
    (void)state;
    const char *add[] = {"cl_khr_b", "cl_khr"};
    char buf[64];
    assert_int_equal(extstr_device(&fake, DEV, CL_DEVICE_EXTENSIONS, add, 2, sizeof buf, buf, NULL), CL_SUCCESS);
    assert_string_equal(buf, "cl_khr_a cl_khr_b cl_khr");
    driver_ext = "";
    assert_int_equal(extstr_platform(&fake, PLAT, CL_PLATFORM_EXTENSIONS, add, 1, sizeof buf, buf, NULL), CL_SUCCESS);
    assert_string_equal(buf, "cl_khr_b");
    driver_ext = "cl_khr_a cl_khr_b";
}

/* the list with versions gets an entry (1.0.0) per name it lacks, sizes
 * counted the same way */
static void versioned_list_agrees(void **state)
{
    (void)state;
    const char *add[] = {"cl_khr_b", "cl_x_one"};
    size_t n = 0;
    assert_int_equal(extstr_device(&fake, DEV, CL_DEVICE_EXTENSIONS_WITH_VERSION, add, 2, 0, NULL, &n), CL_SUCCESS);
    assert_int_equal(n, 3 * sizeof(cl_name_version));
    cl_name_version v[4];
    memset(v, 0, sizeof v);
    assert_int_equal(extstr_platform(&fake, PLAT, CL_PLATFORM_EXTENSIONS_WITH_VERSION, add, 2, n, v, NULL),
                     CL_SUCCESS);
    assert_string_equal(v[1].name, "cl_khr_b");
    assert_int_equal(v[1].version, CL_MAKE_VERSION(2, 1, 0)); /* the driver's entry, untouched */
    assert_string_equal(v[2].name, "cl_x_one");
    assert_int_equal(v[2].version, CL_MAKE_VERSION(1, 0, 0));
    assert_string_equal(v[3].name, ""); /* nothing past the answer */
    assert_int_equal(extstr_device(&fake, DEV, CL_DEVICE_EXTENSIONS_WITH_VERSION, add, 2, n - 1, v, NULL),
                     CL_INVALID_VALUE);
}

/* the driver's error comes back unchanged */
static void driver_errors_unchanged(void **state)
{
    (void)state;
    const char *add[] = {"cl_x_one"};
    char buf[64];
    driver_error = CL_INVALID_DEVICE;
    assert_int_equal(extstr_device(&fake, DEV, CL_DEVICE_EXTENSIONS, add, 1, sizeof buf, buf, NULL), CL_INVALID_DEVICE);
    driver_error = 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(names_appended_sizes_kept),
        cmocka_unit_test(listed_names_not_repeated),
        cmocka_unit_test(versioned_list_agrees),
        cmocka_unit_test(driver_errors_unchanged),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
