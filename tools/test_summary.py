#!/usr/bin/env python3
"""Sums the doctest summaries of every suite in a meson test log into one closing line."""
import re
import sys

text = open(sys.argv[1], errors="replace").read()
passed = failed = skipped = suites = 0
for m in re.finditer(r"\[doctest\] test cases:\s*(\d+) \|\s*(\d+) passed \|\s*(\d+) failed \|\s*(\d+) skipped", text):
    suites += 1
    passed += int(m.group(2))
    failed += int(m.group(3))
    skipped += int(m.group(4))
for m in re.finditer(r"^(\w+) skipped: (.*)$", text, re.M):
    pass
print(f"suites run: {suites}")
print(f"doctest: {passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed or suites == 0 else 0)
