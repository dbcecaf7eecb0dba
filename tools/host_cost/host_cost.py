#!/usr/bin/env python3
"""The runtime's own instructions per op call, from a callgrind profile of livefuse-generate.

    host_cost.py callgrind.out

own = the inclusive instructions of decoder::generate less the kernels' (eager calls'
run_backend and plans' run_step_cpu), divided by the Executor::submit calls: what the runtime
itself spends on a call (building it, checking it, matching, deferring, completing windows,
reporting to the monitor), on the CPU, where a plan's steps run through the same path as on a
GPU up to the kernels.
"""
import re
import subprocess
import sys


def main() -> int:
    if len(sys.argv) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    out = subprocess.run(["callgrind_annotate", "--threshold=100", "--inclusive=yes",
                          "--tree=caller", sys.argv[1]], capture_output=True, text=True,
                         check=True).stdout
    star = re.compile(r"\s*([0-9,]+) \([ 0-9.%]+\)  \*  (.*)")

    def inclusive(pattern: str) -> int:
        for line in out.splitlines():
            m = star.match(line)
            if m and re.search(pattern, m.group(2)):
                return int(m.group(1).replace(",", ""))
        return 0

    # Calls into Executor::submit: the caller lines of its block.
    calls = 0
    for block in out.split("\n\n"):
        lines = block.strip("\n").splitlines()
        if any(star.match(l) and re.search(r"executor\.cpp:livefuse::Executor::submit\(", l)
               for l in lines):
            calls = sum(int(c.replace(",", "")) for l in lines if "  < " in l
                        for c in re.findall(r"\((\d[\d,]*)x\)", l))
            break
    generate = inclusive(r"decoder::generate\(")
    kernels = inclusive(r"executor\.cpp:livefuse::\(anonymous namespace\)::run_backend\(") + \
        inclusive(r"plan\.cpp:livefuse::planner::run_step_cpu\(")
    if not calls or not generate:
        print("host_cost: no livefuse-generate profile in " + sys.argv[1], file=sys.stderr)
        return 1
    own = generate - kernels
    print(f"generate {generate:,} instructions, kernels {kernels:,}, runtime {own:,} "
          f"over {calls:,} op calls: {own / calls:.0f} a call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
