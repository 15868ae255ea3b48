# clshim — plain Makefile. `make` builds everything into $(BUILD); `make check`
# installs missing Debian packages (as root), builds and runs every test.
# Sources are found per directory, so a new module file needs no edit here.

BUILD       ?= build
PREFIX      ?= /usr/local
CC          ?= cc
CXX         ?= c++
LLVM_CONFIG ?= llvm-config-15
OPT         ?= -O2
SAN         ?=
VERSION     := 0.1.0

ifeq ($(origin CC),default)
CC := cc
endif

WARN     := -Wall -Wextra -Werror
CFLAGS_C := -std=c11 $(OPT) -g $(WARN) -fPIC -fvisibility=hidden -D_GNU_SOURCE \
            -DCLSHIM_VERSION='"$(VERSION)"' -I. -Iinclude $(EXTRA_CFLAGS)
LDFLAGS_C := $(EXTRA_LDFLAGS)
ifneq ($(SAN),)
CFLAGS_C  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined -DCLSHIM_ASSERT_FATAL
LDFLAGS_C += -fsanitize=$(SAN)
endif

CORE_LIBS := -llmdb -lzstd -lhiredis -lsodium -lpthread -ldl

CORE_SRC   := $(sort $(wildcard common/*.c cache/*.c compiler/*.c program/*.c fusion/*.c))
SHIM_SRC   := $(sort $(wildcard interpose/*.c))
LLVM_C     := $(sort $(wildcard compiler/llvm/*.c))
LLVM_CXX   := $(sort $(wildcard compiler/llvm/*.cpp))
TOOL_SRC   := $(sort $(wildcard tools/*.c))
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))
PROG_SRC   := $(sort $(wildcard tests/integration/progs/*.c))
BENCH_SRC  := $(sort $(wildcard bench/*.c))
EX_SRC     := $(sort $(wildcard examples/*.c))
REL_SRC    := $(sort $(wildcard tests/reliability/progs/*.c))
FUZZ_SRC   := $(sort $(wildcard tests/fuzz/fuzz_*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ := $(call obj,$(CORE_SRC))
SHIM_OBJ := $(call obj,$(SHIM_SRC))
# The module runs its isolated steps as child processes with common/spawn.c.
LLVM_OBJ := $(call obj,$(LLVM_C)) $(patsubst %.cpp,$(BUILD)/obj/%.o,$(LLVM_CXX)) $(BUILD)/obj/common/spawn.o
TOOL_OBJ := $(call obj,$(TOOL_SRC))

LIB      := $(BUILD)/libclshim.so
LLVMLIB  := $(BUILD)/libclshim-llvm.so
CORE_A   := $(BUILD)/libclshim-core.a
TOOL     := $(BUILD)/clshim-tool
WRAPPER  := $(BUILD)/clshim
UNITS    := $(patsubst tests/unit/%.c,$(BUILD)/tests/unit/%,$(UNIT_SRC))
PROGS    := $(patsubst tests/integration/progs/%.c,$(BUILD)/tests/progs/%,$(PROG_SRC))
BENCHES  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRC))
EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(EX_SRC))
# Loader mode's libOpenCL.so.1 and the real ICD loader it forwards to.
LOADER_DIR  := $(BUILD)/loader
LOADER_LIB  := $(LOADER_DIR)/libOpenCL.so.1
REAL_OPENCL ?= $(shell /sbin/ldconfig -p 2>/dev/null | awk '$$1 == "libOpenCL.so.1" && /x86-64/ { print $$NF; exit }')
RELPROGS := $(patsubst tests/reliability/progs/%.c,$(BUILD)/tests/rel/%,$(REL_SRC))
# libFuzzer targets live in their own build ($(FUZZ_BUILD)): every object is
# compiled with clang-15 and -fsanitize=fuzzer-no-link,address,undefined.
# clang-15's libFuzzer runtime comes with libclang-common-15-dev (a clang-15
# dependency).
FUZZ_BUILD ?= $(BUILD)-fuzz
FUZZ_CC    ?= clang-15
FUZZ_CXX   ?= clang++-15
FUZZERS  := $(patsubst tests/fuzz/%.c,$(BUILD)/fuzz/%,$(FUZZ_SRC))

.PHONY: all deps check check-sanitize check-long check-fresh compat bench demo install clean docs fuzz fuzz-targets
all: $(LIB) $(LLVMLIB) $(TOOL) $(WRAPPER) $(UNITS) $(PROGS) $(BENCHES) $(EXAMPLES) $(RELPROGS) $(LOADER_LIB)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -MMD -MP -c $< -o $@

# The LLVM side: C against the LLVM C API, one small C++ file for the translator.
$(BUILD)/obj/compiler/llvm/%.o: compiler/llvm/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) $$($(LLVM_CONFIG) --cflags | sed 's/-std=[^ ]*//') -MMD -MP -c $< -o $@
$(BUILD)/obj/compiler/llvm/%.o: compiler/llvm/%.cpp
	@mkdir -p $(dir $@)
	$(CXX) -std=c++17 $(OPT) -g $(WARN) -Wno-unused-parameter -fPIC -fvisibility=hidden -I. \
	  $$($(LLVM_CONFIG) --cxxflags | sed 's/-std=[^ ]*//; s/-fno-exceptions//') -I/usr/include/LLVMSPIRVLib \
	  -MMD -MP -c $< -o $@

$(CORE_A): $(CORE_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# DT_NEEDED on libOpenCL.so.1 is deliberate: apps that load OpenCL with
# RTLD_LOCAL (PyOpenCL) leave it out of global scope, and dlsym(RTLD_NEXT)
# then finds nothing unless the shim itself depends on it.
# -z nodelete (both libraries): an application's dlclose never unmaps
# clshim while its worker threads and exit handlers may still run (under
# TSan, whose atexit ignores the library, a dlopen_app run crashed at exit).
$(LIB): $(SHIM_OBJ) $(CORE_OBJ) interpose/exports.map
	$(CC) -shared -o $@ $(SHIM_OBJ) $(CORE_OBJ) $(LDFLAGS_C) -Wl,--version-script=interpose/exports.map \
	  -Wl,-z,now -Wl,-z,nodelete -Wl,--no-as-needed -lOpenCL -Wl,--as-needed $(CORE_LIBS)

# Loader mode (docs/modes.md): the same objects as libclshim.so plus generated
# forwarders for every other function of the real ICD loader, as a
# libOpenCL.so.1 that `clshim run --mode=loader` puts first on
# LD_LIBRARY_PATH. No DT_NEEDED on libOpenCL: it dlopens the real loader by
# the absolute path found here (REAL_OPENCL, from ld.so.cache).
# (LOADER_DIR, LOADER_LIB, REAL_OPENCL are set with the other outputs above.)

$(LOADER_DIR)/forward.c: scripts/gen-loader-forwarders.sh $(SHIM_OBJ)
	scripts/gen-loader-forwarders.sh "$(REAL_OPENCL)" $(LOADER_DIR) /usr/include $(SHIM_OBJ)
$(LOADER_DIR)/libOpenCL.map: $(LOADER_DIR)/forward.c
$(LOADER_DIR)/forward.o: $(LOADER_DIR)/forward.c interpose/real.h
	$(CC) $(CFLAGS_C) -c $< -o $@

$(LOADER_LIB): $(SHIM_OBJ) $(CORE_OBJ) $(LOADER_DIR)/forward.o $(LOADER_DIR)/libOpenCL.map $(LLVMLIB)
	$(CC) -shared -o $@ -Wl,-soname,libOpenCL.so.1 $(SHIM_OBJ) $(CORE_OBJ) $(LOADER_DIR)/forward.o \
	  $(LDFLAGS_C) -Wl,--version-script=$(LOADER_DIR)/libOpenCL.map -Wl,-z,now -Wl,-z,nodelete $(CORE_LIBS)
	ln -sf libOpenCL.so.1 $(LOADER_DIR)/libOpenCL.so
	ln -sf ../libclshim-llvm.so $(LOADER_DIR)/libclshim-llvm.so

# The dlopen-only test program must not link libOpenCL (it would let
# LD_PRELOAD reach it, which is what it exists to rule out).
$(BUILD)/tests/progs/dlopen_app: tests/integration/progs/dlopen_app.c tests/integration/progs/common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(LDFLAGS_C) -ldl

$(LLVMLIB): $(LLVM_OBJ) compiler/llvm/exports.map
	$(CXX) -shared -o $@ $(LLVM_OBJ) $(LDFLAGS_C) -Wl,--version-script=compiler/llvm/exports.map \
	  -L$$($(LLVM_CONFIG) --libdir) -lLLVMSPIRVLib -lLLVM-15 -lpthread

# The capture helper builds under cache/sandbox.h: the tool carries
# interpose/files.c and exports its names, so the driver's compiler binds to them.
$(TOOL): $(TOOL_OBJ) $(BUILD)/obj/interpose/files.o $(CORE_A) interpose/files.list
	$(CC) -o $@ $(TOOL_OBJ) $(BUILD)/obj/interpose/files.o $(CORE_A) $(LDFLAGS_C) \
	  -Wl,--dynamic-list=interpose/files.list -lOpenCL $(CORE_LIBS)

$(WRAPPER): scripts/clshim
	@mkdir -p $(dir $@)
	sed 's|@VERSION@|$(VERSION)|' $< > $@ && chmod +x $@

$(BUILD)/tests/unit/%: tests/unit/%.c $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -Wno-unused-parameter -o $@ $< $(CORE_A) $(LDFLAGS_C) -lcmocka -lOpenCL $(CORE_LIBS)

# test_cache_cmd includes tools/cache_cmd.c, so it links what that file uses.
TEST_CACHE_CMD_OBJ := $(call obj,tools/archive_sign.c tools/capture_wait.c tools/help.c tools/warm_cmd.c tools/capture_helper.c)
$(BUILD)/tests/unit/test_cache_cmd: tests/unit/test_cache_cmd.c $(CORE_A) $(TEST_CACHE_CMD_OBJ)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -Wno-unused-parameter -o $@ $< $(TEST_CACHE_CMD_OBJ) $(CORE_A) $(LDFLAGS_C) \
	  -lcmocka -lOpenCL $(CORE_LIBS)

$(BUILD)/tests/progs/%: tests/integration/progs/%.c tests/integration/progs/common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(LDFLAGS_C) -lOpenCL -lpthread -ldl

$(BUILD)/bench/%: bench/%.c $(wildcard bench/*.h) $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(CORE_A) $(LDFLAGS_C) -lOpenCL $(CORE_LIBS) -lm

# Reliability helpers (crash-test writers, entry forgers) link the core archive.
$(BUILD)/tests/rel/%: tests/reliability/progs/%.c $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(CORE_A) $(LDFLAGS_C) -lOpenCL $(CORE_LIBS)

# The translator target loads libclshim-llvm.so: the fuzz build makes its own
# with clang++, so one ASan runtime (clang's) is in the process.
fuzz:
	$(MAKE) BUILD=$(FUZZ_BUILD) CC=$(FUZZ_CC) CXX=$(FUZZ_CXX) SAN=address,undefined OPT=-O1 \
	  EXTRA_CFLAGS=-fsanitize=fuzzer-no-link fuzz-targets
# The translator's steps run in clshim-tool llvm-child beside the module.
fuzz-targets: $(FUZZERS) $(LLVMLIB) $(TOOL)
$(BUILD)/fuzz/%: tests/fuzz/%.c tests/fuzz/fuzz.h $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -fsanitize=fuzzer -o $@ $< $(CORE_A) $(LDFLAGS_C) -lOpenCL $(CORE_LIBS)

$(BUILD)/examples/%: examples/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(LDFLAGS_C) -lOpenCL

check: deps
	$(MAKE) all fuzz
	tests/run-all.sh $(BUILD)

check-sanitize: deps
	$(MAKE) BUILD=build-asan SAN=address,undefined OPT=-O1 all
	CLSHIM_SANITIZED=address tests/run-all.sh build-asan
	$(MAKE) BUILD=build-tsan SAN=thread OPT=-O1 all
	CLSHIM_SANITIZED=thread tests/run-all.sh build-tsan --threaded

check-long: deps
	$(MAKE) all fuzz
	CLSHIM_LONG=1 tests/run-all.sh $(BUILD)
	$(MAKE) bench QUICK=1
	scripts/check-fresh.sh $(BUILD)

# make check from a fresh clone of HEAD in a clean Debian root (root only):
# every install step must be in the project's own files.
check-fresh:
	scripts/check-fresh.sh $(BUILD)

compat: deps
	$(MAKE) all
	tests/compat/run.sh $(BUILD)

# make bench: the suite, its CSV, report and plots (docs/benchmarks.md);
# make bench QUICK=1: a check in under 2 minutes (report in BUILD only).
bench: deps
	scripts/install-deps.sh python3-matplotlib
	$(MAKE) all
	bench/run.sh $(BUILD) $(if $(QUICK),--quick)

# The demo needs nothing from the Python package index (moto is the S3
# test's): the Debian packages only.
demo:
	@scripts/install-deps.sh --no-pypi
	$(MAKE) all
	examples/demo.sh $(BUILD)

# The generated docs: the knob table's and the command table's.
docs: $(TOOL)
	$(TOOL) config --docs > docs/config.md
	$(TOOL) help --docs > docs/commands.md
	$(TOOL) help --man > docs/clshim.1

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/clshim $(DESTDIR)$(PREFIX)/include/CL \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/man/man1 \
	  $(DESTDIR)$(PREFIX)/share/doc/clshim/docs/img
	install -m 755 $(LIB) $(LLVMLIB) $(TOOL) $(DESTDIR)$(PREFIX)/lib/clshim/
	install -d $(DESTDIR)$(PREFIX)/lib/clshim/loader
	install -m 755 $(LOADER_LIB) $(DESTDIR)$(PREFIX)/lib/clshim/loader/
	ln -sf libOpenCL.so.1 $(DESTDIR)$(PREFIX)/lib/clshim/loader/libOpenCL.so
	ln -sf ../libclshim-llvm.so $(DESTDIR)$(PREFIX)/lib/clshim/loader/libclshim-llvm.so
	sed 's|@VERSION@|$(VERSION)|; s|^CLSHIM_LIBDIR_DEFAULT=.*|CLSHIM_LIBDIR_DEFAULT="$(PREFIX)/lib/clshim"|' \
	  scripts/clshim > $(DESTDIR)$(PREFIX)/bin/clshim && chmod 755 $(DESTDIR)$(PREFIX)/bin/clshim
	install -m 644 include/CL/clshim_ext.h $(DESTDIR)$(PREFIX)/include/CL/
	sed 's|@PREFIX@|$(PREFIX)|; s|@VERSION@|$(VERSION)|' scripts/clshim.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/clshim.pc
	install -m 644 docs/clshim.1 $(DESTDIR)$(PREFIX)/share/man/man1/
	install -m 644 README.md $(DESTDIR)$(PREFIX)/share/doc/clshim/
	install -m 644 docs/*.md $(DESTDIR)$(PREFIX)/share/doc/clshim/docs/
	install -m 644 docs/img/*.png $(DESTDIR)$(PREFIX)/share/doc/clshim/docs/img/

clean:
	rm -rf build build-asan build-tsan build-*

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
