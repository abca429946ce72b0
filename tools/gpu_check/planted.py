"""Positive controls of run_sanitizer.py: kernels with a planted error that compute-sanitizer must report.

A clean sanitizer run proves something only if the sanitizer would have seen an error: with a
kernel filter that matched nothing, or a tool that cannot instrument this device, every run is
"clean". So each tool is also run, with the same arguments, over one of these kernels, named
``trtspec_planted_*`` so that the same ``--kernel-name kns=trtspec`` filter selects them:

* memcheck:  ``trtspec_planted_oob`` writes the n ints after an n-int cudaMalloc buffer;
* racecheck: ``trtspec_planted_race``: every thread of a 256-thread block writes one shared int
  between two barriers (write-after-write hazards between warps);
* initcheck: ``trtspec_planted_uninit`` reads a freshly cudaMalloc'd buffer nothing wrote.

The kernels are compiled at run time with CuPy (NVRTC), the pool allocator off so that each
buffer is its own cudaMalloc. The control passes when the sanitizer reports >= 1 error.

    compute-sanitizer --tool memcheck --kernel-name kns=trtspec python3 tools/gpu_check/planted.py memcheck
"""
from __future__ import annotations

import sys

KERNELS = {
    "memcheck": ("trtspec_planted_oob", r"""
extern "C" __global__ void trtspec_planted_oob(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i + n] = i;  // one buffer length past the end
}"""),
    "racecheck": ("trtspec_planted_race", r"""
extern "C" __global__ void trtspec_planted_race(int* out, int n) {
    __shared__ int s;
    if (threadIdx.x == 0) s = 0;
    __syncthreads();
    s = threadIdx.x;  // every thread writes s with no barrier between the writes
    __syncthreads();
    if (threadIdx.x == 0) out[0] = s + n;
}"""),
    "initcheck": ("trtspec_planted_uninit", r"""
extern "C" __global__ void trtspec_planted_uninit(int* p, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) p[i] = p[i] + 1;  // p was never written
}"""),
}
TOOLS = tuple(KERNELS)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0] not in KERNELS:
        print(f"usage: planted.py {{{','.join(KERNELS)}}}", file=sys.stderr)
        return 2
    import cupy as cp

    cp.cuda.set_allocator(None)  # each buffer its own cudaMalloc: the write past the end leaves it
    name, source = KERNELS[argv[0]]
    kernel = cp.RawKernel(source, name)
    n = 256
    buf = cp.empty(n, dtype=cp.int32)
    kernel((1,), (n,), (buf, cp.int32(n)))
    cp.cuda.runtime.deviceSynchronize()
    print(f"planted {argv[0]} kernel {name} ran")
    return 0


if __name__ == "__main__":
    sys.exit(main())
