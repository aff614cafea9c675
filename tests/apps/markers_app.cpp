// Marks from an unmodified NVTX program (nvtx3, header-only, from the CUDA
// toolkit) and from cumemtrace's own weak marker API, with an allocation in
// between. Under cumemtrace (NVTX_INJECTION64_PATH naming libcumemtrace.so)
// the trace holds the marks in program order; run plainly, it must run all
// the same: NVTX calls are no-ops and the weak cumemtrace_* calls skipped.
//
//   markers_app      prints "levels L1 L2 ..." (the values push/pop returned)
#include <cuda_runtime_api.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <string>

#include "cumemtrace/cumemtrace.h"

int main() {
  std::string levels;
  const auto keep = [&](int level) { levels += " " + std::to_string(level); };

  cumemtrace_mark("start");
  keep(nvtxRangePushA("epoch 1"));
  void* p = nullptr;
  if (cudaMalloc(&p, 1 << 20) != cudaSuccess) return 3;
  keep(cumemtrace_range_push("step"));
  nvtxMarkA("checkpoint");
  keep(cumemtrace_range_pop());
  keep(nvtxRangePushW(L"wide \u00fc"));
  keep(nvtxRangePop());

  nvtxEventAttributes_t attributes{};
  attributes.version = NVTX_VERSION;
  attributes.size = NVTX_EVENT_ATTRIB_STRUCT_SIZE;
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = "ex push";
  keep(nvtxRangePushEx(&attributes));
  attributes.message.ascii = "ex mark";
  nvtxMarkEx(&attributes);
  keep(nvtxRangePop());

  // A domain nests on its own; its registered strings are messages too.
  nvtxDomainHandle_t domain = nvtxDomainCreateA("loader");
  attributes.messageType = NVTX_MESSAGE_TYPE_REGISTERED;
  attributes.message.registered = nvtxDomainRegisterStringA(domain, "prefetch");
  keep(nvtxDomainRangePushEx(domain, &attributes));
  attributes.messageType = NVTX_MESSAGE_TYPE_ASCII;
  attributes.message.ascii = "batch ready";
  nvtxDomainMarkEx(domain, &attributes);
  keep(nvtxDomainRangePop(domain));
  nvtxDomainDestroy(domain);

  if (cudaFree(p) != cudaSuccess) return 4;
  keep(nvtxRangePop());  // closes "epoch 1"
  cumemtrace_mark("quote \" backslash \\ newline \n end");
  std::printf("levels%s\n", levels.c_str());
  return 0;
}
