// Module images: PTX text, ELF cubins, fatbin containers, host objects and
// archives (see drv_image.h). Only names and sizes are read; no code is
// compiled or run.
#include "drv_image.h"

#include <elf.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <set>

namespace sim {
namespace {

constexpr int kDeviceArch = 90;  // compute capability 9.0 (drv_device.cpp)

// ---- PTX ----------------------------------------------------------------------
// PTX ISA ("Identifiers", "State Spaces", "Variables"): a variable is
// declared as `[.visible|.extern|.weak] .global|.const [.align N] [.vN]
// .type name[dims] [= init];` and a kernel as `[.visible] .entry name (params)
// { body }`. Statements at brace depth 0 are all this needs.

bool ident_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '$' || c == '%' || c == '.';
}

std::vector<std::string> tokenize(const char* p, const char* end) {
  std::vector<std::string> t;
  while (p < end) {
    char c = *p;
    if (c == '/' && p + 1 < end && p[1] == '/') {
      while (p < end && *p != '\n') ++p;
    } else if (c == '/' && p + 1 < end && p[1] == '*') {
      p += 2;
      while (p + 1 < end && !(p[0] == '*' && p[1] == '/')) ++p;
      p += 2;
    } else if (c == '"') {  // .file "name": skipped whole
      ++p;
      while (p < end && *p != '"') ++p;
      ++p;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++p;
    } else if (ident_char(c)) {
      const char* s = p;
      while (p < end && ident_char(*p)) ++p;
      t.emplace_back(s, p);
    } else {
      t.emplace_back(1, c);
      ++p;
    }
  }
  return t;
}

// Bytes of one element of a PTX fundamental type (PTX ISA "Fundamental Types").
std::size_t type_size(const std::string& t) {
  static const char* const k1[] = {".b8", ".u8", ".s8", ".pred"};
  static const char* const k2[] = {".b16", ".u16", ".s16", ".f16", ".bf16", ".f16x2"};
  static const char* const k4[] = {".b32", ".u32", ".s32", ".f32", ".bf16x2"};
  static const char* const k8[] = {".b64", ".u64", ".s64", ".f64"};
  for (const char* n : k1) if (t == n) return 1;
  for (const char* n : k2) if (t == n) return t == ".f16x2" ? 4 : 2;
  for (const char* n : k4) if (t == n) return 4;
  for (const char* n : k8) if (t == n) return 8;
  if (t == ".b128") return 16;
  return 0;
}

bool parse_number(const std::string& s, std::size_t* out) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 0);
  if (*end != '\0') return false;
  *out = static_cast<std::size_t>(v);
  return true;
}

// One variable statement (tokens up to its ';'): adds each declarator.
void ptx_variable(const std::vector<std::string>& st, Image* img) {
  std::size_t elem = 0, vec = 1, i = 0;
  for (; i < st.size(); ++i) {
    if (st[i] == ".v2") vec = 2;
    if (st[i] == ".v4") vec = 4;
    if (st[i] == ".v8") vec = 8;
    if ((elem = type_size(st[i])) != 0) break;
  }
  if (elem == 0) return;  // .texref, .samplerref, ...: not memory a client reads
  ++i;
  while (i < st.size()) {
    if (st[i].empty() || !ident_char(st[i][0]) || st[i][0] == '.') return;
    std::string name = st[i++];
    std::size_t count = 1;
    bool unsized = false;
    while (i + 1 < st.size() && st[i] == "[") {
      std::size_t n = 0;
      if (parse_number(st[i + 1], &n) && i + 2 < st.size() && st[i + 2] == "]") {
        count *= n;
        i += 3;
      } else if (st[i + 1] == "]") {  // size from the initializer
        unsized = true;
        i += 2;
      } else {
        return;
      }
    }
    std::size_t inits = 0;
    if (i < st.size() && st[i] == "=") {
      int depth = 0;
      inits = 1;
      for (++i; i < st.size(); ++i) {
        if (st[i] == "{") ++depth;
        if (st[i] == "}") --depth;
        if (st[i] == "," && depth <= 0) break;
        if (st[i] == "," && depth == 1) ++inits;
      }
    }
    if (unsized) count *= inits;
    img->globals.emplace_back(name, count * elem * vec);
    if (i < st.size() && st[i] == ",") ++i;
  }
}

CUresult parse_ptx(const char* text, std::size_t len, Image* out) {
  std::vector<std::string> t = tokenize(text, text + len);
  Image img;
  bool version = false, target = false;
  std::vector<std::string> st;  // the current depth-0 statement
  int depth = 0;
  for (std::size_t i = 0; i < t.size(); ++i) {
    const std::string& tok = t[i];
    if (depth > 0) {
      if (tok == "{") ++depth;
      if (tok == "}") --depth;
      continue;
    }
    // Braces after '=' belong to a variable's initializer, not a body.
    const bool in_init = std::find(st.begin(), st.end(), "=") != st.end();
    if (in_init && (tok == "{" || tok == "}")) {
      st.push_back(tok);
      continue;
    }
    if (tok == "}") return CUDA_ERROR_INVALID_PTX;
    if (tok == ";" || tok == "{") {
      if (tok == "{") depth = 1;
      bool ext = false, entry = false, func = false, var = false;
      for (std::size_t k = 0; k < st.size(); ++k) {
        ext |= st[k] == ".extern";
        func |= st[k] == ".func";
        var |= st[k] == ".global" || st[k] == ".const";
        if (st[k] == ".entry" && k + 1 < st.size()) {
          entry = true;
          if (!ext) img.entries.push_back(st[k + 1]);
        }
      }
      if (var && !entry && !func && !ext) ptx_variable(st, &img);
      st.clear();
      continue;
    }
    if (st.empty() && tok == ".version" && i + 1 < t.size()) {
      const std::string& v = t[i + 1];
      std::size_t dot = v.find('.');
      img.ptx_version = std::atoi(v.c_str()) * 10 + (dot != std::string::npos ? std::atoi(v.c_str() + dot + 1) : 0);
      version = true;
      ++i;
      continue;
    }
    if (st.empty() && (tok == ".target" || tok == ".address_size")) {
      target |= tok == ".target";
      // Runs to the end of its line in PTX; skip its operands.
      while (i + 1 < t.size() && (t[i + 1] == "," || t[i + 1].rfind("sm_", 0) == 0 ||
                                  t[i + 1].rfind("compute_", 0) == 0 ||
                                  std::isdigit(static_cast<unsigned char>(t[i + 1][0])) ||
                                  t[i + 1] == "map_f64_to_f32" || t[i + 1] == "texmode_independent" ||
                                  t[i + 1] == "texmode_unified" || t[i + 1] == "debug")) {
        ++i;
      }
      continue;
    }
    if (st.empty() && tok == ".file") {  // .file N "name"
      if (i + 1 < t.size()) ++i;
      continue;
    }
    if (st.empty() && tok == ".loc") continue;
    st.push_back(tok);
  }
  if (depth != 0) return CUDA_ERROR_INVALID_PTX;
  if (!version || !target) return CUDA_ERROR_INVALID_IMAGE;
  img.binary_version = kDeviceArch;  // JIT-compiled for the device
  *out = std::move(img);
  return CUDA_SUCCESS;
}

bool looks_like_text(const char* p, std::size_t len) {
  for (std::size_t i = 0; i < len; ++i) {
    unsigned char c = static_cast<unsigned char>(p[i]);
    if (c == 0) return i > 0;
    if (c < 0x20 && c != '\n' && c != '\r' && c != '\t' && c != '\f' && c != '\v') return false;
  }
  return len > 0;
}

// ---- ELF --------------------------------------------------------------------------
// A cubin is an ELF64 file for EM_CUDA (190). Kernels are FUNC symbols
// marked as entries in st_other (0x10: readelf shows "[<other>: 10]" on
// every __global__ of an nvcc -cubin, never on a __device__ function);
// __device__ and __constant__ variables are OBJECT symbols (local ones too:
// nvcc gives whole-program variables local binding) in .nv.global* and
// .nv.constantN sections (.nv.constant0 is the kernel parameter bank).
constexpr unsigned char kStoCudaEntry = 0x10;

bool elf_size(const unsigned char* p, std::size_t size, std::size_t* out) {
  if (size != 0 && size < sizeof(Elf64_Ehdr)) return false;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
  if (std::memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 || eh->e_ident[EI_CLASS] != ELFCLASS64) return false;
  if (eh->e_shentsize != sizeof(Elf64_Shdr) || eh->e_shnum == 0) return false;
  // The section headers are read in place: their table must be aligned, as
  // every linker writes it (a misaligned one is a malformed image).
  if (eh->e_shoff % alignof(Elf64_Shdr) != 0) return false;
  std::size_t end = eh->e_shoff + std::size_t{eh->e_shnum} * sizeof(Elf64_Shdr);
  if (size != 0 && end > size) return false;
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(p + eh->e_shoff);
  for (unsigned i = 0; i < eh->e_shnum; ++i) {
    if (sh[i].sh_type != SHT_NOBITS && sh[i].sh_offset + sh[i].sh_size > end) {
      end = sh[i].sh_offset + sh[i].sh_size;
    }
  }
  if (size != 0 && end > size) return false;
  *out = end;
  return true;
}

// ELF structures are read in place, which needs their alignment: an image
// at an odd address (an archive member, a client's buffer) is copied first.
const unsigned char* aligned_elf(const unsigned char* p, std::size_t* size, std::vector<std::uint64_t>* buf) {
  if (reinterpret_cast<std::uintptr_t>(p) % alignof(Elf64_Ehdr) == 0) return p;
  std::size_t n = *size;
  if (n == 0) {  // unknown size: the headers say it
    Elf64_Ehdr eh;
    std::memcpy(&eh, p, sizeof eh);
    if (eh.e_shentsize != sizeof(Elf64_Shdr)) return nullptr;
    const std::size_t headers = eh.e_shoff + std::size_t{eh.e_shnum} * sizeof(Elf64_Shdr);
    buf->assign((headers + 7) / 8, 0);
    std::memcpy(buf->data(), p, headers);
    if (!elf_size(reinterpret_cast<const unsigned char*>(buf->data()), headers, &n)) return nullptr;
  }
  buf->assign((n + 7) / 8, 0);
  std::memcpy(buf->data(), p, n);
  *size = n;
  return reinterpret_cast<const unsigned char*>(buf->data());
}

int cubin_arch(const Elf64_Ehdr* eh) {
  // ELF ABI version 8 and later (CUDA 12.x) keep the SM in bits 8-15 of
  // e_flags (sm_90: 0x...5a..), older ones in bits 0-7.
  return eh->e_ident[EI_ABIVERSION] >= 8 ? (eh->e_flags >> 8) & 0xff : eh->e_flags & 0xff;
}

const Elf64_Shdr* elf_sections(const unsigned char* p, const char** shstr) {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(p + eh->e_shoff);
  *shstr = nullptr;
  // A string table is used only when it ends with its NUL (no read past it).
  if (eh->e_shstrndx < eh->e_shnum) {
    const Elf64_Shdr& t = sh[eh->e_shstrndx];
    if (t.sh_size && p[t.sh_offset + t.sh_size - 1] == 0) *shstr = reinterpret_cast<const char*>(p + t.sh_offset);
  }
  return sh;
}

// Section i's name, or "" when its offset is outside the table.
const char* section_name(const unsigned char* p, const Elf64_Shdr* sh, const char* shstr, unsigned i) {
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
  return shstr && sh[i].sh_name < sh[eh->e_shstrndx].sh_size ? shstr + sh[i].sh_name : "";
}

CUresult parse_cubin(const unsigned char* p, std::size_t size, Image* out) {
  std::vector<std::uint64_t> copy;
  if (!(p = aligned_elf(p, &size, &copy))) return CUDA_ERROR_INVALID_IMAGE;
  std::size_t len = 0;
  if (!elf_size(p, size, &len)) return CUDA_ERROR_INVALID_IMAGE;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
  if (eh->e_machine != EM_CUDA) return CUDA_ERROR_INVALID_IMAGE;
  // A cubin runs only on its own major architecture at an equal or higher
  // minor one (CUDA C++ Programming Guide, "Binary Compatibility").
  const int arch = cubin_arch(eh);
  if (arch / 10 != kDeviceArch / 10 || arch % 10 > kDeviceArch % 10) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  const char* shstr = nullptr;
  const Elf64_Shdr* sh = elf_sections(p, &shstr);
  Image img;
  img.binary_version = arch;
  for (unsigned s = 0; s < eh->e_shnum; ++s) {
    if (sh[s].sh_type != SHT_SYMTAB || sh[s].sh_link >= eh->e_shnum) continue;
    // Symbols are copied out: nothing in an image guarantees the table's
    // alignment (UBSan: misaligned load in sim_kernels_driver's images).
    const unsigned char* syms = p + sh[s].sh_offset;
    const char* str = reinterpret_cast<const char*>(p + sh[sh[s].sh_link].sh_offset);
    const std::size_t strsz = sh[sh[s].sh_link].sh_size;
    if (strsz == 0 || str[strsz - 1] != '\0') continue;
    for (std::size_t k = 0; k < sh[s].sh_size / sizeof(Elf64_Sym); ++k) {
      Elf64_Sym y;
      std::memcpy(&y, syms + k * sizeof(Elf64_Sym), sizeof y);
      if (y.st_shndx == SHN_UNDEF || y.st_shndx >= eh->e_shnum || y.st_name >= strsz) continue;
      const char* name = str + y.st_name;
      const int type = ELF64_ST_TYPE(y.st_info), bind = ELF64_ST_BIND(y.st_info);
      if (type == STT_FUNC && (y.st_other & kStoCudaEntry) && bind != STB_LOCAL) {
        img.entries.emplace_back(name);
      } else if (type == STT_OBJECT && shstr) {
        const char* sec = section_name(p, sh, shstr, y.st_shndx);
        const bool global = std::strncmp(sec, ".nv.global", 10) == 0;
        const bool constant = std::strncmp(sec, ".nv.constant", 12) == 0 && std::strncmp(sec, ".nv.constant0", 13) != 0;
        if ((global || constant) && name[0] != '\0' && name[0] != '$') img.globals.emplace_back(name, y.st_size);
      }
    }
  }
  *out = std::move(img);
  return CUDA_SUCCESS;
}

// ---- fatbin -----------------------------------------------------------------------
// The container nvcc -fatbin writes (and embeds in .nv_fatbin): a 16-byte
// header (magic 0xBA55ED50, u16 version, u16 header size, u64 size of the
// entries), then entries, each with its own header: u16 kind (1 PTX, 2 ELF),
// u16 version, u32 header size, u64 payload size, ..., u32 SM at +0x1c, u64
// flags at +0x28 whose 0x2000 / 0x8000 bits mark a compressed payload (read
// from nvcc 13 output: its PTX entries, and its cubins with `-Xfatbin
// -compress-all`, have 0x8000 set and a payload starting with the zstd
// magic). The layout is not documented by NVIDIA.
constexpr std::uint32_t kFatbinMagic = 0xBA55ED50u;
constexpr std::uint32_t kFatbinWrapperMagic = 0x466243b1u;  // __fatBinC_Wrapper_t
constexpr std::uint64_t kCompressed = 0x2000 | 0x8000;

struct FatEntry {
  unsigned kind;
  int arch;
  bool compressed;
  const unsigned char* data;
  std::size_t size;
};

template <typename T>
T rd(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

bool fatbin_entries(const unsigned char* p, std::size_t size, std::vector<FatEntry>* out, std::size_t* total) {
  if (size != 0 && size < 16) return false;
  if (rd<std::uint32_t>(p) != kFatbinMagic) return false;
  const std::size_t hdr = rd<std::uint16_t>(p + 6);
  const std::size_t body = rd<std::uint64_t>(p + 8);
  if (hdr < 16 || (size != 0 && hdr + body > size)) return false;
  *total = hdr + body;
  for (std::size_t off = hdr; off + 0x30 <= hdr + body;) {
    const unsigned char* e = p + off;
    const std::size_t eh = rd<std::uint32_t>(e + 4);
    const std::size_t payload = rd<std::uint64_t>(e + 8);
    if (eh < 0x30 || off + eh + payload > hdr + body) return false;
    out->push_back(FatEntry{rd<std::uint16_t>(e), static_cast<int>(rd<std::uint32_t>(e + 0x1c)),
                            (rd<std::uint64_t>(e + 0x28) & kCompressed) != 0, e + eh, payload});
    off += eh + payload;
  }
  return true;
}

// Picks what the driver would load: a cubin for this architecture, else PTX
// it can JIT (PTX for an architecture no newer than the device's).
CUresult parse_fatbin(const unsigned char* p, std::size_t size, Image* out) {
  std::vector<FatEntry> es;
  std::size_t total = 0;
  if (!fatbin_entries(p, size, &es, &total)) return CUDA_ERROR_INVALID_IMAGE;
  const FatEntry* best = nullptr;
  for (const FatEntry& e : es) {
    const bool runs = e.kind == 2 ? (e.arch / 10 == kDeviceArch / 10 && e.arch <= kDeviceArch)
                                  : (e.kind == 1 && e.arch <= kDeviceArch);
    if (!runs) continue;
    // A readable entry wins over a compressed one, then cubin over PTX.
    auto rank = [](const FatEntry& x) { return (x.compressed ? 0 : 2) + (x.kind == 2 ? 1 : 0); };
    if (!best || rank(e) > rank(*best)) best = &e;
  }
  if (!best) return es.empty() ? CUDA_ERROR_INVALID_IMAGE : CUDA_ERROR_NO_BINARY_FOR_GPU;
  if (best->compressed) {
    Image img;
    img.opaque = true;
    img.binary_version = best->kind == 2 ? best->arch : kDeviceArch;
    *out = std::move(img);
    return CUDA_SUCCESS;
  }
  if (best->kind == 2) return parse_cubin(best->data, best->size, out);
  std::size_t n = strnlen(reinterpret_cast<const char*>(best->data), best->size);
  return parse_ptx(reinterpret_cast<const char*>(best->data), n, out);
}

// A host ELF object (x86-64) built by nvcc carries its device code as a
// fatbin in the .nv_fatbin section.
CUresult parse_host_object(const unsigned char* p, std::size_t size, Image* out) {
  std::vector<std::uint64_t> copy;
  if (!(p = aligned_elf(p, &size, &copy))) return CUDA_ERROR_INVALID_IMAGE;
  std::size_t len = 0;
  if (!elf_size(p, size, &len)) return CUDA_ERROR_INVALID_IMAGE;
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(p);
  if (eh->e_machine == EM_CUDA) return parse_cubin(p, size, out);
  const char* shstr = nullptr;
  const Elf64_Shdr* sh = elf_sections(p, &shstr);
  if (!shstr) return CUDA_ERROR_INVALID_IMAGE;
  Image all;
  bool any = false;
  for (unsigned s = 0; s < eh->e_shnum; ++s) {
    if (std::strcmp(section_name(p, sh, shstr, s), ".nv_fatbin") != 0) continue;
    // The section may hold several fatbins back to back, each 8-aligned.
    for (std::size_t off = 0; off + 16 <= sh[s].sh_size;) {
      const unsigned char* f = p + sh[s].sh_offset + off;
      if (rd<std::uint32_t>(f) != kFatbinMagic) {
        off += 8;
        continue;
      }
      std::vector<FatEntry> es;
      std::size_t total = 0;
      if (!fatbin_entries(f, sh[s].sh_size - off, &es, &total)) return CUDA_ERROR_INVALID_IMAGE;
      Image one;
      if (CUresult r = parse_fatbin(f, total, &one)) return r;
      all.entries.insert(all.entries.end(), one.entries.begin(), one.entries.end());
      all.globals.insert(all.globals.end(), one.globals.begin(), one.globals.end());
      all.opaque |= one.opaque;
      all.binary_version = one.binary_version;
      any = true;
      off += (total + 7) / 8 * 8;
    }
  }
  if (!any) return CUDA_ERROR_INVALID_IMAGE;
  *out = std::move(all);
  return CUDA_SUCCESS;
}

// A static library (ar archive, "!<arch>\n", 60-byte member headers with the
// size as decimal text at offset 48) of host objects or cubins, such as
// libcudadevrt.a.
CUresult parse_archive(const unsigned char* p, std::size_t size, Image* out) {
  if (size < 8 || std::memcmp(p, "!<arch>\n", 8) != 0) return CUDA_ERROR_INVALID_IMAGE;
  Image all;
  for (std::size_t off = 8; off + 60 <= size;) {
    char num[11] = {};
    std::memcpy(num, p + off + 48, 10);
    const std::size_t n = std::strtoull(num, nullptr, 10);
    if (off + 60 + n > size) return CUDA_ERROR_INVALID_IMAGE;
    const unsigned char* m = p + off + 60;
    Image one;
    if (n >= SELFMAG && std::memcmp(m, ELFMAG, SELFMAG) == 0 && parse_host_object(m, n, &one) == CUDA_SUCCESS) {
      all.entries.insert(all.entries.end(), one.entries.begin(), one.entries.end());
      all.globals.insert(all.globals.end(), one.globals.begin(), one.globals.end());
      all.opaque |= one.opaque;
    }
    off += 60 + n + (n & 1);
  }
  all.binary_version = kDeviceArch;
  *out = std::move(all);
  return CUDA_SUCCESS;
}

}  // namespace

CUresult parse_image(const void* data, std::size_t size, Image* out) {
  if (!data) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t magic = 0;
  if (size == 0 || size >= 4) std::memcpy(&magic, p, 4);
  if (magic == kFatbinWrapperMagic) {
    // struct { int magic; int version; const unsigned long long* data; void*; }
    // as nvcc's host stub passes it to __cudaRegisterFatBinary.
    const void* inner = nullptr;
    std::memcpy(&inner, p + 8, sizeof inner);
    return inner ? parse_fatbin(static_cast<const unsigned char*>(inner), 0, out) : CUDA_ERROR_INVALID_IMAGE;
  }
  if (magic == kFatbinMagic) return parse_fatbin(p, size, out);
  if (std::memcmp(p, ELFMAG, SELFMAG) == 0) return parse_cubin(p, size, out);
  const char* text = static_cast<const char*>(data);
  std::size_t len = size ? strnlen(text, size) : std::strlen(text);
  if (!looks_like_text(text, size ? size : len + 1)) return CUDA_ERROR_INVALID_IMAGE;
  return parse_ptx(text, len, out);
}

CUresult parse_link_input(CUjitInputType type, const void* data, std::size_t size, Image* out) {
  if (!data || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const auto* p = static_cast<const unsigned char*>(data);
  switch (type) {
    case CU_JIT_INPUT_CUBIN: return parse_cubin(p, size, out);
    case CU_JIT_INPUT_PTX: {
      const char* text = static_cast<const char*>(data);
      if (!looks_like_text(text, size)) return CUDA_ERROR_INVALID_PTX;
      CUresult r = parse_ptx(text, strnlen(text, size), out);
      return r == CUDA_ERROR_INVALID_IMAGE ? CUDA_ERROR_INVALID_PTX : r;
    }
    case CU_JIT_INPUT_FATBINARY: return parse_fatbin(p, size, out);
    case CU_JIT_INPUT_OBJECT: return parse_host_object(p, size, out);
    case CU_JIT_INPUT_LIBRARY: return parse_archive(p, size, out);
    default:
      // CU_JIT_INPUT_NVVM (LTO IR) needs NVVM, which the sim does not have.
      return CUDA_ERROR_INVALID_VALUE;
  }
}

std::string synthetic_ptx(const Image& img) {
  std::string s = ".version 8.0\n.target sm_90\n.address_size 64\n";
  std::set<std::string> seen;
  for (const std::string& e : img.entries) {
    if (seen.insert(e).second) s += ".visible .entry " + e + "() { ret; }\n";
  }
  for (const auto& g : img.globals) {
    if (seen.insert(g.first).second) {
      s += ".visible .global .align 8 .b8 " + g.first + "[" + std::to_string(g.second) + "];\n";
    }
  }
  return s;
}

}  // namespace sim
