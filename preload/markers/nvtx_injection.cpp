// NVTX ranges and marks of unmodified programs as `mark` events, through
// NVTX's own tool-injection interface (NVTX v3, nvtx3/nvtxDetail/nvtxInit.h):
// on its first call, each NVTX instance in the process (every library that
// includes the header-only NVTX has its own) dlopens the library named by
// NVTX_INJECTION64_PATH and calls its InitializeInjectionNvtx2 with a
// function that hands out export tables. Through the callbacks table the
// tool fills the function pointers of the calls it implements; the others
// stay no-ops. `cumemtrace run` points NVTX_INJECTION64_PATH at
// libcumemtrace.so, already loaded by LD_PRELOAD, so dlopen returns it.
//
// Implemented: nvtxMarkA/W/Ex, nvtxRangePushA/W/Ex, nvtxRangePop, and the
// domain forms nvtxDomainMarkEx, nvtxDomainRangePushEx, nvtxDomainRangePop
// with nvtxDomainCreateA/W and nvtxDomainRegisterStringA/W (so registered
// messages can be named). Start/end ranges (nvtxRangeStartA/nvtxRangeEnd)
// are not nested and have no place in push/pop marks: not recorded.
#define NVTX_NO_IMPL  // types and declarations only: we are the tool
#include <nvtx3/nvToolsExt.h>

#include <cstddef>
#include <string>
#include <string_view>

#include "markers/markers.h"
#include "markers/api.h"

namespace cumemtrace::preload {
namespace {

// NVTX calls us from C: nothing may escape. Building a name can run out of
// host memory; the mark is then lost and `fallback` returned.
template <typename Body, typename Result>
Result never_throws(Body body, Result fallback) noexcept {
  try {
    return body();
  } catch (...) {
    return fallback;
  }
}

template <typename Body>
void never_throws(Body body) noexcept {
  try {
    body();
  } catch (...) {
  }
}

// Copies of domain and registered-string names. NVTX treats the handles we
// return as opaque; they live as long as the process, as NVTX expects.
template <typename Handle>
Handle keep(std::string text) {
  return reinterpret_cast<Handle>(new std::string(std::move(text)));
}

std::string message_of(const nvtxEventAttributes_t* attributes) {
  // Older callers pass smaller structs: read the message only if present.
  constexpr std::size_t kNeeded = offsetof(nvtxEventAttributes_t, message) + sizeof(nvtxMessageValue_t);
  if (attributes == nullptr || attributes->size < kNeeded) return {};
  const nvtxMessageValue_t& message = attributes->message;
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII:
      return message.ascii ? message.ascii : "";
    case NVTX_MESSAGE_TYPE_UNICODE:
      return utf8_from_wide(message.unicode);
    case NVTX_MESSAGE_TYPE_REGISTERED:
      // Only our nvtxDomainRegisterString* hands out handles in this process.
      return message.registered ? *reinterpret_cast<const std::string*>(message.registered) : "";
    default:
      return {};
  }
}

std::string_view ascii(const char* message) { return message ? message : ""; }

void mark_a(const char* message) { record_mark(ascii(message)); }
void mark_w(const wchar_t* message) {
  never_throws([&] { record_mark(utf8_from_wide(message)); });
}
void mark_ex(const nvtxEventAttributes_t* attributes) {
  never_throws([&] { record_mark(message_of(attributes)); });
}

int push_a(const char* message) { return record_range_push(nullptr, ascii(message)); }
int push_w(const wchar_t* message) {
  return never_throws([&] { return record_range_push(nullptr, utf8_from_wide(message)); }, -1);
}
int push_ex(const nvtxEventAttributes_t* attributes) {
  return never_throws([&] { return record_range_push(nullptr, message_of(attributes)); }, -1);
}
int pop() { return record_range_pop(nullptr); }

void domain_mark_ex(nvtxDomainHandle_t, const nvtxEventAttributes_t* attributes) {
  never_throws([&] { record_mark(message_of(attributes)); });
}
int domain_push_ex(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  return never_throws([&] { return record_range_push(domain, message_of(attributes)); }, -1);
}
int domain_pop(nvtxDomainHandle_t domain) { return record_range_pop(domain); }

nvtxDomainHandle_t domain_create_a(const char* name) {
  return never_throws([&] { return keep<nvtxDomainHandle_t>(std::string(ascii(name))); },
                      nvtxDomainHandle_t{});
}
nvtxDomainHandle_t domain_create_w(const wchar_t* name) {
  return never_throws([&] { return keep<nvtxDomainHandle_t>(utf8_from_wide(name)); },
                      nvtxDomainHandle_t{});
}
nvtxStringHandle_t register_string_a(nvtxDomainHandle_t, const char* text) {
  return never_throws([&] { return keep<nvtxStringHandle_t>(std::string(ascii(text))); },
                      nvtxStringHandle_t{});
}
nvtxStringHandle_t register_string_w(nvtxDomainHandle_t, const wchar_t* text) {
  return never_throws([&] { return keep<nvtxStringHandle_t>(utf8_from_wide(text)); },
                      nvtxStringHandle_t{});
}

// Points slot `id` of an NVTX module's table at `fn`, if the program's NVTX
// is recent enough to have that slot.
template <typename Fn>
void attach(NvtxFunctionTable table, unsigned int size, unsigned int id, Fn fn) {
  if (table != nullptr && id < size && table[id] != nullptr) {
    *table[id] = reinterpret_cast<NvtxFunctionPointer>(fn);
  }
}

bool module_table(const NvtxExportTableCallbacks* callbacks, NvtxCallbackModule module,
                  NvtxFunctionTable& table, unsigned int& size) {
  table = nullptr;
  size = 0;
  return callbacks->GetModuleFunctionTable(module, &table, &size) != 0 && table != nullptr;
}

}  // namespace
}  // namespace cumemtrace::preload

using namespace cumemtrace::preload;

// Called once by each NVTX instance, on its first NVTX call. Returning 0
// makes that instance turn all its calls into no-ops.
extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(
    NvtxGetExportTableFunc_t get_export_table) {
  if (get_export_table == nullptr) return 0;
  const auto* callbacks =
      static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr || callbacks->struct_size < sizeof(NvtxExportTableCallbacks) ||
      callbacks->GetModuleFunctionTable == nullptr) {
    return 0;
  }
  NvtxFunctionTable table = nullptr;
  unsigned int size = 0;
  if (!module_table(callbacks, NVTX_CB_MODULE_CORE, table, size)) return 0;
  attach(table, size, NVTX_CBID_CORE_MarkEx, &mark_ex);
  attach(table, size, NVTX_CBID_CORE_MarkA, &mark_a);
  attach(table, size, NVTX_CBID_CORE_MarkW, &mark_w);
  attach(table, size, NVTX_CBID_CORE_RangePushEx, &push_ex);
  attach(table, size, NVTX_CBID_CORE_RangePushA, &push_a);
  attach(table, size, NVTX_CBID_CORE_RangePushW, &push_w);
  attach(table, size, NVTX_CBID_CORE_RangePop, &pop);
  if (module_table(callbacks, NVTX_CB_MODULE_CORE2, table, size)) {
    attach(table, size, NVTX_CBID_CORE2_DomainMarkEx, &domain_mark_ex);
    attach(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_push_ex);
    attach(table, size, NVTX_CBID_CORE2_DomainRangePop, &domain_pop);
    attach(table, size, NVTX_CBID_CORE2_DomainCreateA, &domain_create_a);
    attach(table, size, NVTX_CBID_CORE2_DomainCreateW, &domain_create_w);
    attach(table, size, NVTX_CBID_CORE2_DomainRegisterStringA, &register_string_a);
    attach(table, size, NVTX_CBID_CORE2_DomainRegisterStringW, &register_string_w);
  }
  if (const auto* version = static_cast<const NvtxExportTableVersionInfo*>(
          get_export_table(NVTX_ETID_VERSIONINFO));
      version != nullptr && version->struct_size >= sizeof(NvtxExportTableVersionInfo) &&
      version->SetInjectionNvtxVersion != nullptr) {
    version->SetInjectionNvtxVersion(NVTX_VERSION);
  }
  return 1;
}
