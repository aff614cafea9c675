#include "analyze/stack_folding.h"

#include <algorithm>
#include <cctype>

#include "analyze/report_figures.h"
#include "analyze/site_labels.h"

namespace cumemtrace::analyzer::detail {

namespace {

constexpr std::string_view kEllipsis = "\xE2\x80\xA6";  // "…"

bool starts_with_any(std::string_view s, std::initializer_list<std::string_view> prefixes) {
  return std::any_of(prefixes.begin(), prefixes.end(), [s](std::string_view p) { return s.starts_with(p); });
}

// By the object file's name: shared libraries carry versions and suffixes
// (libc10_cuda.so, libpython3.12.so.1.0, libcudart.so.13), so prefixes.
FrameOwner owner_of_module(std::string_view module) {
  const std::string_view file = base_name(module);
  if (file.empty()) return FrameOwner::user;
  if (starts_with_any(file, {"libtorch", "libc10", "libcaffe2", "libshm"})) return FrameOwner::libtorch;
  // The interpreter, linked in (python3.12) or shared, and ctypes' glue.
  if (starts_with_any(file, {"libpython", "_ctypes."}) || file == "python" ||
      (file.starts_with("python3") && file.find(".so") == std::string_view::npos)) {
    return FrameOwner::cpython;
  }
  if (file.starts_with("libffi")) return FrameOwner::libffi;
  if (starts_with_any(file, {"libcudart", "libcuda.", "libcublas", "libcudnn", "libnccl", "libcufft", "libcurand",
                             "libcusparse", "libcusolver", "libnvrtc", "libnvJitLink", "libnvToolsExt", "libcupti",
                             "libnvidia-"})) {
    return FrameOwner::cuda;
  }
  if (starts_with_any(file, {"libstdc++", "libgcc_s", "libc++"})) return FrameOwner::cxx_library;
  if (starts_with_any(file, {"libc.so", "libc-", "ld-linux", "libpthread", "libdl"})) return FrameOwner::libc;
  return FrameOwner::user;
}

// CPython's C API is Py<Upper>… or Py_…, its internals _Py…; the static
// functions of its call machinery and of its main program have names of
// their own, listed here as they appear in PyTorch's snapshots.
bool is_cpython_name(std::string_view name) {
  if (name.starts_with("_Py")) return true;
  if (name.size() > 2 && name.starts_with("Py") && (std::isupper(static_cast<unsigned char>(name[2])) || name[2] == '_')) {
    return true;
  }
  return starts_with_any(name, {"pymain_", "pyrun_", "method_vectorcall", "cfunction_", "slot_tp_", "slot_nb_",
                                "slot_sq_", "slot_mp_", "run_mod", "run_eval_code_obj", "vectorcall_method",
                                "vectorcall_maybe", "vectorcall_unbound", "object_vacall", "wrapper_call",
                                "func_vectorcall"}) &&
         name.find("::") == std::string_view::npos;
}

FrameOwner owner_of_name(std::string_view fn) {
  if (fn.empty()) return FrameOwner::user;
  // The qualified name, without a return type ("at::TensorBase at::detail::f<…>(…)").
  const std::string name = fn.find_first_of(" (<") == std::string_view::npos ? std::string(fn)
                                                                              : short_function_name(fn);
  if (starts_with_any(name, {"at::", "c10::", "torch::", "caffe2::", "THP"})) return FrameOwner::libtorch;
  if (is_cpython_name(name)) return FrameOwner::cpython;
  if (name.starts_with("ffi_")) return FrameOwner::libffi;
  // std::thread's entry point is the C++ library's; what it runs is not.
  if (starts_with_any(name, {"std::", "__gnu_cxx::", "__cxxabiv1::"}) || name == "execute_native_thread_routine") {
    return FrameOwner::cxx_library;
  }
  // Names that start with "__" are the implementation's (glibc's internals,
  // often where a stripped libc's thread start is named after a neighbour).
  if (name == "_start" || name == "start_thread" || name == "clone" || name == "clone3" ||
      name.starts_with("pthread_") || (name.starts_with("__") && name.find("::") == std::string::npos)) {
    return FrameOwner::libc;
  }
  return FrameOwner::user;
}

}  // namespace

std::string_view owner_name(FrameOwner owner) {
  switch (owner) {
    case FrameOwner::user: return "";
    case FrameOwner::libtorch: return "libtorch";
    case FrameOwner::cpython: return "CPython";
    case FrameOwner::libffi: return "libffi";
    case FrameOwner::cuda: return "CUDA";
    case FrameOwner::cxx_library: return "libstdc++";
    case FrameOwner::libc: return "libc";
  }
  return "";
}

FrameOwner frame_owner(bool py, std::string_view fn, std::string_view module) {
  if (py) return FrameOwner::user;
  if (const FrameOwner by_module = owner_of_module(module); by_module != FrameOwner::user) return by_module;
  return owner_of_name(fn);
}

FrameOwner frame_owner(const OwnedFrame& frame) {
  return frame_owner(frame.py, frame.fn ? std::string_view(*frame.fn) : std::string_view(), frame.module);
}

std::vector<StackLine> fold_stack(const std::vector<FrameOwner>& owners) {
  std::vector<StackLine> lines;
  for (std::size_t i = 0; i < owners.size();) {
    std::size_t end = i + 1;
    // The innermost frame shows whoever owns it: it asked for the memory.
    if (i > 0 && owners[i] != FrameOwner::user) {
      while (end < owners.size() && owners[end] != FrameOwner::user) ++end;
    }
    StackLine line;
    line.first = i;
    line.count = end - i;
    line.folded = line.count > 1;  // one frame takes a line either way: shown
    if (line.folded) {
      for (std::size_t j = i; j < end; ++j) {
        if (std::find(line.owners.begin(), line.owners.end(), owners[j]) == line.owners.end()) {
          line.owners.push_back(owners[j]);
        }
      }
    }
    lines.push_back(std::move(line));
    i = end;
  }
  return lines;
}

std::string folded_text(const StackLine& line) {
  std::string text = std::string(kEllipsis) + " " + std::to_string(line.count) + " frames in ";
  for (std::size_t i = 0; i < line.owners.size(); ++i) {
    if (i > 0) text += ", ";
    text += owner_name(line.owners[i]);
  }
  return text;
}

std::string readable_function_name(std::string_view name) {
  return name.size() > kLongName ? short_function_name(name) : std::string(name);
}

}  // namespace cumemtrace::analyzer::detail
