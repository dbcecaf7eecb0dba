"""What the build checks that compile a .cu kernel by themselves share (ptx_shuffles.py,
gemv_registers.py): the nvcc to run and the flags the library's build gives a kernel."""
import os
import shutil


def find_nvcc(given):
    """The compiler meson found (a bare name where it came from PATH), else the toolkit's own;
    None where neither exists (the check then skips)."""
    candidates = [given, os.path.join(os.environ.get("CUDA_PATH", "/usr/local/cuda"), "bin", "nvcc")]
    return next((c for c in candidates if shutil.which(c) or os.path.exists(c)), None)


def kernel_flags(root):
    """sm_90, the build's language level and defines, and the project's include folders."""
    inc = [root, os.path.join(root, "runtime", "include"), os.path.join(root, "kernels"),
           os.path.join(root, "kernels", "cuda")]
    return ["-arch=sm_90", "-O3", "--expt-relaxed-constexpr", "-std=c++20", "-DLIVEFUSE_HAS_CUDA=1",
            "-DNDEBUG"] + ["-I" + d for d in inc]
