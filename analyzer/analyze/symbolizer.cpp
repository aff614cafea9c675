#include "cumemtrace/analyzer/symbolizer.h"

#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <sys/stat.h>

#include <filesystem>
#include <optional>

#include "cumemtrace/demangle.h"

namespace cumemtrace::analyzer {

namespace {

// Where separate debug files are looked for: libdwfl's default (next to the
// file, its .debug/ directory, /usr/lib/debug, and by build id there).
char* g_debuginfo_path = nullptr;

const Dwfl_Callbacks kOfflineCallbacks = {
    .find_elf = dwfl_build_id_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = dwfl_offline_section_address,
    .debuginfo_path = &g_debuginfo_path,
};

// A line table may name files relative to the compilation directory
// ("../tests/app.cpp", as CMake builds compile): made whole with the
// directory the compilation unit records.
std::string absolute_source_path(Dwfl_Line* line, const char* file) {
  const std::filesystem::path source(file);
  if (source.is_absolute()) return file;
  Dwarf_Die* unit = dwfl_linecu(line);
  Dwarf_Attribute attribute;
  const char* directory =
      unit != nullptr ? dwarf_formstring(dwarf_attr(unit, DW_AT_comp_dir, &attribute)) : nullptr;
  if (directory == nullptr || *directory == '\0') return file;
  return (std::filesystem::path(directory) / source).lexically_normal().string();
}

std::uint64_t modified_unix_ns(const struct stat& st) {
  return static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1'000'000'000ull +
         static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
}

}  // namespace

struct FrameSymbolizer::Module {
  struct Answer {
    std::optional<std::string> fn;
    std::string file;
    std::optional<std::uint64_t> line;
  };

  Dwfl* dwfl = nullptr;
  Dwfl_Module* module = nullptr;  // nullptr: not symbolised (missing, changed, not ELF)
  std::unordered_map<std::uint64_t, Answer> by_offset;

  ~Module() {
    if (dwfl != nullptr) dwfl_end(dwfl);
  }

  // `offset` is the return address in the file's own addresses; the call
  // before it (one byte back) is what names the frame, as addr2line is told.
  const Answer& lookup(std::uint64_t offset) {
    auto [it, inserted] = by_offset.try_emplace(offset);
    if (!inserted) return it->second;
    Answer& answer = it->second;
    const Dwarf_Addr address = offset > 0 ? offset - 1 : 0;
    GElf_Off from_symbol = 0;
    GElf_Sym symbol{};
    const char* name = dwfl_module_addrinfo(module, address, &from_symbol, &symbol, nullptr, nullptr, nullptr);
    // Only a symbol that spans the address names it (a size of 0: unknown,
    // taken to), never merely the nearest one below.
    if (name != nullptr && *name != '\0' && (symbol.st_size == 0 || from_symbol < symbol.st_size)) {
      answer.fn = demangle(name);
    }
    if (Dwfl_Line* line = dwfl_module_getsrc(module, address)) {
      int number = 0;
      const char* file = dwfl_lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr);
      if (file != nullptr && *file != '\0' && number > 0) {
        answer.file = absolute_source_path(line, file);
        answer.line = static_cast<std::uint64_t>(number);
      }
    }
    return answer;
  }
};

bool FrameSymbolizer::available() { return true; }

FrameSymbolizer::FrameSymbolizer() = default;
FrameSymbolizer::~FrameSymbolizer() = default;

FrameSymbolizer::Module* FrameSymbolizer::module_for(const std::string& path) {
  auto [it, inserted] = modules_.try_emplace(path);
  if (!inserted) return it->second->module != nullptr ? it->second.get() : nullptr;
  it->second = std::make_unique<Module>();
  Module& m = *it->second;
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    ++counts_.modules_missing;
    return nullptr;
  }
  if (run_start_unix_ns_ != 0 && modified_unix_ns(st) > run_start_unix_ns_) {
    ++counts_.modules_changed;
    return nullptr;
  }
  m.dwfl = dwfl_begin(&kOfflineCallbacks);
  if (m.dwfl != nullptr) {
    dwfl_report_begin(m.dwfl);
    // Bias 0: the module's addresses are the file's own, which is what a
    // frame's `off` is (ip − the load bias), for PIE and fixed executables alike.
    m.module = dwfl_report_elf(m.dwfl, path.c_str(), path.c_str(), -1, 0, false);
    dwfl_report_end(m.dwfl, nullptr, nullptr);
  }
  if (m.module == nullptr) {
    ++counts_.modules_missing;
    return nullptr;
  }
  ++counts_.modules_read;
  return &m;
}

void FrameSymbolizer::symbolize(OwnedFrame& frame) {
  // A Python frame is named by the interpreter already, and has no address.
  if (frame.py) return;
  // Generated code is named from a perf map (/tmp/perf-PID.map), no ELF file.
  if (frame.module.empty() || !frame.off || frame.module.ends_with(".map")) return;
  if (!frame.file.empty() && frame.line && frame.fn) return;
  Module* module = module_for(frame.module);
  if (module == nullptr) return;
  const Module::Answer& answer = module->lookup(*frame.off);
  if (!frame.fn && answer.fn) {
    frame.fn = answer.fn;
    ++counts_.frames_named;
  }
  if (frame.file.empty() && answer.line) {
    frame.file = answer.file;
    frame.line = answer.line;
    ++counts_.frames_with_lines;
  }
}

}  // namespace cumemtrace::analyzer
