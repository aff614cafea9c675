#include "stacks/cfi_rules.h"

#include <dlfcn.h>

#include <cstddef>
#include <cstring>
#include <limits>

namespace cumemtrace::preload::cfi {
namespace {

// DWARF register numbers on x86-64 (psABI figure 3.36).
constexpr std::uint64_t kRbp = 6;
constexpr std::uint64_t kRsp = 7;
constexpr std::uint64_t kReturnAddress = 16;

// Pointer encodings (LSB, "DWARF Exception Header Encoding").
constexpr std::uint8_t kEncOmit = 0xff;
constexpr std::uint8_t kEncFormatMask = 0x0f;
constexpr std::uint8_t kEncApplyMask = 0x70;
constexpr std::uint8_t kEncPcRel = 0x10;
constexpr std::uint8_t kEncDataRel = 0x30;
constexpr std::uint8_t kEncDataRelSdata4 = 0x3b;  // the .eh_frame_hdr search table's

// Bounds-checked reading of one record. A record's own length bounds it; the
// header's search table is trusted as far as its entry count says.
struct Reader {
  const std::uint8_t* p;
  const std::uint8_t* end;
  bool ok = true;

  bool has(std::size_t n) {
    if (static_cast<std::size_t>(end - p) < n) ok = false;
    return ok;
  }
  template <typename T>
  T fixed() {
    T value{};
    if (!has(sizeof(T))) return value;
    std::memcpy(&value, p, sizeof(T));
    p += sizeof(T);
    return value;
  }
  std::uint64_t uleb() {
    std::uint64_t value = 0;
    for (unsigned shift = 0; has(1); shift += 7) {
      const std::uint8_t byte = *p++;
      if (shift < 64) value |= std::uint64_t{byte & 0x7fu} << shift;
      if ((byte & 0x80) == 0) return value;
    }
    return 0;
  }
  std::int64_t sleb() {
    std::int64_t value = 0;
    unsigned shift = 0;
    while (has(1)) {
      const std::uint8_t byte = *p++;
      if (shift < 64) value |= static_cast<std::int64_t>(std::uint64_t{byte & 0x7fu} << shift);
      shift += 7;
      if ((byte & 0x80) == 0) {
        if (shift < 64 && (byte & 0x40) != 0) value |= -(std::int64_t{1} << shift);
        return value;
      }
    }
    return 0;
  }
  // The value of an encoded pointer's format, before its application.
  std::uint64_t formatted(std::uint8_t encoding) {
    switch (encoding & kEncFormatMask) {
      case 0x00: return fixed<std::uint64_t>();  // absptr
      case 0x01: return uleb();
      case 0x02: return fixed<std::uint16_t>();
      case 0x03: return fixed<std::uint32_t>();
      case 0x04: return fixed<std::uint64_t>();
      case 0x09: return static_cast<std::uint64_t>(sleb());
      case 0x0a: return static_cast<std::uint64_t>(std::int64_t{fixed<std::int16_t>()});
      case 0x0b: return static_cast<std::uint64_t>(std::int64_t{fixed<std::int32_t>()});
      case 0x0c: return fixed<std::uint64_t>();
      default: ok = false; return 0;
    }
  }
  // An encoded pointer, pc- or data-relative applied (indirection is only
  // used by personality routines, which are skipped, never followed).
  std::uintptr_t pointer(std::uint8_t encoding, std::uintptr_t data_base) {
    const auto here = reinterpret_cast<std::uintptr_t>(p);
    const std::uint64_t value = formatted(encoding);
    switch (encoding & kEncApplyMask) {
      case 0x00: return value;
      case kEncPcRel: return here + value;
      case kEncDataRel: return data_base + value;
      default: ok = false; return 0;
    }
  }
};

// What the call-frame instructions say about the registers a walk needs.
struct RegisterRule {
  enum Kind : std::uint8_t { same, saved_at_offset, undefined, other } kind = same;
  std::int64_t offset = 0;  // from the CFA, for saved_at_offset
};

struct Row {
  std::uint64_t cfa_register = kRsp;
  std::int64_t cfa_offset = 8;
  bool cfa_is_expression = false;
  RegisterRule rbp;
  RegisterRule return_address;
};

struct Cie {
  std::uint64_t code_align = 1;
  std::int64_t data_align = -8;
  std::uint8_t fde_encoding = 0;  // absptr unless 'R' says otherwise
  bool has_augmentation_data = false;
  bool signal_frame = false;
  const std::uint8_t* instructions = nullptr;
  const std::uint8_t* end = nullptr;
};

// A record's start: its length (32-bit, or 0xffffffff then 64-bit) and the
// end it implies.
bool open_cfi_record(const std::uint8_t* at, Reader& body) {
  Reader r{at, at + 12};
  std::uint64_t length = r.fixed<std::uint32_t>();
  if (length == 0xffffffffu) length = r.fixed<std::uint64_t>();
  if (!r.ok || length == 0 || length > (std::uint64_t{1} << 32)) return false;
  body = Reader{r.p, r.p + length};
  return true;
}

bool parse_cie(const std::uint8_t* at, Cie& cie) {
  Reader r{nullptr, nullptr};
  if (!open_cfi_record(at, r)) return false;
  if (r.fixed<std::uint32_t>() != 0) return false;  // CIE id in .eh_frame
  const std::uint8_t version = r.fixed<std::uint8_t>();
  if (version != 1 && version != 3) return false;
  const char* augmentation = reinterpret_cast<const char*>(r.p);
  const std::size_t augmentation_length = ::strnlen(augmentation, static_cast<std::size_t>(r.end - r.p));
  if (!r.has(augmentation_length + 1)) return false;
  r.p += augmentation_length + 1;
  if (augmentation[0] == 'e' && augmentation[1] == 'h') r.fixed<std::uint64_t>();  // old GCC "eh" pointer
  cie.code_align = r.uleb();
  cie.data_align = r.sleb();
  const std::uint64_t return_register = version == 1 ? r.fixed<std::uint8_t>() : r.uleb();
  if (return_register != kReturnAddress) return false;
  if (augmentation[0] == 'z') {
    cie.has_augmentation_data = true;
    const std::uint64_t length = r.uleb();
    Reader data{r.p, r.p + length};
    if (!r.has(length)) return false;
    r.p += length;
    for (const char* c = augmentation + 1; *c != '\0'; ++c) {
      switch (*c) {
        case 'R': cie.fde_encoding = data.fixed<std::uint8_t>(); break;
        case 'L': data.fixed<std::uint8_t>(); break;  // LSDA encoding: an FDE's, skipped there
        case 'P': {
          const std::uint8_t encoding = data.fixed<std::uint8_t>();
          data.pointer(static_cast<std::uint8_t>(encoding & 0x7f), 0);
          break;
        }
        case 'S': cie.signal_frame = true; break;
        case 'B': break;  // AArch64 pointer authentication: carries no data
        default: return false;  // an unknown letter: its data cannot be skipped
      }
    }
    if (!data.ok) return false;
  } else if (augmentation[0] != '\0') {
    return false;
  }
  cie.instructions = r.p;
  cie.end = r.end;
  return r.ok;
}

// Runs call-frame instructions until the row that covers `target` is built.
// `loc` starts at the FDE's first address; `initial` is the CIE's row, which
// DW_CFA_restore returns to.
class Interpreter {
 public:
  Interpreter(const Cie& cie, std::uintptr_t target) : cie_(cie), target_(target) {}

  // False when an instruction is malformed or one this reader does not take.
  bool run(Reader r, std::uintptr_t& loc, Row& row, const Row& initial) {
    while (r.p < r.end && r.ok) {
      const std::uint8_t op = r.fixed<std::uint8_t>();
      const std::uint8_t operand = op & 0x3f;
      switch (op & 0xc0) {
        case 0x40:  // DW_CFA_advance_loc
          if (!advance(loc, operand)) return true;
          continue;
        case 0x80:  // DW_CFA_offset
          set(row, operand, RegisterRule{RegisterRule::saved_at_offset,
                                         static_cast<std::int64_t>(r.uleb()) * cie_.data_align});
          continue;
        case 0xc0:  // DW_CFA_restore
          restore(row, initial, operand);
          continue;
        default: break;
      }
      switch (op) {
        case 0x00: break;  // DW_CFA_nop
        case 0x01:         // DW_CFA_set_loc
          loc = r.pointer(cie_.fde_encoding, 0);
          if (loc > target_) return true;
          break;
        case 0x02: if (!advance(loc, r.fixed<std::uint8_t>())) return true; break;
        case 0x03: if (!advance(loc, r.fixed<std::uint16_t>())) return true; break;
        case 0x04: if (!advance(loc, r.fixed<std::uint32_t>())) return true; break;
        case 0x05: {  // DW_CFA_offset_extended
          const std::uint64_t reg = r.uleb();
          set(row, reg, {RegisterRule::saved_at_offset, static_cast<std::int64_t>(r.uleb()) * cie_.data_align});
          break;
        }
        case 0x06: restore(row, initial, r.uleb()); break;                            // restore_extended
        case 0x07: set(row, r.uleb(), {RegisterRule::undefined, 0}); break;           // undefined
        case 0x08: set(row, r.uleb(), {RegisterRule::same, 0}); break;                // same_value
        case 0x09: set(row, r.uleb(), {RegisterRule::other, 0}); r.uleb(); break;     // register
        case 0x0a:                                                                     // remember_state
          if (saved_count_ == kStateDepth) return false;
          saved_[saved_count_++] = row;
          break;
        case 0x0b:  // DW_CFA_restore_state: the CFA rule too, as GCC's epilogues
                    // (remember; def_cfa_offset 8; ret; restore) and libgcc expect
          if (saved_count_ == 0) return false;
          row = saved_[--saved_count_];
          break;
        case 0x0c:  // DW_CFA_def_cfa
          row.cfa_register = r.uleb();
          row.cfa_offset = static_cast<std::int64_t>(r.uleb());
          row.cfa_is_expression = false;
          break;
        case 0x0d: row.cfa_register = r.uleb(); row.cfa_is_expression = false; break;
        case 0x0e: row.cfa_offset = static_cast<std::int64_t>(r.uleb()); break;
        case 0x0f:  // DW_CFA_def_cfa_expression
          row.cfa_is_expression = true;
          skip_block(r);
          break;
        case 0x10:  // DW_CFA_expression
        case 0x16:  // DW_CFA_val_expression
          set(row, r.uleb(), {RegisterRule::other, 0});
          skip_block(r);
          break;
        case 0x11: {  // DW_CFA_offset_extended_sf
          const std::uint64_t reg = r.uleb();
          set(row, reg, {RegisterRule::saved_at_offset, r.sleb() * cie_.data_align});
          break;
        }
        case 0x12:  // DW_CFA_def_cfa_sf
          row.cfa_register = r.uleb();
          row.cfa_offset = r.sleb() * cie_.data_align;
          row.cfa_is_expression = false;
          break;
        case 0x13: row.cfa_offset = r.sleb() * cie_.data_align; break;  // def_cfa_offset_sf
        case 0x14:                                                        // val_offset
          set(row, r.uleb(), {RegisterRule::other, 0});
          r.uleb();
          break;
        case 0x15:  // DW_CFA_val_offset_sf
          set(row, r.uleb(), {RegisterRule::other, 0});
          r.sleb();
          break;
        case 0x2e: r.uleb(); break;  // DW_CFA_GNU_args_size: for landing pads only
        case 0x2f: {                 // DW_CFA_GNU_negative_offset_extended
          const std::uint64_t reg = r.uleb();
          set(row, reg, {RegisterRule::saved_at_offset, -static_cast<std::int64_t>(r.uleb()) * cie_.data_align});
          break;
        }
        default: return false;
      }
    }
    return r.ok;
  }

 private:
  static constexpr int kStateDepth = 8;

  // False once the row for target_ is complete (the next row starts after it).
  bool advance(std::uintptr_t& loc, std::uint64_t delta) {
    const std::uintptr_t next = loc + delta * cie_.code_align;
    if (next > target_) return false;
    loc = next;
    return true;
  }
  static void set(Row& row, std::uint64_t reg, RegisterRule rule) {
    if (reg == kRbp) row.rbp = rule;
    if (reg == kReturnAddress) row.return_address = rule;
  }
  static void restore(Row& row, const Row& initial, std::uint64_t reg) {
    if (reg == kRbp) row.rbp = initial.rbp;
    if (reg == kReturnAddress) row.return_address = initial.return_address;
  }
  static void skip_block(Reader& r) {
    const std::uint64_t length = r.uleb();
    if (r.has(length)) r.p += length;
  }

  const Cie& cie_;
  const std::uintptr_t target_;
  Row saved_[kStateDepth];
  int saved_count_ = 0;
};

FrameRule rule_from_row(const Row& row) {
  if (row.return_address.kind == RegisterRule::undefined) return FrameRule{.kind = RuleKind::outermost};
  const bool cfa_ok = !row.cfa_is_expression && (row.cfa_register == kRsp || row.cfa_register == kRbp) &&
                      row.cfa_offset >= std::numeric_limits<std::int32_t>::min() &&
                      row.cfa_offset <= std::numeric_limits<std::int32_t>::max();
  const bool return_address_ok =
      row.return_address.kind == RegisterRule::saved_at_offset && row.return_address.offset == -8;
  const bool rbp_ok = row.rbp.kind == RegisterRule::same || row.rbp.kind == RegisterRule::undefined ||
                      (row.rbp.kind == RegisterRule::saved_at_offset && row.rbp.offset >= INT16_MIN &&
                       row.rbp.offset <= INT16_MAX);
  if (!cfa_ok || !return_address_ok || !rbp_ok) return FrameRule::unsupported_rule();
  FrameRule rule{.kind = RuleKind::frame};
  rule.cfa_from_rbp = row.cfa_register == kRbp;
  rule.cfa_offset = static_cast<std::int32_t>(row.cfa_offset);
  rule.rbp_saved = row.rbp.kind == RegisterRule::saved_at_offset;
  rule.rbp_offset = static_cast<std::int16_t>(row.rbp.offset);
  return rule;
}

// The FDE covering `address`, by binary search in the header's sorted table
// (entries: initial location, FDE address; both relative to the header).
const std::uint8_t* find_fde(const std::uint8_t* hdr, std::uintptr_t address) {
  Reader r{hdr, hdr + 4};
  if (r.fixed<std::uint8_t>() != 1) return nullptr;
  const std::uint8_t frame_pointer_encoding = r.fixed<std::uint8_t>();
  const std::uint8_t count_encoding = r.fixed<std::uint8_t>();
  const std::uint8_t table_encoding = r.fixed<std::uint8_t>();
  if (frame_pointer_encoding == kEncOmit || count_encoding == kEncOmit || table_encoding != kEncDataRelSdata4) {
    return nullptr;
  }
  const auto base = reinterpret_cast<std::uintptr_t>(hdr);
  r.end = r.p + 20;  // room for the two encoded values that follow (at most 10 bytes each)
  r.pointer(frame_pointer_encoding, base);
  const std::uint64_t count = r.pointer(count_encoding, base);
  if (!r.ok || count == 0) return nullptr;
  const auto* table = r.p;
  auto entry = [&](std::uint64_t i, int field) {
    std::int32_t value;
    std::memcpy(&value, table + i * 8 + static_cast<std::uint64_t>(field) * 4, 4);
    return base + static_cast<std::uintptr_t>(static_cast<std::intptr_t>(value));
  };
  std::uint64_t low = 0, high = count;  // the answer is the last entry starting at or before address
  while (high - low > 1) {
    const std::uint64_t mid = low + (high - low) / 2;
    if (entry(mid, 0) <= address) {
      low = mid;
    } else {
      high = mid;
    }
  }
  if (entry(low, 0) > address) return nullptr;
  return reinterpret_cast<const std::uint8_t*>(entry(low, 1));
}

using FindObject = int (*)(void*, struct dl_find_object*);

FindObject find_object() {
  // Looked up, not linked: a library built on glibc ≥ 2.35 still loads on an
  // older one, where the walker simply stays off.
  static const FindObject fn = reinterpret_cast<FindObject>(::dlsym(RTLD_DEFAULT, "_dl_find_object"));
  return fn;
}

}  // namespace

FrameRule rule_from_eh_frame_hdr(const std::uint8_t* hdr, std::uintptr_t address) {
  const std::uint8_t* fde_at = hdr ? find_fde(hdr, address) : nullptr;
  Reader fde{nullptr, nullptr};
  if (fde_at == nullptr || !open_cfi_record(fde_at, fde)) return FrameRule::unsupported_rule();
  const std::uint8_t* cie_pointer_field = fde.p;
  const std::uint32_t cie_offset = fde.fixed<std::uint32_t>();
  Cie cie;
  if (cie_offset == 0 || !parse_cie(cie_pointer_field - cie_offset, cie) || cie.signal_frame) {
    return FrameRule::unsupported_rule();
  }
  const std::uintptr_t begin = fde.pointer(cie.fde_encoding, 0);
  const std::uint64_t range = fde.formatted(cie.fde_encoding);
  if (!fde.ok || address < begin || address - begin >= range) return FrameRule::unsupported_rule();
  if (cie.has_augmentation_data) {
    const std::uint64_t length = fde.uleb();
    if (!fde.has(length)) return FrameRule::unsupported_rule();
    fde.p += length;
  }
  Interpreter interpreter(cie, address);
  Row initial;
  std::uintptr_t loc = begin;
  if (!interpreter.run(Reader{cie.instructions, cie.end}, loc, initial, initial)) return FrameRule::unsupported_rule();
  Row row = initial;
  loc = begin;
  if (!interpreter.run(fde, loc, row, initial)) return FrameRule::unsupported_rule();
  return rule_from_row(row);
}

bool available() { return find_object() != nullptr; }

FrameRule rule_for(std::uintptr_t address) {
  const FindObject find = find_object();
  struct dl_find_object object;
  if (find == nullptr || find(reinterpret_cast<void*>(address), &object) != 0) return FrameRule::unsupported_rule();
  return rule_from_eh_frame_hdr(static_cast<const std::uint8_t*>(object.dlfo_eh_frame), address);
}

}  // namespace cumemtrace::preload::cfi
