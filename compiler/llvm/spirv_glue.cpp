// spirv_glue.cpp — SPIR-V <-> SPIR bitcode through the
// SPIRV-LLVM-Translator, behind the extern "C" functions of glue.h.
//
// Untrusted bytes never reach the translator unchecked: the header (magic in
// either byte order, version 1.0-1.4, id bound, schema) and the instruction
// stream (every word count non-zero and inside the module) are walked first.
// That is not enough: Debian's libLLVMSPIRVLib is built with assertions, and
// a structurally sound but corrupted module (a flipped bit in an id) makes it
// abort() — about two thirds of bit-flipped modules did, in a measurement.
// So the translator itself runs in a forked child that sends its result back
// through a pipe; a crash, a hang (60 s by default) or runaway memory (the
// child's data limit, RLIMIT_DATA, is what it had plus
// CLSHIM_TRANSLATE_MAX_MEMORY) becomes CLSHIM_EINVAL with the child's last
// stderr line as the reason, and the application lives on. The child is a
// copy of the application and must not act as one: no stdout, no atexit
// handlers, no crash handlers (see child_main).
// Each translation owns its LLVMContext, with a diagnostic handler that
// records errors (LLVM's default handler would exit the process on one);
// every C++ exception is caught. The output is what `llvm-spirv -r` gives:
// spir64, OpenCL 1.2 builtin names.
#include "compiler/llvm/glue.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <llvm/Bitcode/BitcodeReader.h>
#include <llvm/Bitcode/BitcodeWriter.h>
#include <llvm/IR/DiagnosticInfo.h>
#include <llvm/IR/DiagnosticPrinter.h>
#include <llvm/IR/LLVMContext.h>
#include <llvm-c/Core.h>
#include <llvm/IR/Module.h>
#include <llvm/IR/Verifier.h>
#include <llvm/Support/ErrorHandling.h>
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include <cerrno>
#include <csignal>
#include <fcntl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "LLVMSPIRVLib.h"
#include "common/error.h"

// A sanitizer's death callback (libFuzzer's writes a crash file) is the
// application's too; present only in sanitized builds.
extern "C" void __sanitizer_set_death_callback(void (*callback)(void)) __attribute__((weak));

namespace {

const uint32_t kMagic = 0x07230203u;
const uint32_t kMaxBound = 0x400000u; // SPIR-V's universal limit on ids is 4,194,303

int fail(char *err, size_t err_len, int code, const std::string &why)
{
    if (err && err_len) snprintf(err, err_len, "%s", why.c_str());
    return code;
}

uint32_t bswap32(uint32_t w)
{
    return (w >> 24) | ((w >> 8) & 0xff00u) | ((w << 8) & 0xff0000u) | (w << 24);
}

// Copies the module into native-order words and checks its structure.
// Returns an empty string when it is sound, else the reason.
std::string check_module(const void *bytes, size_t size, std::vector<uint32_t> &words)
{
    if (!bytes || size < 20) return "not a SPIR-V module: shorter than its 5-word header";
    if (size % 4) return "not a SPIR-V module: size is not a multiple of 4";
    words.resize(size / 4);
    memcpy(words.data(), bytes, size);
    if (words[0] == bswap32(kMagic))
        for (uint32_t &w : words) w = bswap32(w);
    else if (words[0] != kMagic)
        return "not a SPIR-V module: wrong magic number";
    uint32_t v = words[1], major = (v >> 16) & 0xff, minor = (v >> 8) & 0xff;
    if ((v & 0xff0000ffu) || major != 1)
        return "SPIR-V header has an invalid version word";
    if (minor > 4)
        return "SPIR-V 1." + std::to_string(minor) + " is newer than the translator reads (1.4)";
    if (words[3] == 0 || words[3] > kMaxBound) return "SPIR-V header has an invalid id bound";
    if (words[4] != 0) return "SPIR-V header has a non-zero schema word";
    if (words.size() == 5) return "SPIR-V module has no instructions";
    const uint32_t kOpMemoryModel = 14, kOpEntryPoint = 15, kOpFunction = 54, kOpFunctionEnd = 56;
    bool memory_model = false, in_function = false;
    std::vector<uint32_t> entries, functions;
    for (size_t i = 5; i < words.size();) {
        uint32_t wc = words[i] >> 16, op = words[i] & 0xffff;
        if (wc == 0) return "SPIR-V instruction at word " + std::to_string(i) + " has word count 0";
        if (wc > words.size() - i)
            return "SPIR-V module is truncated: instruction at word " + std::to_string(i) +
                   " (opcode " + std::to_string(op) + ") needs " + std::to_string(wc) + " words, " +
                   std::to_string(words.size() - i) + " left";
        if (op == kOpMemoryModel) memory_model = true;
        if (op == kOpEntryPoint && wc >= 3) entries.push_back(words[i + 2]);
        if (op == kOpFunction && wc >= 3) functions.push_back(words[i + 2]);
        if (op == kOpFunction && in_function) return "SPIR-V function opens inside a function";
        if (op == kOpFunction) in_function = true;
        if (op == kOpFunctionEnd && !in_function) return "SPIR-V OpFunctionEnd outside a function";
        if (op == kOpFunctionEnd) in_function = false;
        i += wc;
    }
    if (!memory_model) return "SPIR-V module has no OpMemoryModel (truncated?)";
    if (in_function) return "SPIR-V module is truncated: its last function has no OpFunctionEnd";
    for (uint32_t e : entries)
        if (std::find(functions.begin(), functions.end(), e) == functions.end())
            return "SPIR-V entry point %" + std::to_string(e) + " has no function (truncated?)";
    return "";
}

// Records the first error diagnostic instead of letting LLVM exit.
void on_diagnostic(const llvm::DiagnosticInfo &di, void *ctx)
{
    auto *first = static_cast<std::string *>(ctx);
    if (di.getSeverity() != llvm::DS_Error || !first->empty()) return;
    llvm::raw_string_ostream os(*first);
    llvm::DiagnosticPrinterRawOStream printer(os);
    di.print(printer);
}

int copy_out(const char *data, size_t size, void **out, size_t *out_size, char *err, size_t err_len)
{
    void *p = malloc(size ? size : 1);
    if (!p) return fail(err, err_len, CLSHIM_ENOMEM, "out of memory");
    memcpy(p, data, size);
    *out = p;
    *out_size = size;
    return CLSHIM_OK;
}

std::string broken(llvm::Module &m)
{
    std::string why;
    llvm::raw_string_ostream os(why);
    if (!llvm::verifyModule(m, &os)) return "";
    os.flush();
    std::string line = why.substr(0, why.find('\n'));
    return line.empty() ? std::string("module fails verification") : line;
}

int to_bitcode(const std::vector<uint32_t> &words, const struct llvm_spec_const *consts,
               size_t num_consts, void **bitcode, size_t *bitcode_size, char *err, size_t err_len)
{
    SPIRV::TranslatorOpts opts;
    opts.enableAllExtensions();
    opts.setDesiredBIsRepresentation(SPIRV::BIsRepresentation::OpenCL12);
    opts.setGenKernelArgNameMDEnabled(true);
    for (size_t i = 0; i < num_consts; i++) {
        uint32_t sz = consts[i].size;
        if (sz != 1 && sz != 2 && sz != 4 && sz != 8)
            return fail(err, err_len, CLSHIM_EINVAL,
                        "specialization constant " + std::to_string(consts[i].id) +
                            " has size " + std::to_string(sz) + " (1, 2, 4 or 8 expected)");
        uint64_t v = consts[i].value;
        if (sz < 8) v &= (UINT64_C(1) << (8 * sz)) - 1;
        opts.setSpecConst(consts[i].id, v);
    }

    llvm::LLVMContext ctx;
    ctx.setOpaquePointers(false); // typed pointers: what the translator and PoCL 3.1 expect
    std::string diag;
    ctx.setDiagnosticHandlerCallBack(on_diagnostic, &diag);
    std::string in(reinterpret_cast<const char *>(words.data()), words.size() * 4);
    std::istringstream is(in);
    llvm::Module *raw = nullptr;
    std::string msg;
    bool ok = llvm::readSpirv(ctx, opts, is, raw, msg);
    std::unique_ptr<llvm::Module> m(raw);
    if (!ok || !m) {
        if (msg.empty()) msg = diag.empty() ? "unknown error" : diag;
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator rejects the module: " + msg);
    }
    std::string why = broken(*m);
    if (!why.empty())
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translated to a broken module: " + why);
    llvm::SmallVector<char, 0> out;
    llvm::raw_svector_ostream os(out);
    llvm::WriteBitcodeToFile(*m, os);
    return copy_out(out.data(), out.size(), bitcode, bitcode_size, err, err_len);
}

int to_spirv(const void *bitcode, size_t size, void **spirv, size_t *spirv_size, char *err,
             size_t err_len)
{
    llvm::LLVMContext ctx;
    ctx.setOpaquePointers(false); // typed pointers: what the translator and PoCL 3.1 expect
    std::string diag;
    ctx.setDiagnosticHandlerCallBack(on_diagnostic, &diag);
    llvm::MemoryBufferRef buf(llvm::StringRef(static_cast<const char *>(bitcode), size), "clshim");
    auto mod = llvm::parseBitcodeFile(buf, ctx);
    if (!mod)
        return fail(err, err_len, CLSHIM_EINVAL,
                    "unreadable bitcode: " + llvm::toString(mod.takeError()));
    llvm::Module &m = **mod;
    const std::string &triple = m.getTargetTriple();
    if (triple.rfind("spir", 0) != 0 || triple.rfind("spirv", 0) == 0)
        return fail(err, err_len, CLSHIM_EINVAL, "bitcode triple '" + triple + "' is not SPIR");
    std::string why = broken(m);
    if (!why.empty()) return fail(err, err_len, CLSHIM_EINVAL, "broken bitcode: " + why);

    SPIRV::TranslatorOpts opts;
    std::ostringstream os;
    std::string msg;
    if (!llvm::writeSpirv(&m, opts, os, msg)) {
        if (msg.empty()) msg = diag.empty() ? "unknown error" : diag;
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator rejects the module: " + msg);
    }
    std::string out = os.str();
    return copy_out(out.data(), out.size(), spirv, spirv_size, err, err_len);
}

// The translator runs in a forked child; see the file comment. The child
// sends one frame: int32 rc, uint32 reason length, uint64 output length,
// then the reason and the output.
using Translation = std::function<int(void **, size_t *, char *, size_t)>;

const uint32_t kDefaultTimeoutMs = 60000;
std::atomic<uint32_t> child_timeout_ms{kDefaultTimeoutMs};
std::atomic<uint64_t> child_max_memory{0};

// Bytes of private writable memory this process maps now (VmData, what
// RLIMIT_DATA counts); 0 when unknown. Raw reads: the caller is a child
// forked from a threaded process.
uint64_t data_bytes_now()
{
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    char buf[4096];
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 0;
    buf[n] = '\0';
    const char *at = strstr(buf, "\nVmData:");
    return at ? strtoull(at + 8, nullptr, 10) * 1024 : 0;
}

// Bounds the child's memory growth: RLIMIT_DATA counts brk and private
// writable mappings, which include whatever the parent had (a sanitizer's
// shadow, the application's heap), so the limit is that plus the allowance.
void limit_child_memory()
{
    uint64_t allow = child_max_memory.load(std::memory_order_relaxed);
    if (!allow) return;
    uint64_t now = data_bytes_now();
    if (!now) return;
    struct rlimit rl;
    if (getrlimit(RLIMIT_DATA, &rl) != 0) return;
    rlim_t want = now + allow < now ? RLIM_INFINITY : (rlim_t)(now + allow);
    if (rl.rlim_max != RLIM_INFINITY && want > rl.rlim_max) want = rl.rlim_max;
    rl.rlim_cur = want;
    setrlimit(RLIMIT_DATA, &rl);
}

bool write_all(int fd, const void *p, size_t n)
{
    const char *c = static_cast<const char *>(p);
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

// exit() in the child (the translator gives up that way on some modules,
// LLVM after a fatal error) must not run the application's atexit handlers
// or flush a copy of its stdio buffers: registered last, this runs first.
void child_exit_now() { _exit(70); }

void child_say(const char *text)
{
    ssize_t n = write(2, text, strlen(text)); // the parent reads it; nothing to do if it cannot
    (void)n;
}

void child_fatal_error(void *, const char *reason, bool)
{
    child_say("LLVM ERROR: ");
    child_say(reason);
    child_say("\n");
    _exit(70);
}

[[noreturn]] void child_main(const Translation &work, int out_fd, int err_fd)
{
    dup2(err_fd, 2);
    // The application's unflushed stdout buffer came along with the fork;
    // the translator's iostreams flush it (cerr is tied to cout): to nowhere.
    int devnull = open("/dev/null", O_WRONLY | O_CLOEXEC);
    dup2(devnull >= 0 ? devnull : err_fd, 1);
    atexit(child_exit_now);
    llvm::remove_fatal_error_handler();
    llvm::install_fatal_error_handler(child_fatal_error, nullptr);
    // The application's crash handlers (a crash reporter, libFuzzer's) are
    // not for the translator's asserts: the parent reports those.
    for (int sig : {SIGABRT, SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS})
        signal(sig, SIG_DFL);
    if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(nullptr);
    limit_child_memory();
    char why[512] = "";
    void *bytes = nullptr;
    size_t size = 0;
    int rc;
    try {
        rc = work(&bytes, &size, why, sizeof why);
    } catch (const std::bad_alloc &) {
        rc = fail(why, sizeof why, CLSHIM_EINVAL,
                  "SPIR-V translator ran out of memory (CLSHIM_TRANSLATE_MAX_MEMORY)");
    } catch (...) {
        rc = fail(why, sizeof why, CLSHIM_EINVAL, "SPIR-V translator failed");
    }
    if (rc != CLSHIM_OK) size = 0;
    int32_t rc32 = rc;
    uint32_t why_len = (uint32_t)strlen(why);
    uint64_t size64 = size;
    bool ok = write_all(out_fd, &rc32, 4) && write_all(out_fd, &why_len, 4) &&
              write_all(out_fd, &size64, 8) && write_all(out_fd, why, why_len) &&
              (!size || write_all(out_fd, bytes, size));
    _exit(ok ? 0 : 1);
}

// Reads both pipes to EOF or until the deadline; false on timeout.
bool drain(int out_fd, int err_fd, std::string &out, std::string &err_text)
{
    const long timeout_ms = child_timeout_ms.load(std::memory_order_relaxed);
    struct timespec start, now;
    clock_gettime(CLOCK_MONOTONIC, &start);
    struct pollfd fds[2] = {{out_fd, POLLIN, 0}, {err_fd, POLLIN, 0}};
    char buf[65536];
    while (fds[0].fd >= 0 || fds[1].fd >= 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        long elapsed = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
        if (timeout_ms && elapsed >= timeout_ms) return false;
        int n = poll(fds, 2, timeout_ms ? (int)(timeout_ms - elapsed) : -1);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return false;
        for (int i = 0; i < 2; i++) {
            if (fds[i].fd < 0 || !fds[i].revents) continue;
            ssize_t r = read(fds[i].fd, buf, sizeof buf);
            if (r < 0 && errno == EINTR) continue;
            if (r <= 0) {
                fds[i].fd = -1;
                continue;
            }
            std::string &dst = i == 0 ? out : err_text;
            dst.append(buf, (size_t)r);
            if (i == 1 && dst.size() > 8192) dst.erase(0, dst.size() - 4096);
        }
    }
    return true;
}

std::string last_line(const std::string &text)
{
    size_t end = text.find_last_not_of("\r\n");
    if (end == std::string::npos) return "";
    size_t begin = text.find_last_of('\n', end);
    return text.substr(begin == std::string::npos ? 0 : begin + 1, end + 1 - (begin == std::string::npos ? 0 : begin + 1));
}

int isolated(const Translation &work, void **out, size_t *out_size, char *err, size_t err_len,
             const char *what = "SPIR-V translator")
{
    int out_pipe[2], err_pipe[2];
    if (pipe2(out_pipe, O_CLOEXEC)) return fail(err, err_len, CLSHIM_EIO, "cannot create a pipe");
    if (pipe2(err_pipe, O_CLOEXEC)) {
        close(out_pipe[0]);
        close(out_pipe[1]);
        return fail(err, err_len, CLSHIM_EIO, "cannot create a pipe");
    }
    pid_t pid = fork();
    if (pid == 0) {
        close(out_pipe[0]);
        close(err_pipe[0]);
        child_main(work, out_pipe[1], err_pipe[1]);
    }
    close(out_pipe[1]);
    close(err_pipe[1]);
    std::string data, err_text;
    bool finished = pid > 0 && drain(out_pipe[0], err_pipe[0], data, err_text);
    close(out_pipe[0]);
    close(err_pipe[0]);
    if (pid < 0) return fail(err, err_len, CLSHIM_EIO, std::string("cannot fork the ") + what);
    if (!finished) kill(pid, SIGKILL);
    int status = 0;
    pid_t w;
    do w = waitpid(pid, &status, 0);
    while (w < 0 && errno == EINTR);

    if (data.size() >= 16) {
        int32_t rc;
        uint32_t why_len;
        uint64_t size;
        memcpy(&rc, data.data(), 4);
        memcpy(&why_len, data.data() + 4, 4);
        memcpy(&size, data.data() + 8, 8);
        if (data.size() == 16 + (uint64_t)why_len + size) {
            if (rc != CLSHIM_OK)
                return fail(err, err_len, rc, data.substr(16, why_len));
            return copy_out(data.data() + 16 + why_len, size, out, out_size, err, err_len);
        }
    }
    if (!finished) {
        char why[128];
        snprintf(why, sizeof why, "%s timed out after %g s; module rejected", what,
                 child_timeout_ms.load(std::memory_order_relaxed) / 1000.0);
        return fail(err, err_len, CLSHIM_EINVAL, why);
    }
    std::string why = std::string(what) + " crashed on the module";
    if (w == pid && WIFSIGNALED(status)) why += " (signal " + std::to_string(WTERMSIG(status)) + ")";
    if (w == pid && WIFEXITED(status)) why = std::string(what) + " gave up on the module";
    std::string line = last_line(err_text);
    size_t at = line.find("Assertion");
    if (at != std::string::npos) line = "assertion " + line.substr(at + 10);
    if (!line.empty()) why += ": " + line.substr(0, 300);
    return fail(err, err_len, CLSHIM_EINVAL, why);
}

} // namespace

extern "C" int glue_isolated(int (*work)(void *arg, void **out, size_t *out_size, char *err, size_t err_len),
                             void *arg, const char *what, void **out, size_t *out_size, char *err, size_t err_len)
{
    return isolated([&](void **o, size_t *n, char *e, size_t l) { return work(arg, o, n, e, l); }, out, out_size,
                    err, err_len, what);
}

extern "C" void glue_set_translate_limits(uint32_t timeout_ms, uint64_t max_memory)
{
    child_timeout_ms.store(std::min(timeout_ms, (uint32_t)INT32_MAX), std::memory_order_relaxed);
    child_max_memory.store(max_memory, std::memory_order_relaxed);
}

extern "C" void glue_context_typed_pointers(LLVMContextRef ctx)
{
    llvm::unwrap(ctx)->setOpaquePointers(false);
}

extern "C" int glue_spirv_to_bitcode(const void *spirv, size_t size,
                                     const struct llvm_spec_const *consts, size_t num_consts,
                                     void **bitcode, size_t *bitcode_size, char *err,
                                     size_t err_len)
{
    try {
        std::vector<uint32_t> words;
        std::string why = check_module(spirv, size, words);
        if (!why.empty()) return fail(err, err_len, CLSHIM_EINVAL, why);
        auto work = [&](void **out, size_t *out_size, char *e, size_t e_len) {
            return to_bitcode(words, consts, num_consts, out, out_size, e, e_len);
        };
        return isolated(work, bitcode, bitcode_size, err, err_len);
    } catch (const std::bad_alloc &) {
        return fail(err, err_len, CLSHIM_ENOMEM, "out of memory");
    } catch (const std::exception &e) {
        return fail(err, err_len, CLSHIM_EINVAL, std::string("SPIR-V translator failed: ") + e.what());
    } catch (...) {
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator failed");
    }
}

extern "C" int glue_bitcode_to_spirv(const void *bitcode, size_t size, void **spirv,
                                     size_t *spirv_size, char *err, size_t err_len)
{
    try {
        if (!bitcode || !size) return fail(err, err_len, CLSHIM_EINVAL, "empty bitcode");
        auto work = [&](void **out, size_t *out_size, char *e, size_t e_len) {
            return to_spirv(bitcode, size, out, out_size, e, e_len);
        };
        return isolated(work, spirv, spirv_size, err, err_len);
    } catch (const std::bad_alloc &) {
        return fail(err, err_len, CLSHIM_ENOMEM, "out of memory");
    } catch (const std::exception &e) {
        return fail(err, err_len, CLSHIM_EINVAL, std::string("SPIR-V translator failed: ") + e.what());
    } catch (...) {
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator failed");
    }
}
