#!/usr/bin/env python3
"""Sums the results of meson test runs into one closing line.

test_summary.py LOG.txt         the doctest summaries of one meson test log (tools/test.sh):
                                "suites run: N" and "doctest: N passed, N failed, N skipped"
test_summary.py --all DIR...    every test of the runs in these build dirs (.ci/run), read
                                from DIR/meson-logs/testlog.json; one line per dir, then the
                                plain closing line "N passed, N failed, N skipped"

In --all, a doctest suite counts its cases; a test without doctest output (a program run
with arguments) counts as one case. A suite whose process failed although none of its cases
did -- a sanitizer report, a crash in teardown, a timeout -- counts one failure more, and a dir
without a log (its build failed) counts as one failure: nothing that failed is summed away.
"""
import json
import os
import re
import sys

DOCTEST = re.compile(
    r"\[doctest\] test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed \|\s*(\d+) skipped")


def one_log(path):
    text = open(path, errors="replace").read()
    passed = failed = skipped = suites = 0
    for m in DOCTEST.finditer(text):
        suites += 1
        passed += int(m.group(2))
        failed += int(m.group(3))
        skipped += int(m.group(4))
    print(f"suites run: {suites}")
    print(f"doctest: {passed} passed, {failed} failed, {skipped} skipped")
    return 1 if failed or suites == 0 else 0


def tests_of(build_dir):
    """(name, result, output) of each test in the dir's last meson test run, or None."""
    path = os.path.join(build_dir, "meson-logs", "testlog.json")
    if not os.path.exists(path):
        return None
    out = []
    for line in open(path, errors="replace"):
        line = line.strip()
        if line:
            t = json.loads(line)
            out.append((t["name"], t["result"], (t.get("stdout") or "") + (t.get("stderr") or "")))
    return out


def all_logs(dirs):
    total = [0, 0, 0]
    for d in dirs:
        tests = tests_of(d)
        if tests is None:
            print(f"{d}: no test log (setup or build failed): 0 passed, 1 failed, 0 skipped")
            total[1] += 1
            continue
        n = [0, 0, 0]
        bad = []
        for name, result, output in tests:
            ok = result in ("OK", "EXPECTEDFAIL")
            cases = DOCTEST.findall(output)
            if cases:
                for _, p, f, s in cases:
                    n[0] += int(p)
                    n[1] += int(f)
                    n[2] += int(s)
                if not ok and not any(int(f) for _, _, f, _ in cases):
                    n[1] += 1
                    bad.append(f"{name} ({result}, after its cases)")
                elif not ok:
                    bad.append(name)
            elif result == "SKIP":
                n[2] += 1
            elif ok:
                n[0] += 1
            else:
                n[1] += 1
                bad.append(f"{name} ({result})")
        extra = f"; failed: {', '.join(bad)}" if bad else ""
        print(f"{d}: {len(tests)} tests: {n[0]} passed, {n[1]} failed, {n[2]} skipped{extra}")
        total = [a + b for a, b in zip(total, n)]
    print(f"{total[0]} passed, {total[1]} failed, {total[2]} skipped")
    return 1 if total[1] or total[0] == 0 else 0


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] == "--all":
        sys.exit(all_logs(sys.argv[2:]))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    sys.exit(one_log(sys.argv[1]))
