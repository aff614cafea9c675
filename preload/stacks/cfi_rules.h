// The unwind rule in force at one code address, read from the call-frame
// information (.eh_frame) its object carries: the same tables libunwind and
// libgcc interpret, described in the System V x86-64 psABI §3.7 and the
// LSB's "Exception Frames" chapter (.eh_frame, .eh_frame_hdr, pointer
// encodings), with the DWARF 5 §6.4 call-frame instructions.
//
// Only the shapes compilers emit for ordinary x86-64 functions are taken:
// the canonical frame address (CFA) is rsp or rbp plus a constant, the
// return address is saved at CFA − 8, and rbp is either unchanged or saved
// at CFA plus a constant. Anything else (signal frames, DWARF expressions,
// stack realignment through another register) is `unsupported`, and the
// walker hands that stack to libunwind, which handles every shape.
#pragma once

#include <cstdint>

namespace cumemtrace::preload::cfi {

enum class RuleKind : std::uint8_t {
  unknown = 0,      // never stored: a packed rule of 0 means "not computed"
  frame = 1,        // an ordinary frame: the fields below say how to leave it
  outermost = 2,    // the return address is undefined: the stack ends here
  unsupported = 3,  // no CFI, or a shape this reader does not take
};

struct FrameRule {
  RuleKind kind = RuleKind::unknown;
  bool cfa_from_rbp = false;     // CFA = (cfa_from_rbp ? rbp : rsp) + cfa_offset
  bool rbp_saved = false;        // the caller's rbp is at CFA + rbp_offset
  std::int16_t rbp_offset = 0;
  std::int32_t cfa_offset = 0;

  // One word, so a cache slot can be published with a single atomic store;
  // never 0 for a computed rule. Inline: unpacked at every frame walked.
  std::uint64_t pack() const {
    return std::uint64_t{static_cast<std::uint8_t>(kind)} | std::uint64_t{cfa_from_rbp} << 2 |
           std::uint64_t{rbp_saved} << 3 | std::uint64_t{static_cast<std::uint16_t>(rbp_offset)} << 16 |
           std::uint64_t{static_cast<std::uint32_t>(cfa_offset)} << 32;
  }
  static FrameRule unpack(std::uint64_t word) {
    FrameRule rule;
    rule.kind = static_cast<RuleKind>(word & 3);
    rule.cfa_from_rbp = (word >> 2) & 1;
    rule.rbp_saved = (word >> 3) & 1;
    rule.rbp_offset = static_cast<std::int16_t>(static_cast<std::uint16_t>(word >> 16));
    rule.cfa_offset = static_cast<std::int32_t>(static_cast<std::uint32_t>(word >> 32));
    return rule;
  }

  static FrameRule unsupported_rule() { return FrameRule{.kind = RuleKind::unsupported}; }
};

// The rule at `address`: the innermost frame's exact pc, or a return address
// minus one (the call instruction, which a noreturn call may leave as the
// last byte of its function). Finds the object with glibc's _dl_find_object
// (lock-free, no allocation); false from available() when this glibc lacks
// it (before 2.35), and then every rule is unsupported.
FrameRule rule_for(std::uintptr_t address);
bool available();

// The same, from an object's .eh_frame_hdr: exposed for tests.
FrameRule rule_from_eh_frame_hdr(const std::uint8_t* eh_frame_hdr, std::uintptr_t address);

}  // namespace cumemtrace::preload::cfi
