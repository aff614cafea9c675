// The JIT linker (cuLinkCreate/AddData/AddFile/Complete/Destroy). Nothing
// is compiled or linked: the inputs are read for their kernels and globals
// (drv_image.cpp) and the output is the synthetic PTX declaring them all.
#include <fstream>
#include <iterator>
#include <set>
#include <string>

#include "drv_image.h"
#include "drv_internal.h"

namespace sim {
namespace {

struct Linker {
  Image linked;
  std::string output;
};

struct Links {
  std::mutex mu;
  std::set<Linker*> set;
};
Links& links() {
  static auto* l = new Links;  // never destroyed, see drv_internal.h
  return *l;
}

bool valid_options(unsigned n, const void* keys, const void* values) { return n == 0 || (keys && values); }

bool read_file(const char* path, std::string* out) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return false;
  out->assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return true;
}

}  // namespace
}  // namespace sim

using namespace sim;

// ---- linker --------------------------------------------------------------------------
// Nothing is compiled: cuLinkComplete's "cubin" is the synthetic PTX of every
// kernel and global of the inputs (drv_image.h), which cuModuleLoadData
// accepts. It "is owned by state, so it should be copied before state is
// destroyed via cuLinkDestroy".

namespace {
Linker* find_linker(CUlinkState h) {
  auto* l = reinterpret_cast<Linker*>(h);
  return links().set.count(l) ? l : nullptr;
}

CUresult link_add(CUlinkState state, CUjitInputType type, const void* data, std::size_t size, unsigned n,
                  const void* keys, const void* values) {
  if (!valid_options(n, keys, values)) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  Image img;
  if (CUresult r = parse_link_input(type, data, size, &img)) return r;
  std::lock_guard<std::mutex> lk(links().mu);
  Linker* l = find_linker(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  l->linked.entries.insert(l->linked.entries.end(), img.entries.begin(), img.entries.end());
  l->linked.globals.insert(l->linked.globals.end(), img.globals.begin(), img.globals.end());
  return CUDA_SUCCESS;
}
}  // namespace

CUresult CUDAAPI cuLinkCreate_v2(unsigned int numOptions, CUjit_option* options, void** optionValues,
                                 CUlinkState* stateOut) {
  if (!stateOut || !valid_options(numOptions, options, optionValues)) return CUDA_ERROR_INVALID_VALUE;
  Context* c = nullptr;
  if (CUresult r = current_ctx(&c)) return r;
  auto* l = new Linker;
  std::lock_guard<std::mutex> lk(links().mu);
  links().set.insert(l);
  *stateOut = reinterpret_cast<CUlinkState>(l);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkAddData_v2(CUlinkState state, CUjitInputType type, void* data, size_t size,
                                  const char* /*name*/, unsigned int numOptions, CUjit_option* options,
                                  void** optionValues) {
  return link_add(state, type, data, size, numOptions, options, optionValues);
}

CUresult CUDAAPI cuLinkAddFile_v2(CUlinkState state, CUjitInputType type, const char* path,
                                  unsigned int numOptions, CUjit_option* options, void** optionValues) {
  if (!path) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::string bytes;
  if (!read_file(path, &bytes)) return CUDA_ERROR_FILE_NOT_FOUND;
  // Keep PTX NUL-terminated for the parser.
  return link_add(state, type, bytes.c_str(), bytes.size(), numOptions, options, optionValues);
}

CUresult CUDAAPI cuLinkComplete(CUlinkState state, void** cubinOut, size_t* sizeOut) {
  if (!cubinOut || !sizeOut) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(links().mu);
  Linker* l = find_linker(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  l->output = synthetic_ptx(l->linked);
  *cubinOut = const_cast<char*>(l->output.c_str());
  *sizeOut = l->output.size() + 1;  // with its NUL, as a PTX image is passed
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cuLinkDestroy(CUlinkState state) {
  if (CUresult r = check_init()) return r;
  std::lock_guard<std::mutex> lk(links().mu);
  Linker* l = find_linker(state);
  if (!l) return CUDA_ERROR_INVALID_HANDLE;
  links().set.erase(l);
  delete l;
  return CUDA_SUCCESS;
}

// The unsuffixed ABIs of CUDA < 6.5 take the same arguments.
CUresult CUDAAPI cuLinkCreate(unsigned int n, CUjit_option* o, void** v, CUlinkState* s) {
  return cuLinkCreate_v2(n, o, v, s);
}
CUresult CUDAAPI cuLinkAddData(CUlinkState st, CUjitInputType t, void* d, size_t sz, const char* name,
                               unsigned int n, CUjit_option* o, void** v) {
  return cuLinkAddData_v2(st, t, d, sz, name, n, o, v);
}
CUresult CUDAAPI cuLinkAddFile(CUlinkState st, CUjitInputType t, const char* path, unsigned int n,
                               CUjit_option* o, void** v) {
  return cuLinkAddFile_v2(st, t, path, n, o, v);
}
