// The demangled form of a C++ symbol name, or the name itself (C functions,
// names that are not mangled): for the preload's frame names and the
// analyzer's --symbolize alike.
#pragma once

#include <cxxabi.h>

#include <cstdlib>
#include <string>

namespace cumemtrace {

inline std::string demangle(const char* mangled) {
  int status = 0;
  char* text = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || text == nullptr) return mangled;
  std::string out(text);
  std::free(text);
  return out;
}

}  // namespace cumemtrace
