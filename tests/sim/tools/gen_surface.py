#!/usr/bin/env python3
"""Generates the simulated device's whole export surface from the toolkit.

The sim's libcuda.so.1 must export every function the toolkit's
stubs/libcuda.so exports, and its libcudart.so.13 every function of the
toolkit's libcudart.so.13 (issue 20): a client that resolves a function the
sim lacks fails before it ever allocates, and then nothing of it is tested.
The lists come from the toolkit's libraries at build time, never from a hand
list, so a new toolkit's functions appear here by themselves.

For each exported name the sim's own sources do not define (read from the
compiled objects with nm), this writes a stub that answers the documented
"not supported" code through sim::unsupported_call / rt::unsupported_call
(CUDA_ERROR_NOT_SUPPORTED; cudaErrorNotSupported with the runtime's
last-error rule). For the driver it also writes cuGetProcAddress's table:
every exported function with the CUDA version that introduced its ABI, taken
from the PFN_<name>_v<version>[_ptsz|_ptds] typedefs of cudaTypedefs.h and
its siblings. A base name's symbols (cuMemAlloc, cuMemAlloc_v2, ...) pair in
order with its typedef versions (v2000, v3020, ...); the per-thread
(_ptsz/_ptds) symbols pair the same way with the per-thread typedefs and
attach to the ABI symbol they extend. The generator fails the build when a
pairing does not line up, or when a runtime function it would have to stub
does not return cudaError_t, void or a pointer (such a function must be
written by hand: a stub would return garbage).

Usage: gen_surface.py --kind driver|runtime --toolkit-lib LIB --include DIR
                      --nm NM --out FILE.cpp --objects OBJ...
"""

import argparse
import collections
import os
import re
import subprocess
import sys

PT_SUFFIX = re.compile(r"_pt[sd][zs]$")
NAME_PARTS = re.compile(r"^(\w+?)(_v(\d+))?(_pt[sd][zs])?$")
DRIVER_TYPEDEF_HEADERS = ["cudaTypedefs.h", "cudaEGLTypedefs.h", "cudaGLTypedefs.h",
                          "cudaProfilerTypedefs.h", "cudaVDPAUTypedefs.h"]
RUNTIME_HEADERS = ["cuda_runtime_api.h", "crt/host_runtime.h", "cuda_profiler_api.h",
                   "cuda_gl_interop.h", "cuda_egl_interop.h", "cuda_vdpau_interop.h",
                   "channel_descriptor.h"]


def fail(message):
    sys.exit(f"gen_surface.py: {message}")


def exported_names(nm, path, prefixes):
    """Defined dynamic symbols of a shared library, without @version."""
    out = subprocess.run([nm, "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    names = set()
    for line in out.splitlines():
        fields = line.split()
        if len(fields) == 3 and fields[1] in "TtWiu":
            name = fields[2].split("@")[0]
            if name.startswith(prefixes):
                names.add(name)
    return names


def defined_in_objects(nm, objects, prefixes):
    names = set()
    for obj in objects:
        out = subprocess.run([nm, "--defined-only", "-g", obj], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] in "TW" and fields[2].startswith(prefixes):
                names.add(fields[2])
    return names


def base_name(name):
    return NAME_PARTS.match(name).group(1)


def abi_rank(name):
    """cuFoo < cuFoo_v2 < cuFoo_v3 (the order their ABIs were introduced)."""
    m = NAME_PARTS.match(PT_SUFFIX.sub("", name))
    return int(m.group(3)) if m.group(3) else 1


def proc_table(names, include_dir):
    text = "".join(open(os.path.join(include_dir, h)).read()
                   for h in DRIVER_TYPEDEF_HEADERS
                   if os.path.exists(os.path.join(include_dir, h)))
    versions = collections.defaultdict(lambda: ([], []))  # base -> (abi, per-thread)
    for base, version, pt in set(re.findall(
            r"\(CUDAAPI \*PFN_(\w+?)_v(\d+)(_pt[sd][zs])?\)", text)):
        versions[base][1 if pt else 0].append(int(version))
    by_base = collections.defaultdict(list)
    for n in names:
        by_base[base_name(n)].append(n)
    rows = []  # (base, version, symbol, pt_symbol or None, pt_version)
    for base in sorted(by_base):
        if base not in versions:
            fail(f"{base} is exported but no PFN_{base}_v* typedef gives its version")
        abi_versions, pt_versions = (sorted(v) for v in versions[base])
        plain = sorted((n for n in by_base[base] if not PT_SUFFIX.search(n)), key=abi_rank)
        per_thread = sorted((n for n in by_base[base] if PT_SUFFIX.search(n)), key=abi_rank)
        if len(plain) != len(abi_versions) or len(per_thread) != len(pt_versions):
            fail(f"cannot pair {base}'s symbols {plain + per_thread} with its typedef "
                 f"versions {abi_versions} / per-thread {pt_versions}")
        twins = {PT_SUFFIX.sub("", p): (p, v) for p, v in zip(per_thread, pt_versions)}
        for symbol, version in zip(plain, abi_versions):
            pt_symbol, pt_version = twins.pop(symbol, (None, 0))
            rows.append((base, version, symbol, pt_symbol, pt_version))
        if twins:
            fail(f"per-thread symbols {sorted(twins)} of {base} extend no exported ABI")
    return rows


def runtime_return_kinds(include_dir):
    """Name -> 'error' | 'void' | 'pointer' | declared type, from the headers."""
    kinds = {}
    qualifiers = {"extern", '"C"', "__host__", "__device__", "__cudart_builtin__", "CUDARTAPI",
                  "static", "inline", "__inline__", "CUDART_CB", "__dv", "const", "struct"}
    for header in RUNTIME_HEADERS:
        path = os.path.join(include_dir, header)
        if not os.path.exists(path):
            continue
        text = open(path, errors="replace").read()
        text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
        text = re.sub(r"//[^\n]*|^\s*#[^\n]*", " ", text, flags=re.M)
        for statement in re.split(r"[;{}]", text):
            m = re.search(r"\b(__cuda\w+|cuda\w+)\s*\(", statement)
            if not m or m.group(1) in kinds:
                continue
            prefix = re.sub(r"__CUDA_DEPRECATED|__cudart_builtin__|CUDART_DEPRECATED"
                            r"|__attribute__\s*\(\(.*?\)\)|\[\[.*?\]\]", " ", statement[:m.start()])
            words = [w for w in re.findall(r'[\w"]+|\*', prefix) if w not in qualifiers]
            if not words:
                continue
            if "*" in words:
                kinds[m.group(1)] = "pointer"
            elif words[-1] == "cudaError_t":
                kinds[m.group(1)] = "error"
            elif words[-1] == "void":
                kinds[m.group(1)] = "void"
            else:
                kinds[m.group(1)] = " ".join(words)
    return kinds


def write_if_changed(path, content):
    if os.path.exists(path) and open(path).read() == content:
        return
    with open(path + ".tmp", "w") as f:
        f.write(content)
    os.replace(path + ".tmp", path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kind", choices=["driver", "runtime"], required=True)
    ap.add_argument("--toolkit-lib", required=True)
    ap.add_argument("--include", required=True)
    ap.add_argument("--nm", default="nm")
    ap.add_argument("--out", required=True)
    ap.add_argument("--objects", nargs="+", required=True)
    args = ap.parse_args()

    prefixes = ("cu",) if args.kind == "driver" else ("cuda", "__cuda")
    toolkit = exported_names(args.nm, args.toolkit_lib, prefixes)
    if not toolkit:
        fail(f"{args.toolkit_lib} exports no {prefixes[0]}* function")
    modelled = defined_in_objects(args.nm, args.objects, prefixes)
    missing = sorted(toolkit - modelled)

    lines = [f"// Generated by tests/sim/tools/gen_surface.py from {args.toolkit_lib}",
             f"// ({len(toolkit)} exported functions, {len(toolkit & modelled)} modelled by the",
             f"// sim's sources, {len(missing)} answered as not supported). Do not edit.",
             '#include "sim_surface.h"', "",
             '#define SIM_EXPORT extern "C" __attribute__((visibility("default")))', ""]
    if args.kind == "driver":
        rows = proc_table(toolkit | modelled, args.include)
        lines.append("// Stubs: CUDA_ERROR_NOT_INITIALIZED before cuInit, then "
                     "CUDA_ERROR_NOT_SUPPORTED.")
        for name in missing:
            lines.append(f'SIM_EXPORT int {name}() {{ return sim::unsupported_call("{name}"); }}')
        lines.append("")
        lines.append("// Modelled functions, declared only to take their addresses.")
        for name in sorted(set(r[2] for r in rows) | set(r[3] for r in rows if r[3])):
            if name not in missing:
                lines.append(f'extern "C" void {name}();')
        lines.append("")
        lines.append("const sim::ProcRow sim::kProcTable[] = {")
        for base, version, symbol, pt_symbol, pt_version in rows:
            pt = f"reinterpret_cast<void*>(&{pt_symbol})" if pt_symbol else "nullptr"
            lines.append(f'    {{"{base}", {version}, reinterpret_cast<void*>(&{symbol}), '
                         f"{pt}, {pt_version}}},")
        lines.append("};")
        lines.append(f"const unsigned sim::kProcTableSize = {len(rows)};")
    else:
        kinds = runtime_return_kinds(args.include)
        lines.append("// Stubs: cudaErrorNotSupported, recorded as the thread's last error.")
        by_hand = [f"{n} ({kinds.get(PT_SUFFIX.sub('', n)) or kinds.get(n) or 'undeclared'})"
                   for n in missing
                   if (kinds.get(PT_SUFFIX.sub("", n)) or kinds.get(n)) not in
                   ("error", "void", "pointer")]
        if by_hand:
            fail("these return what a generated stub cannot; write them by hand in "
                 "tests/sim/runtime: " + ", ".join(by_hand))
        for name in missing:
            kind = kinds.get(PT_SUFFIX.sub("", name)) or kinds.get(name)
            if kind == "error":
                lines.append(f'SIM_EXPORT int {name}() {{ return rt::unsupported_call("{name}"); }}')
            elif kind == "void":
                lines.append(f'SIM_EXPORT void {name}() {{ rt::unsupported_call("{name}"); }}')
            elif kind == "pointer":
                lines.append(f'SIM_EXPORT void* {name}() {{ rt::unsupported_call("{name}"); '
                             "return nullptr; }")
            else:
                fail(f"{name} returns {kind or 'an undeclared type'}: write it by hand in "
                     "tests/sim/runtime (a generated stub cannot return that)")
    write_if_changed(args.out, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
