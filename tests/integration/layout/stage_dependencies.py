#!/usr/bin/env python3
"""Checks that the stages of preload/, contract/ and analyzer/ call each other
only in the pipeline's direction (preload/README.md, analyzer/README.md,
contract/README.md), and that no source tree includes a header of a tree it
must not reach into (the analyzer one of preload/, say).

Each stage is a static library. Every symbol a stage's objects leave undefined
and another stage defines (a strong definition: T, D, B or R; inline
functions and template instantiations are weak in every object that uses
them) must come from a stage it may use, directly or through one it may use.
The link does not catch them: every stage is on the `cumemtrace` link line,
and a symbol another object pulled in resolves whatever the order (a call from
analyze/ to a function of render/ linked without a word).

Headers leave no symbol (a struct, an inline function), so the includes are
checked too: each #include of a file under a --tree is looked up beside the
file, then under every tree's include roots; one that names a header of a
tree it may not include (and none of a tree it may) is a violation, whatever
include directories the build gives it.

  stage_dependencies.py --nm NM --allow STAGE=DEP,DEP ... \
      [--tree TREE=ROOT[:ROOT...] ... --may-include TREE=TREE,TREE ...] STAGE=ARCHIVE ...
"""
import argparse
import os
import re
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


INCLUDE = re.compile(r'^\s*#\s*include\s*["<]([^">]+)[">]', re.MULTILINE)
SOURCE_SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp")


def include_violations(trees, may_include):
    """Includes of a header in a tree the including tree may not include.

    trees: name -> include roots (the first is the tree's folder, whose
    sources are read); may_include: name -> the trees it may include besides
    itself.
    """
    roots = [(name, os.path.realpath(root)) for name, rs in trees.items() for root in rs]

    def tree_of(path):
        # The innermost root holding `path` (analyzer/include is analyzer's).
        best = None
        for name, root in roots:
            if path.startswith(root + os.sep) and (best is None or len(root) > len(best[1])):
                best = (name, root)
        return best[0] if best else None

    violations, checked = [], 0
    for name, rs in trees.items():
        allowed = {name} | may_include.get(name, set())
        for folder, _, files in os.walk(rs[0]):
            for file in sorted(files):
                if not file.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(folder, file)
                with open(path, encoding="utf-8", errors="replace") as f:
                    text = f.read()
                for included in INCLUDE.findall(text):
                    candidates = [os.path.join(folder, included)] + [os.path.join(r, included) for _, r in roots]
                    owners = {tree_of(os.path.realpath(c)) for c in candidates if os.path.isfile(c)}
                    owners.discard(None)
                    if not owners:
                        continue  # the system's, or generated
                    checked += 1
                    if not owners & allowed:
                        where = os.path.relpath(path, os.path.dirname(rs[0]))
                        violations.append(f"{where} includes \"{included}\", a header of "
                                          f"{', '.join(sorted(owners))}; {name} may include: "
                                          f"{', '.join(sorted(allowed))}")
    return violations, checked


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nm", default="nm")
    parser.add_argument("--allow", action="append", default=[], metavar="STAGE=DEP,DEP")
    parser.add_argument("--tree", action="append", default=[], metavar="TREE=ROOT[:ROOT...]")
    parser.add_argument("--may-include", action="append", default=[], metavar="TREE=TREE,TREE")
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

    trees = {}
    for spec in args.tree:
        name, _, roots = spec.partition("=")
        trees[name] = roots.split(":")
    may_include = {}
    for spec in args.may_include:
        name, _, others = spec.partition("=")
        may_include[name] = {t for t in others.split(",") if t}
    unknown = set(may_include) - set(trees) | {t for ts in may_include.values() for t in ts} - set(trees)
    if unknown:
        sys.exit(f"stage_dependencies: no --tree for {', '.join(sorted(unknown))}")
    bad_includes, includes = include_violations(trees, may_include)
    for v in bad_includes:
        print(v)
    if trees:
        print(f"{len(trees)} trees, {includes} includes of their headers, {len(bad_includes)} into a tree "
              "they may not include")
    return 1 if violations or bad_includes else 0


if __name__ == "__main__":
    sys.exit(main())
