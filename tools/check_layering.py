#!/usr/bin/env python3
"""Checks that the code follows the layering of docs/architecture.md.

The table between the `layers:table` markers of docs/architecture.md is the source of truth:
one row per component (a folder), its layer (0 = bottom) and the components it may include,
each name in backticks. This script fails when

- a file of a component includes a header (`#include "reft/..."` or a relative path that leaves
  the folder) of a component that is neither itself nor listed as allowed;
- a component may include one on the same or a higher layer (an arrow that does not point down);
- a folder with sources is in no component, or a component in the table does not exist;
- a daemon component keeps a header in its include/ that no other component includes, directly
  or through another of its public headers (private headers live beside the sources, in src/);
- the picture between the `layers:picture` markers is not the one drawn from the table
  (`--write` redraws it).

Usage: check_layering.py [--root DIR] [--write] | --self-test
Exit status 0 when the tree follows the table, 1 when not (every violation is printed).
"""
import argparse
import os
import re
import shutil
import sys
import tempfile

DOC = "docs/architecture.md"
SOURCE_EXT = (".h", ".hpp", ".cc", ".cpp", ".c", ".cu", ".inc")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.M)
TABLE_BEGIN, TABLE_END = "<!-- layers:table:begin -->", "<!-- layers:table:end -->"
PICTURE_BEGIN, PICTURE_END = "<!-- layers:picture:begin -->", "<!-- layers:picture:end -->"
# Folders whose files may include anything (they are not part of the product's layering).
FREE = ("tests", "tools/bench", "tools/localcluster", "out", "examples", "deploy", "systemd",
        "docs", "cmake")
# Generated headers: the directory prefix of the include, and the component that generates it.
GENERATED = {"reft/v1/": "proto"}


class Component:
    def __init__(self, folder, layer, allowed):
        self.folder = folder
        self.layer = layer
        self.allowed = allowed


def between(text, begin, end):
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        return None
    return text[i + len(begin):j]


def parse_table(doc_text):
    """Rows `| \`folder\` | layer | ... | \`dep\` \`dep\` |`: the first cell names the folder, the
    second is the layer, the last lists the allowed components (backticked; others ignored)."""
    block = between(doc_text, TABLE_BEGIN, TABLE_END)
    if block is None:
        raise SystemExit(f"{DOC}: no {TABLE_BEGIN} ... {TABLE_END} block")
    comps = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        folder = cells[0].strip("`")
        try:
            layer = int(cells[1])
        except ValueError:
            raise SystemExit(f"{DOC}: layer of `{folder}` is not a number: {cells[1]!r}")
        allowed = re.findall(r"`([^`]+)`", cells[-1])
        comps[folder] = Component(folder, layer, allowed)
    return comps


def draw_picture(comps):
    """One line per layer, top layer first; each component with the components it may include."""
    lines = []
    for layer in sorted({c.layer for c in comps.values()}, reverse=True):
        row = sorted(f for f, c in comps.items() if c.layer == layer)
        for f in row:
            deps = comps[f].allowed
            arrow = " -> " + ", ".join(sorted(deps)) if deps else ""
            lines.append(f"L{layer}  {f}{arrow}")
    return "```\n" + "\n".join(lines) + "\n```\n"


def owner_of(path, comps):
    """The component whose folder is the longest prefix of `path` (relative, '/'-separated)."""
    best = None
    for f in comps:
        if path == f or path.startswith(f + "/"):
            if best is None or len(f) > len(best):
                best = f
    return best


def header_index(root, comps):
    """include name ("reft/x/y.h") -> components whose include/ directory has that file."""
    index = {}
    for f in comps:
        inc = os.path.join(root, f, "include")
        for dirpath, dirnames, filenames in os.walk(inc):
            # A nested component's include/ belongs to that component.
            for name in filenames:
                full = os.path.join(dirpath, name)
                rel_inc = os.path.relpath(full, inc).replace(os.sep, "/")
                rel_root = os.path.relpath(full, root).replace(os.sep, "/")
                if owner_of(rel_root, comps) == f:
                    index.setdefault(rel_inc, set()).add(f)
    return index


def source_files(root):
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
        # Hidden folders (.git, .ci) and build trees (build, build-*) hold no product source.
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and
                       not (rel_dir == "." and d.startswith("build"))]
        if rel_dir != "." and any(rel_dir == x or rel_dir.startswith(x + "/") for x in FREE):
            dirnames[:] = []
            continue
        for name in filenames:
            if name.endswith(SOURCE_EXT):
                yield (rel_dir + "/" + name) if rel_dir != "." else name


def unused_public_headers(root, comps, index, includes_of):
    """Public headers of daemon components that no other component includes, directly or
    through a public header of the same component that another one includes."""
    public = set()
    for rel, names in includes_of.items():
        owner = owner_of(rel, comps)
        for name in names:
            for target in index.get(name, ()):
                if target != owner:
                    public.add((target, name))
    grew = True
    while grew:
        grew = False
        for comp, name in list(public):
            for inner in includes_of.get(f"{comp}/include/{name}", ()):
                if comp in index.get(inner, ()) and (comp, inner) not in public:
                    public.add((comp, inner))
                    grew = True
    unused = []
    for name, owners in sorted(index.items()):
        for comp in sorted(owners):
            if comp.startswith("daemon/") and name.endswith(".h") and (comp, name) not in public:
                unused.append(f"{comp}/include/{name}: no other component includes it; a "
                              f"private header lives in {comp}/src")
    return unused


def check(root):
    with open(os.path.join(root, DOC), encoding="utf-8") as fh:
        doc_text = fh.read()
    comps = parse_table(doc_text)
    errors = []
    for f, c in sorted(comps.items()):
        if not os.path.isdir(os.path.join(root, f)):
            errors.append(f"{DOC}: component `{f}` has no folder")
        for d in c.allowed:
            if d not in comps:
                errors.append(f"{DOC}: `{f}` may include `{d}`, which is not a component")
            elif comps[d].layer >= c.layer:
                errors.append(f"{DOC}: `{f}` (layer {c.layer}) may include `{d}` (layer "
                              f"{comps[d].layer}): every arrow must point to a lower layer")
    picture = between(doc_text, PICTURE_BEGIN, PICTURE_END)
    if picture is None:
        errors.append(f"{DOC}: no {PICTURE_BEGIN} ... {PICTURE_END} block")
    elif picture.strip() != draw_picture(comps).strip():
        errors.append(f"{DOC}: the layer picture differs from the table "
                      f"(tools/check_layering.py --write redraws it)")
    index = header_index(root, comps)
    includes_of = {}
    for rel in source_files(root):
        owner = owner_of(rel, comps)
        if owner is None:
            errors.append(f"{rel}: in no component of {DOC} (add its folder to the table)")
            continue
        allowed = set(comps[owner].allowed) | {owner}
        with open(os.path.join(root, rel), encoding="utf-8", errors="replace") as fh:
            text = fh.read()
        includes_of[rel] = [m.group(1) for m in INCLUDE.finditer(text)]
        for m in INCLUDE.finditer(text):
            name = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            if name.startswith("reft/"):
                targets = index.get(name)
                if targets is None:
                    gen = [c for p, c in GENERATED.items() if name.startswith(p)]
                    if not gen:
                        continue  # not a project header (a typo fails the build instead)
                    targets = set(gen)
                if not targets & allowed:
                    errors.append(f"{rel}:{line}: `{owner}` includes \"{name}\" of "
                                  f"`{'`, `'.join(sorted(targets))}`, which {DOC} does not allow")
            elif "../" in name:
                target = os.path.normpath(os.path.join(os.path.dirname(rel), name))
                target = target.replace(os.sep, "/")
                t_owner = owner_of(target, comps)
                if t_owner is not None and t_owner not in allowed:
                    errors.append(f"{rel}:{line}: `{owner}` includes \"{name}\" of `{t_owner}`, "
                                  f"which {DOC} does not allow")
    errors += unused_public_headers(root, comps, index, includes_of)
    return errors, comps, doc_text


def write_picture(root):
    path = os.path.join(root, DOC)
    with open(path, encoding="utf-8") as fh:
        text = fh.read()
    comps = parse_table(text)
    i, j = text.find(PICTURE_BEGIN), text.find(PICTURE_END)
    if i < 0 or j < i:
        raise SystemExit(f"{DOC}: no {PICTURE_BEGIN} ... {PICTURE_END} block to write into")
    text = text[:i + len(PICTURE_BEGIN)] + "\n" + draw_picture(comps) + text[j:]
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(text)


def self_test():
    """The check must fail on an include that points up, and pass once it is removed."""
    tmp = tempfile.mkdtemp(prefix="reft-layering-")
    try:
        def put(rel, text):
            p = os.path.join(tmp, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            with open(p, "w", encoding="utf-8") as fh:
                fh.write(text)
        table = ("| folder | layer | role | may include |\n|---|---|---|---|\n"
                 "| `low` | 0 | bottom | – |\n| `high` | 1 | top | `low` |\n")
        put(DOC, f"{TABLE_BEGIN}\n{table}{TABLE_END}\n{PICTURE_BEGIN}\n{PICTURE_END}\n")
        write_picture(tmp)
        put("low/include/reft/low.h", "#pragma once\n")
        put("high/include/reft/high/api.h", '#pragma once\n#include "reft/low.h"\n')
        put("low/src/low.cc", '#include "reft/low.h"\n#include "reft/high/api.h"\n')
        errors, _, _ = check(tmp)
        if not any("low/src/low.cc:2" in e and "does not allow" in e for e in errors):
            print("self-test FAILED: an upward include was not reported:", errors)
            return 1
        put("low/src/low.cc", '#include "reft/low.h"\n')
        errors, _, _ = check(tmp)
        if errors:
            print("self-test FAILED: a clean tree was reported:", errors)
            return 1
        # A daemon component's public header that only its own sources include.
        table += "| `daemon/d` | 2 | daemon part | `low` `high` |\n"
        put(DOC, f"{TABLE_BEGIN}\n{table}{TABLE_END}\n{PICTURE_BEGIN}\n{PICTURE_END}\n")
        write_picture(tmp)
        put("daemon/d/include/reft/d/inner.h", "#pragma once\n")
        put("daemon/d/src/d.cc", '#include "reft/d/inner.h"\n#include "reft/high/api.h"\n')
        errors, _, _ = check(tmp)
        if not any("daemon/d/include/reft/d/inner.h" in e for e in errors):
            print("self-test FAILED: a header only its own component includes was not reported:",
                  errors)
            return 1
        os.remove(os.path.join(tmp, "daemon/d/include/reft/d/inner.h"))
        put("daemon/d/src/inner.h", "#pragma once\n")
        put("daemon/d/src/d.cc", '#include "inner.h"\n#include "reft/high/api.h"\n')
        errors, _, _ = check(tmp)
        if errors:
            print("self-test FAILED: a private header in src/ was reported:", errors)
            return 1
        print("self-test passed: an upward include and a public header nobody else includes fail "
              "the check, a clean tree passes")
        return 0
    finally:
        shutil.rmtree(tmp)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--write", action="store_true", help="redraw the picture from the table")
    ap.add_argument("--self-test", action="store_true")
    args = ap.parse_args()
    if args.self_test:
        return self_test()
    root = os.path.abspath(args.root)
    if args.write:
        write_picture(root)
    errors, comps, _ = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"FAILED: {len(errors)} layering violation(s)")
        return 1
    print(f"layering ok: {len(comps)} components, every include points down")
    return 0


if __name__ == "__main__":
    sys.exit(main())
