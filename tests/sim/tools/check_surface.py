#!/usr/bin/env python3
"""Fails when the toolkit's library exports a function the sim's lacks.

Usage: check_surface.py NM TOOLKIT_LIB SIM_LIB

Compares the defined dynamic symbols, with their symbol versions
(cudaMalloc@@libcudart.so.13; the driver's are unversioned), of the toolkit's
library and of the sim's drop-in. Every toolkit export must be in the sim
under the same version, or a client binding it (a program linked against the
toolkit's library, ctypes, dlsym) fails on the sim before it does anything.
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
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    nm, toolkit_lib, sim_lib = sys.argv[1:]
    toolkit, sim = exports(nm, toolkit_lib), exports(nm, sim_lib)
    missing = sorted(n for n in toolkit if n not in sim)
    versions = sorted(f"{n} (toolkit @{toolkit[n] or 'none'}, sim @{sim[n] or 'none'})"
                      for n in toolkit if n in sim and sim[n] != toolkit[n])
    print(f"{toolkit_lib}: {len(toolkit)} functions; {sim_lib}: {len(sim)}")
    if missing:
        print(f"missing from the sim ({len(missing)}): {' '.join(missing)}")
    if versions:
        print(f"under another symbol version ({len(versions)}): {'; '.join(versions)}")
    sys.exit(1 if missing or versions else 0)


if __name__ == "__main__":
    main()
