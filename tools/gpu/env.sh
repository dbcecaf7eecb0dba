# Sourced by the GPU scripts (run THERE, from the repo root): the library path for the build
# carried over in .gpu/build (its TBB in lib/), plus pip's nvidia packages for any CUDA library
# the loader cannot find (no system toolkit: what PyTorch itself uses).
B=${B:-.gpu/build}
export LD_LIBRARY_PATH="$PWD/$B/lib:$PWD/$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
missing=$(ldd "$B/liblivefuse.so" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
if [ -n "$missing" ]; then
  echo "env.sh: not found by the loader: $(echo $missing)"
  extra=$(python3 - $missing <<'PY' 2>/dev/null
import os, sys
roots = []
try:
    import nvidia.cublas as c
    roots += [os.path.join(p, "lib") for p in c.__path__]
except Exception:
    pass
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
dirs = []
for want in sys.argv[1:]:
    for root in roots:
        hit = None
        for d, _, files in os.walk(root):
            if want in files:
                hit = d
                break
        if hit:
            if hit not in dirs:
                dirs.append(hit)
            break
print(":".join(dirs))
PY
)
  if [ -n "$extra" ]; then
    export LD_LIBRARY_PATH="$extra:$LD_LIBRARY_PATH"
    echo "env.sh: added pip CUDA library dirs: $extra"
  fi
  still=$(ldd "$B/liblivefuse.so" 2>/dev/null | awk '/not found/ { print $1 }' | sort -u)
  [ -n "$still" ] && echo "env.sh: WARNING still missing: $(echo $still)"
fi
