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
            -DCLSHIM_VERSION='"$(VERSION)"' -I. $(EXTRA_CFLAGS)
LDFLAGS_C := $(EXTRA_LDFLAGS)
ifneq ($(SAN),)
CFLAGS_C  += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS_C += -fsanitize=$(SAN)
endif

CORE_LIBS := -llmdb -lzstd -lpthread -ldl

CORE_SRC   := $(sort $(wildcard common/*.c cache/*.c fusion/*.c))
SHIM_SRC   := $(sort $(wildcard interpose/*.c))
LLVM_C     := $(sort $(wildcard fusion/llvm/*.c))
LLVM_CXX   := $(sort $(wildcard fusion/llvm/*.cpp))
TOOL_SRC   := $(sort $(wildcard tools/*.c))
UNIT_SRC   := $(sort $(wildcard tests/unit/test_*.c))
PROG_SRC   := $(sort $(wildcard tests/integration/progs/*.c))
BENCH_SRC  := $(sort $(wildcard bench/*.c))
EX_SRC     := $(sort $(wildcard examples/*.c))

obj = $(patsubst %.c,$(BUILD)/obj/%.o,$(1))
CORE_OBJ := $(call obj,$(CORE_SRC))
SHIM_OBJ := $(call obj,$(SHIM_SRC))
LLVM_OBJ := $(call obj,$(LLVM_C)) $(patsubst %.cpp,$(BUILD)/obj/%.o,$(LLVM_CXX))
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

.PHONY: all deps check check-sanitize check-long compat bench demo install clean docs
all: $(LIB) $(LLVMLIB) $(TOOL) $(WRAPPER) $(UNITS) $(PROGS) $(BENCHES) $(EXAMPLES)

deps:
	@scripts/install-deps.sh

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -MMD -MP -c $< -o $@

# The LLVM side: C against the LLVM C API, one small C++ file for the translator.
$(BUILD)/obj/fusion/llvm/%.o: fusion/llvm/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) $$($(LLVM_CONFIG) --cflags | sed 's/-std=[^ ]*//') -MMD -MP -c $< -o $@
$(BUILD)/obj/fusion/llvm/%.o: fusion/llvm/%.cpp
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
$(LIB): $(SHIM_OBJ) $(CORE_OBJ) interpose/exports.map
	$(CC) -shared -o $@ $(SHIM_OBJ) $(CORE_OBJ) $(LDFLAGS_C) -Wl,--version-script=interpose/exports.map \
	  -Wl,-z,now -Wl,--no-as-needed -lOpenCL -Wl,--as-needed $(CORE_LIBS)

$(LLVMLIB): $(LLVM_OBJ) fusion/llvm/exports.map
	$(CXX) -shared -o $@ $(LLVM_OBJ) $(LDFLAGS_C) -Wl,--version-script=fusion/llvm/exports.map \
	  -L$$($(LLVM_CONFIG) --libdir) -lLLVMSPIRVLib -lLLVM-15 -lpthread

$(TOOL): $(TOOL_OBJ) $(CORE_A)
	$(CC) -o $@ $(TOOL_OBJ) $(CORE_A) $(LDFLAGS_C) -lOpenCL $(CORE_LIBS)

$(WRAPPER): scripts/clshim
	@mkdir -p $(dir $@)
	sed 's|@VERSION@|$(VERSION)|' $< > $@ && chmod +x $@

$(BUILD)/tests/unit/%: tests/unit/%.c $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -Wno-unused-parameter -o $@ $< $(CORE_A) $(LDFLAGS_C) -lcmocka -lOpenCL $(CORE_LIBS)

$(BUILD)/tests/progs/%: tests/integration/progs/%.c tests/integration/progs/common.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(LDFLAGS_C) -lOpenCL -lpthread -ldl

$(BUILD)/bench/%: bench/%.c $(CORE_A)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(CORE_A) $(LDFLAGS_C) -lOpenCL $(CORE_LIBS) -lm

$(BUILD)/examples/%: examples/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS_C) -o $@ $< $(LDFLAGS_C) -lOpenCL

check: deps
	$(MAKE) all
	tests/run-all.sh $(BUILD)

check-sanitize: deps
	$(MAKE) BUILD=build-asan SAN=address,undefined OPT=-O1 all
	CLSHIM_SANITIZED=address tests/run-all.sh build-asan
	$(MAKE) BUILD=build-tsan SAN=thread OPT=-O1 all
	CLSHIM_SANITIZED=thread tests/run-all.sh build-tsan --threaded

check-long: deps
	$(MAKE) all
	CLSHIM_LONG=1 tests/run-all.sh $(BUILD)

compat: deps
	$(MAKE) all
	tests/compat/run.sh $(BUILD)

bench: deps
	$(MAKE) all
	bench/run.sh $(BUILD)

demo: deps
	$(MAKE) all
	examples/demo.sh $(BUILD)

docs: $(TOOL)
	$(TOOL) config --docs > docs/config.md

install: all
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/clshim $(DESTDIR)$(PREFIX)/include/CL \
	  $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(LIB) $(LLVMLIB) $(TOOL) $(DESTDIR)$(PREFIX)/lib/clshim/
	sed 's|@VERSION@|$(VERSION)|; s|^CLSHIM_LIBDIR_DEFAULT=.*|CLSHIM_LIBDIR_DEFAULT="$(PREFIX)/lib/clshim"|' \
	  scripts/clshim > $(DESTDIR)$(PREFIX)/bin/clshim && chmod 755 $(DESTDIR)$(PREFIX)/bin/clshim
	install -m 644 include/CL/clshim_ext.h $(DESTDIR)$(PREFIX)/include/CL/
	sed 's|@PREFIX@|$(PREFIX)|; s|@VERSION@|$(VERSION)|' scripts/clshim.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/clshim.pc
	install -m 644 docs/clshim.1 $(DESTDIR)$(PREFIX)/share/man/man1/

clean:
	rm -rf build build-asan build-tsan build-*

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
