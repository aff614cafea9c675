#!/usr/bin/env python3
"""Fails when the toolkit's library exports a function the sim's lacks, or
the sim's exports one the toolkit's does not.

Usage: check_surface.py NM TOOLKIT_LIB SIM_LIB [--sim-only NAME...]

Compares the defined dynamic symbols, with their symbol versions
(cudaMalloc@@libcudart.so.13; the driver's are unversioned), of the toolkit's
library and of the sim's drop-in. Every toolkit export must be in the sim
under the same version, or a client binding it (a program linked against the
toolkit's library, ctypes, dlsym) fails on the sim before it does anything.
And the sim exports nothing else but the sim-only extensions named with
--sim-only (simcuda_counters, documented in tests/sim/README.md): anything
more would be a name a program could come to depend on that no GPU has.
"""

import subprocess
import sys


def exports(nm, path):
    out = subprocess.run([nm, "-D", "--defined-only", path], check=True,
                         capture_output=True, text=True).stdout
    found = {}
    for line in out.splitlines():
        fields = line.split()
        if len(fields) != 3 or fields[1] == "A":  # "A": the version node itself
            continue
        name, _, version = fields[2].partition("@")
        found[name] = version.lstrip("@")
    return found


def main():
    args = sys.argv[1:]
    sim_only = set()
    if "--sim-only" in args:
        at = args.index("--sim-only")
        sim_only = set(args[at + 1:])
        args = args[:at]
    if len(args) != 3:
        sys.exit(__doc__)
    nm, toolkit_lib, sim_lib = args
    toolkit, sim = exports(nm, toolkit_lib), exports(nm, sim_lib)
    missing = sorted(n for n in toolkit if n not in sim)
    versions = sorted(f"{n} (toolkit @{toolkit[n] or 'none'}, sim @{sim[n] or 'none'})"
                      for n in toolkit if n in sim and sim[n] != toolkit[n])
    extra = sorted(n for n in sim if n not in toolkit and n not in sim_only)
    absent = sorted(n for n in sim_only if n not in sim)
    print(f"{toolkit_lib}: {len(toolkit)} functions; {sim_lib}: {len(sim)}"
          f" ({len(sim_only)} sim-only allowed)")
    if missing:
        print(f"missing from the sim ({len(missing)}): {' '.join(missing)}")
    if versions:
        print(f"under another symbol version ({len(versions)}): {'; '.join(versions)}")
    if extra:
        print(f"exported by the sim only, not allowed ({len(extra)}): {' '.join(extra)}")
    if absent:
        print(f"allowed sim-only exports the sim lacks ({len(absent)}): {' '.join(absent)}")
    sys.exit(1 if missing or versions or extra or absent else 0)


if __name__ == "__main__":
    main()
