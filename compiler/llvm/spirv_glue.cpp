// spirv_glue.cpp — SPIR-V <-> SPIR bitcode through the
// SPIRV-LLVM-Translator, behind the extern "C" functions of glue.h.
//
// Untrusted bytes never reach the translator unchecked: the header (magic in
// either byte order, version 1.0-1.4, id bound, schema) and the instruction
// stream (every word count non-zero and inside the module) are walked first.
// That is not enough: Debian's libLLVMSPIRVLib is built with assertions, and
// a structurally sound but corrupted module (a flipped bit in an id) makes it
// abort() — about two thirds of bit-flipped modules did, in a measurement.
// So the translator itself runs in a child process (isolate.c: a crash, a
// hang or runaway memory there is CLSHIM_EINVAL here, with the child's last
// stderr line as the reason); glue_child_work is its side.
// Each translation owns its LLVMContext, with a diagnostic handler that
// records errors (LLVM's default handler would exit the process on one);
// every C++ exception is caught. The output is what `llvm-spirv -r` gives:
// spir64, OpenCL 1.2 builtin names.
#include "compiler/llvm/glue.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
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
#include <llvm/Support/MemoryBuffer.h>
#include <llvm/Support/raw_ostream.h>

#include "LLVMSPIRVLib.h"
#include "common/error.h"

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

} // namespace

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
        return glue_isolated(GLUE_TO_BITCODE, consts, num_consts * sizeof *consts, words.data(), words.size() * 4,
                             "SPIR-V translator", bitcode, bitcode_size, err, err_len);
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
        return glue_isolated(GLUE_TO_SPIRV, nullptr, 0, bitcode, size, "SPIR-V translator", spirv, spirv_size, err,
                             err_len);
    } catch (const std::bad_alloc &) {
        return fail(err, err_len, CLSHIM_ENOMEM, "out of memory");
    } catch (const std::exception &e) {
        return fail(err, err_len, CLSHIM_EINVAL, std::string("SPIR-V translator failed: ") + e.what());
    } catch (...) {
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator failed");
    }
}

extern "C" int glue_child_work(uint32_t work, const void *head, size_t head_len, const void *body, size_t body_len,
                               void **out, size_t *out_size, char *err, size_t err_len)
{
    try {
        switch (work) {
        case GLUE_TO_BITCODE: {
            std::vector<uint32_t> words;
            std::string why = check_module(body, body_len, words);
            if (!why.empty()) return fail(err, err_len, CLSHIM_EINVAL, why);
            size_t n = head_len / sizeof(struct llvm_spec_const);
            std::vector<struct llvm_spec_const> consts(n);
            if (n) memcpy(consts.data(), head, n * sizeof consts[0]);
            return to_bitcode(words, consts.data(), n, out, out_size, err, err_len);
        }
        case GLUE_TO_SPIRV:
            return to_spirv(body, body_len, out, out_size, err, err_len);
        case GLUE_TO_PTX:
            return ptx_child_work(head, head_len, body, body_len, out, out_size, err, err_len);
        default:
            return fail(err, err_len, CLSHIM_EINVAL, "unknown step " + std::to_string(work));
        }
    } catch (const std::bad_alloc &) {
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator ran out of memory (CLSHIM_TRANSLATE_MAX_MEMORY)");
    } catch (...) {
        return fail(err, err_len, CLSHIM_EINVAL, "SPIR-V translator failed");
    }
}
