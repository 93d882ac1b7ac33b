#!/usr/bin/python3
"""The layer map of docs/architecture.md, checked: each layer uses only layers below it.

The order is read from the diagram at the top of docs/architecture.md (top line = highest layer),
so the document and the check cannot drift apart. Two checks:

  includes  every `#include "..."` in src/ names a header of the same or a lower layer (the public
            headers in include/ are below everything, but a src/ layer L may include only
            include/dspark/X.h for X at or below L, and the composed "dspark.h" / "dspark_jobs.h"
            only from src/jobs up; include/dspark/X.h itself includes only lower ones); a cli/
            file includes nothing but the public headers, its own "cli.h" and system headers
            (<...>, none of which may name a folder of src/): cli/ is built without src/ on its
            include path, and this says so by name;
  symbols   (with --objects FILE: a list of the library's object files, one path a line, as CMake
            lays them out under CMakeFiles/dspark.dir/src/LAYER/) every symbol an object file of layer L uses from another object
            file is defined in layer L or below. This catches what includes cannot: every public
            function is declared in dspark.h, so a call can reach up without an include.

Prints one line per violation and exits 1 when there is any (0 otherwise).
usage: check_layers.py [--root SRC_DIR] [--objects OBJECT_LIST]
"""
import os
import re
import subprocess
import sys


def layer_order(root):
    """Layers bottom first: ['src/base', 'src/kernels', ..., 'cli']."""
    path = os.path.join(root, "docs", "architecture.md")
    with open(path, encoding="utf-8") as f:
        text = f.read()
    m = re.search(r"```\n(.*?)```", text, re.S)
    if not m:
        sys.exit(f"{path}: no layer diagram (a ``` block) found")
    layers = [mm.group(1) for mm in (re.match(r"((?:src/)?[a-z_]+)/\s", line) for line in m.group(1).splitlines())
              if mm]
    if not layers:
        sys.exit(f"{path}: the layer diagram names no layers")
    return layers[::-1]


def layer_of(rel, layers):
    """The layer a path relative to the root belongs to ('src/io/json.c' -> 'src/io'), or None."""
    parts = rel.split("/")
    if parts[0] == "src" and len(parts) > 2:
        return "src/" + parts[1]
    if parts[0] == "cli":
        return "cli"
    return None


def public_headers(root):
    """The headers in include/ (the public API), by the name an #include uses."""
    inc = os.path.join(root, "include")
    if not os.path.isdir(inc):
        return set()
    names = {name for name in os.listdir(inc) if name.endswith(".h")}
    sub = os.path.join(inc, "dspark")
    if os.path.isdir(sub):
        names |= {"dspark/" + name for name in os.listdir(sub) if name.endswith(".h")}
    return names


def check_cli_include(rel, lineno, line, public, src_dirs):
    """A cli/ file's #include: the public headers, cli.h, or a system header; else a message."""
    m = re.match(r'\s*#\s*include\s+(["<])([^">]+)[">]', line)
    if not m:
        return None
    kind, inc = m.groups()
    if kind == "<":
        if inc.split("/")[0] in src_dirs and "/" in inc:
            return f"{rel}:{lineno}: #include <{inc}> reaches into src/: cli/ may include only the public headers"
        return None
    if inc == "cli.h" or inc in public:
        return None
    return (f"{rel}:{lineno}: #include \"{inc}\": cli/ may include only the public headers (include/: "
            f"{', '.join(sorted(h for h in public if '/' not in h))}, dspark/*.h), cli.h and system headers")


# The composed public headers: only the jobs tier and the layers above it may include them (they
# declare every layer); a lower layer includes its own layer's include/dspark/X.h or a lower one's.
COMPOSED = ("dspark.h", "dspark_jobs.h")
JOBS_LAYER = "src/jobs"


def check_public_include(rel, lineno, inc, src_layer, rank):
    """A src/ file's include of a public header; a message when it reaches above src_layer."""
    if inc in COMPOSED:
        if rank[src_layer] < rank[JOBS_LAYER]:
            return (f"{rel}:{lineno}: #include \"{inc}\" declares every layer: {src_layer} includes "
                    f"include/dspark/{src_layer[4:]}.h or a lower layer's header instead")
        return None
    m = re.fullmatch(r"dspark/([a-z_]+)\.h", inc)
    if not m:
        return None
    hdr_layer = "src/" + m.group(1)
    if hdr_layer not in rank:
        return f"{rel}:{lineno}: #include \"{inc}\": {hdr_layer} is not a layer"
    if rank[hdr_layer] > rank[src_layer]:
        return f"{rel}:{lineno}: #include \"{inc}\" reaches up: {hdr_layer} is above {src_layer}"
    return None


def check_public_headers(root, rank):
    """include/dspark/X.h includes only include/dspark/Y.h of layers at or below X."""
    bad = []
    folder = os.path.join(root, "include", "dspark")
    if not os.path.isdir(folder):
        return bad
    for name in sorted(os.listdir(folder)):
        if not name.endswith(".h"):
            continue
        rel = f"include/dspark/{name}"
        layer = "src/" + name[:-2]
        if layer not in rank:
            bad.append(f"{rel}: names no layer of docs/architecture.md")
            continue
        with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if m:
                    msg = check_public_include(rel, lineno, m.group(1), layer, rank)
                    if msg:
                        bad.append(msg)
    return bad


def check_includes(root, layers):
    rank = {l: i for i, l in enumerate(layers)}
    public = public_headers(root)
    src_dirs = set(os.listdir(os.path.join(root, "src"))) if os.path.isdir(os.path.join(root, "src")) else set()
    bad = check_public_headers(root, rank)
    for top in ("src", "cli"):
        for dirpath, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith((".c", ".h", ".inc")):
                    continue
                path = os.path.join(dirpath, name)
                rel = os.path.relpath(path, root)
                src_layer = layer_of(rel, layers)
                if src_layer not in rank:
                    bad.append(f"{rel}: folder {src_layer} is not in the layer map of docs/architecture.md")
                    continue
                with open(path, encoding="utf-8", errors="replace") as f:
                    for lineno, line in enumerate(f, 1):
                        if top == "cli":
                            msg = check_cli_include(rel, lineno, line, public, src_dirs)
                            if msg:
                                bad.append(msg)
                            continue
                        m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                        if not m:
                            continue
                        inc = m.group(1)
                        msg = check_public_include(rel, lineno, inc, src_layer, rank)
                        if msg:
                            bad.append(msg)
                        if inc in public or "/" not in inc:
                            continue  # the public API, or a header of the same folder
                        dst_layer = "src/" + inc.split("/")[0]
                        if dst_layer not in rank:
                            bad.append(f"{rel}:{lineno}: #include \"{inc}\": {dst_layer} is not a layer")
                        elif rank[dst_layer] > rank[src_layer]:
                            bad.append(f"{rel}:{lineno}: #include \"{inc}\" reaches up: {dst_layer} is above "
                                       f"{src_layer}")
    return bad


def nm(path, *flags):
    out = subprocess.run(["nm", *flags, path], check=True, capture_output=True, text=True).stdout
    return [line.split()[-1] for line in out.splitlines() if line.strip()]


def check_symbols(listfile, layers):
    rank = {l: i for i, l in enumerate(layers)}
    objs = []
    with open(listfile, encoding="utf-8") as f:
        for path in f.read().split():
            rel = path.replace("\\", "/").split("dspark.dir/", 1)[-1]
            objs.append((path, rel[:-2] if rel.endswith(".o") else rel))
    if not objs:
        return [f"{listfile}: no object files"]
    defined = {}
    for path, rel in objs:
        for sym in nm(path, "--defined-only", "-g"):
            defined[sym] = rel
    bad = []
    for path, rel in objs:
        src_layer = layer_of(rel, layers)
        if src_layer not in rank:
            bad.append(f"{rel}: folder {src_layer} is not in the layer map of docs/architecture.md")
            continue
        for sym in nm(path, "-u"):
            where = defined.get(sym)
            if where is None:
                continue  # libc, OpenBLAS, ...
            dst_layer = layer_of(where, layers)
            if dst_layer in rank and rank[dst_layer] > rank[src_layer]:
                bad.append(f"{rel}: uses {sym} from {where} ({dst_layer} is above {src_layer})")
    return bad


def main(argv):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    objdir = None
    i = 0
    while i < len(argv):
        if argv[i] == "--root" and i + 1 < len(argv):
            root = argv[i + 1]
            i += 2
        elif argv[i] == "--objects" and i + 1 < len(argv):
            objdir = argv[i + 1]
            i += 2
        else:
            sys.exit(__doc__)
    layers = layer_order(root)
    bad = check_includes(root, layers)
    if objdir:
        bad += check_symbols(objdir, layers)
    for line in bad:
        print(line)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
