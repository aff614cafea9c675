// Reading the names out of a module image (drv_module.cpp): PTX text, an
// ELF cubin, a fatbin container, a host object or archive carrying fatbins.
// Kernels compute nothing on the sim, so only what a client can ask a module
// for is kept: its kernels' names and its globals' names and sizes.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "drv_internal.h"

namespace sim {

struct Image {
  std::vector<std::string> entries;                           // kernels, in image order
  std::vector<std::pair<std::string, std::size_t>> globals;   // .global/.const variables
  int ptx_version = 0;     // CU_FUNC_ATTRIBUTE_PTX_VERSION (e.g. 80 for PTX 8.0), 0 for a cubin
  int binary_version = 0;  // CU_FUNC_ATTRIBUTE_BINARY_VERSION (90 for sm_90)
  // A fatbin whose entry for this device is compressed: the names inside
  // cannot be read, so every lookup answers CUDA_ERROR_NOT_FOUND.
  bool opaque = false;
};

// Parses an image given to cuModuleLoadData & co. `size` 0 means unknown
// (cuModuleLoadData gets a bare pointer): PTX runs to its NUL, an ELF and a
// fatbin carry their own sizes. Returns CUDA_ERROR_INVALID_IMAGE for
// anything unrecognised and CUDA_ERROR_NO_BINARY_FOR_GPU for a cubin (or a
// fatbin holding only cubins) of another architecture than the sim's sm_90.
CUresult parse_image(const void* data, std::size_t size, Image* out);

// Linker inputs (cuLinkAddData): the CUjitInputType says what data is.
CUresult parse_link_input(CUjitInputType type, const void* data, std::size_t size, Image* out);

// The PTX text the sim's cuLinkComplete returns and the runtime builds from
// nvcc's registrations: one `.visible .entry NAME() { ret; }` per kernel and
// one `.visible .global .align 8 .b8 NAME[SIZE];` per global.
std::string synthetic_ptx(const Image& img);

}  // namespace sim
