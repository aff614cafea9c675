#!/usr/bin/env python3
"""Checks that the stages of preload/ and analyzer/ call each other only in
the pipeline's direction (preload/README.md, analyzer/README.md).

Each stage is a static library. Every symbol a stage's objects leave undefined
and another stage defines (a strong definition: T, D, B or R; inline
functions and template instantiations are weak in every object that uses
them) must come from a stage it may use, directly or through one it may use.
The link does not catch them: every stage is on the `cumemtrace` link line,
and a symbol another object pulled in resolves whatever the order (a call from
analyze/ to a function of render/ linked without a word).

  stage_dependencies.py --nm NM --allow STAGE=DEP,DEP ... STAGE=ARCHIVE ...
"""
import argparse
import subprocess
import sys


def symbols(nm, archive, undefined):
    args = [nm, "--format=posix", "--no-sort"]
    args += ["--undefined-only"] if undefined else ["--defined-only", "--extern-only"]
    out = subprocess.run(args + [archive], check=True, capture_output=True, text=True).stdout
    member = None
    for line in out.splitlines():
        if line.endswith(":") and "[" in line:  # "lib.a[member.o]:"
            member = line[line.index("[") + 1:-2]
            continue
        parts = line.split()
        if len(parts) >= 2:
            yield member, parts[0], parts[1]


def demangle(text):
    try:
        return subprocess.run(["c++filt"], input=text, check=True, capture_output=True, text=True).stdout.rstrip("\n")
    except (OSError, subprocess.CalledProcessError):
        return text


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--allow", action="append", default=[], metavar="STAGE=DEP,DEP")
    parser.add_argument("stages", nargs="+", metavar="STAGE=ARCHIVE")
    args = parser.parse_args()

    allowed = {}
    for spec in args.allow:
        stage, _, deps = spec.partition("=")
        allowed[stage] = {d for d in deps.split(",") if d}
    archives = dict(spec.partition("=")[::2] for spec in args.stages)
    unknown = set(archives) - set(allowed)
    if unknown:
        sys.exit(f"stage_dependencies: no --allow for {', '.join(sorted(unknown))}")

    def reachable(stage):
        seen, todo = set(), [stage]
        while todo:
            for dep in allowed.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    defined_by = {}
    for stage, archive in archives.items():
        for _, name, kind in symbols(args.nm, archive, undefined=False):
            if kind in "TDBR":
                defined_by.setdefault(name, set()).add(stage)

    violations = []
    checked = 0
    for stage, archive in archives.items():
        may_use = reachable(stage)
        for member, name, _ in symbols(args.nm, archive, undefined=True):
            for owner in defined_by.get(name, ()):
                if owner == stage:
                    continue
                checked += 1
                if owner not in may_use:
                    violations.append(f"{stage} ({member}) uses {name}, defined in {owner}; "
                                      f"{stage} may use: {', '.join(sorted(may_use)) or 'nothing'}")
    for v in sorted(set(violations)):
        print(demangle(v))
    print(f"{len(archives)} stages, {checked} calls across stages, {len(set(violations))} against the flow")
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
