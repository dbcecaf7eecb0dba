#!/usr/bin/env python3
"""Copies a .cu source into the build dir for nvcc, and writes a depfile of every header it
includes, followed through the project's headers (#include "..." only).

Meson 1.0 gives nvcc no depfile flags, so ninja would not know which headers a kernel includes:
a header edit left stale kernel objects behind, and host and device code then disagreed on a
struct's layout (a Config field added: attention_mma.cu read the attention switch from the wrong
byte). The copy is the target the depfile belongs to: editing any header it lists copies the
source again, which recompiles it; a new #include is in the next depfile by itself.

Usage: copy_cu.py SOURCE OUTPUT DEPFILE INCLUDE_DIR...
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def headers(source, include_dirs):
    """Every project header `source` includes, directly or not (paths as found)."""
    seen, todo = [], [source]
    while todo:
        path = todo.pop()
        try:
            text = open(path, encoding="utf-8").read()
        except OSError:
            continue
        for name in INCLUDE.findall(text):
            for base in [os.path.dirname(path)] + include_dirs:
                found = os.path.normpath(os.path.join(base, name))
                if os.path.isfile(found):
                    if found not in seen:
                        seen.append(found)
                        todo.append(found)
                    break
    return seen


def main():
    source, output, depfile, include_dirs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    text = open(source, encoding="utf-8").read()
    with open(output, "w", encoding="utf-8") as f:
        f.write(f'#line 1 "{source}"\n{text}')
    deps = " ".join(h.replace(" ", "\\ ") for h in headers(source, include_dirs))
    with open(depfile, "w", encoding="utf-8") as f:
        f.write(f"{output}: {deps}\n")


if __name__ == "__main__":
    main()
