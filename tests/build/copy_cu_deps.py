#!/usr/bin/env python3
"""The .cu kernels' depfiles (kernels/cuda/copy_cu.py) name every project header they include,
directly or through other headers: a header missing there leaves a stale kernel object behind
when it changes (a Config field once made attention_mma.cu read the wrong byte).
Usage: copy_cu_deps.py SOURCE_ROOT   (exit status 0: every check passed)"""
import os
import sys
import tempfile


def main():
    root = sys.argv[1]
    sys.path.insert(0, os.path.join(root, "kernels", "cuda"))
    import copy_cu  # noqa: E402

    dirs = [root, os.path.join(root, "runtime", "include")]
    src = os.path.join(root, "kernels", "cuda", "attention_mma.cu")
    rel = lambda p: os.path.relpath(p, root)  # noqa: E731
    deps = {rel(h) for h in copy_cu.headers(src, dirs)}
    want = {
        "runtime/include/livefuse/config.hpp",  # included directly (the header that was missing)
        "kernels/cuda/check.cuh",
        "kernels/attention_args.hpp",  # through attention_kernels.hpp
        "runtime/include/livefuse/dtype.hpp",  # through a header of a header
    }
    missing = sorted(want - deps)
    with tempfile.TemporaryDirectory() as tmp:
        out, dep = os.path.join(tmp, "attention_mma.cu"), os.path.join(tmp, "attention_mma.cu.d")
        sys.argv = ["copy_cu.py", src, out, dep] + dirs
        copy_cu.main()
        text = open(dep).read()
        copied = open(out).read()
    ok = not missing and text.startswith(out + ":") and "config.hpp" in text
    ok = ok and copied.startswith('#line 1 "') and copied.endswith(open(src).read())
    print(f"attention_mma.cu: {len(deps)} headers in its depfile; missing {missing or 'none'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
