// The dlsym hook. Static CUDA runtimes (nvcc's default, CuPy, cuda-python)
// dlopen libcuda.so.1 and dlsym cuGetProcAddress from it; frameworks
// (TensorFlow, JAX, PyTorch's driver API use) dlopen libcudart/libcuda and
// dlsym the functions they call. Explicit-handle lookups bypass symbol
// interposition, so for those we return our wrappers for the memory
// functions (hooks/tables.h), bound to exactly the pointer glibc found.
//
// Rules learnt from other interposers (DESIGN.md):
//  - Both symbol versions of dlsym are exported (x86-64: GLIBC_2.2.5, which
//    binaries built before glibc 2.34 and NVIDIA's own libraries reference,
//    and GLIBC_2.34), through exports.map.
//  - The caller's identity is preserved. glibc resolves RTLD_NEXT relative
//    to the object that called dlsym, and RTLD_DEFAULT in that object's
//    scope (its namespace, and its local dependencies when it was dlopened
//    with RTLD_LOCAL), both found from dlsym's return address. A C++ hook
//    that called glibc's dlsym would make every such lookup relative to
//    libcumemtrace.so: an interposer loaded after us asking for the "next"
//    malloc would get its own, and recurse (the `import torch` + LLVM OpenMP
//    hang). So the entry point is a few instructions of assembly that, for
//    these two pseudo-handles, jump to glibc's dlsym with the caller's
//    return address untouched: glibc sees the real caller and resolves
//    exactly as without us. Nothing is substituted there, and nothing needs
//    to be: we export every intercepted name, so a global lookup already
//    finds our hook first, and an object loaded after us that asks for the
//    next definition gets the real one, exactly as it asked.
//  - A name glibc resolves is never answered with NULL: for explicit handles
//    the result is glibc's, or our wrapper around it.
//  - No recursion or deadlock during our own initialisation: the entry stub
//    needs nothing initialised (glibc's dlsym is looked up on first use with
//    dlvsym, which does not call dlsym), and the explicit-handle path takes
//    no lock and allocates nothing.
#include <dlfcn.h>

#include "hooks/tables.h"
#include "hooks/real_cuda.h"

#if !defined(__x86_64__)
#error "libcumemtrace's dlsym hook is written for x86-64 (the symbol versions and the entry stub)"
#endif

using namespace cumemtrace::preload;

extern "C" {

extern void* cumemtrace_glibc_dlsym;     // real_cuda.cpp
void* cumemtrace_resolve_glibc_dlsym();  // real_cuda.cpp

// dlsym on a real handle: glibc's answer, or our wrapper around it.
__attribute__((visibility("hidden"))) void* cumemtrace_dlsym_handle(void* handle, const char* name) {
  void* found = real_dlsym()(handle, name);
  return found ? wrap_symbol(name, found) : nullptr;
}

}  // extern "C"

// One entry for both versions (glibc ≥ 2.34 defines both as one function).
// handle + 1 ∈ {0, 1} ⇔ handle is RTLD_NEXT ((void*)-1) or RTLD_DEFAULT (0).
// The resolve path keeps the arguments and a 16-byte aligned stack across
// the call, then jumps with the caller's frame as it was.
__asm__(R"(
        .text
        .p2align 4
        .globl  cumemtrace_dlsym_entry_2_34
        .globl  cumemtrace_dlsym_entry_2_2_5
        .type   cumemtrace_dlsym_entry_2_34, @function
        .type   cumemtrace_dlsym_entry_2_2_5, @function
cumemtrace_dlsym_entry_2_34:
cumemtrace_dlsym_entry_2_2_5:
        .cfi_startproc
        leaq    1(%rdi), %rax
        cmpq    $1, %rax
        ja      cumemtrace_dlsym_handle
        movq    cumemtrace_glibc_dlsym(%rip), %rax
        testq   %rax, %rax
        jz      1f
        jmp     *%rax
1:
        pushq   %rdi
        .cfi_adjust_cfa_offset 8
        pushq   %rsi
        .cfi_adjust_cfa_offset 8
        subq    $8, %rsp
        .cfi_adjust_cfa_offset 8
        call    cumemtrace_resolve_glibc_dlsym
        addq    $8, %rsp
        .cfi_adjust_cfa_offset -8
        popq    %rsi
        .cfi_adjust_cfa_offset -8
        popq    %rdi
        .cfi_adjust_cfa_offset -8
        jmp     *%rax
        .cfi_endproc
        .size   cumemtrace_dlsym_entry_2_34, .-cumemtrace_dlsym_entry_2_34
        .size   cumemtrace_dlsym_entry_2_2_5, .-cumemtrace_dlsym_entry_2_2_5
        .symver cumemtrace_dlsym_entry_2_34, dlsym@@GLIBC_2.34
        .symver cumemtrace_dlsym_entry_2_2_5, dlsym@GLIBC_2.2.5
)");
