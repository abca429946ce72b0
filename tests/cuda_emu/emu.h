// A thread-level CPU emulator for trtspec's CUDA kernels, so their source runs on machines without
// a GPU. Each CUDA thread of a block is an OS thread; __syncthreads is a std::barrier over the
// block; blocks run one after another (so `static` stands in for __shared__); warps have their
// own barrier for __all_sync. cub::BlockReduce / BlockScan are replaced by simple versions over
// the same barrier (their float64 association differs from cub's, which the tests allow for).
// tests/test_cuda_emulated.py rewrites the kernel sources lightly (launch syntax, builtin
// variables, includes) and compiles them after this header. Not a CUDA implementation: it
// checks indexing, control flow, barrier placement and results, not memory-model subtleties.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

// cudaStream_t, uint4, cudaSuccess come from the CUDA headers included above; the execution-space
// keywords become nothing.
#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

namespace emu {

struct Block {
    int dim = 1;
    std::unique_ptr<std::barrier<>> barrier;
    std::vector<std::unique_ptr<std::barrier<>>> warpBarriers;
    std::vector<unsigned char> dynamicShared;
    std::atomic<int> orFlag{0};
    std::vector<int> warpFlags;
};
inline Block& block() {
    static Block b;
    return b;
}
inline thread_local int tidValue = 0;
inline thread_local int bidValue = 0;
inline int tid() { return tidValue; }
inline int bid() { return bidValue; }
inline void* dynamicShared() { return block().dynamicShared.data(); }
inline void sync() { block().barrier->arrive_and_wait(); }
inline int syncOr(int pred) {
    Block& b = block();
    sync();
    if (tid() == 0) b.orFlag = 0;
    sync();
    if (pred) b.orFlag = 1;
    sync();
    const int r = b.orFlag.load();
    sync();
    return r;
}
inline bool warpAll(bool pred) {
    Block& b = block();
    const int w = tid() / 32;
    b.warpBarriers[w]->arrive_and_wait();
    if (tid() % 32 == 0) b.warpFlags[w] = 1;
    b.warpBarriers[w]->arrive_and_wait();
    if (!pred) b.warpFlags[w] = 0;  // benign race: every writer writes 0
    b.warpBarriers[w]->arrive_and_wait();
    const bool r = b.warpFlags[w] != 0;
    b.warpBarriers[w]->arrive_and_wait();
    return r;
}
inline std::mutex& atomicMutex() {
    static std::mutex m;
    return m;
}
inline int atomicMin(int* p, int v) {
    std::lock_guard<std::mutex> lock(atomicMutex());
    const int old = *p;
    if (v < old) *p = v;
    return old;
}

template <typename Kernel, typename... Args>
void launch(Kernel kernel, long grid, int threads, size_t smem, cudaStream_t, Args... args) {
    Block& b = block();
    b.dim = threads;
    b.barrier = std::make_unique<std::barrier<>>(threads);
    b.warpBarriers.clear();
    for (int w = 0; w < (threads + 31) / 32; ++w)
        b.warpBarriers.emplace_back(std::make_unique<std::barrier<>>(std::min(32, threads - 32 * w)));
    b.warpFlags.assign((threads + 31) / 32, 0);
    for (long g = 0; g < grid; ++g) {
        b.dynamicShared.assign(smem + 16, 0xA5);  // poisoned, like uninitialised shared memory
        std::vector<std::thread> pool;
        pool.reserve(threads);
        for (int t = 0; t < threads; ++t)
            pool.emplace_back([&, t, g] {
                tidValue = t;
                bidValue = static_cast<int>(g);
                kernel(args...);
            });
        for (auto& th : pool) th.join();
    }
}

}  // namespace emu

// CUDA builtins and intrinsics used by the kernels
#define __syncthreads() emu::sync()
#define __syncthreads_or(p) emu::syncOr(p)
#define __all_sync(mask, p) emu::warpAll(p)
inline int atomicMin(int* p, int v) { return emu::atomicMin(p, v); }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline float __fsub_rn(float a, float b) { return a - b; }

// cub stand-ins: results are valid in thread 0 (Reduce/Sum) or every thread (ExclusiveSum), as in cub
namespace cub {
template <typename T, int kThreads>
class BlockReduce {
public:
    struct TempStorage {
        T values[kThreads];
    };
    explicit BlockReduce(TempStorage& s) : s_(s) {}
    template <typename Op>
    T Reduce(T v, Op op) {
        s_.values[emu::tid()] = v;
        emu::sync();
        T r = s_.values[0];
        if (emu::tid() == 0)
            for (int i = 1; i < kThreads; ++i) r = op(r, s_.values[i]);
        return r;
    }
    T Sum(T v) {
        return Reduce(v, [](T a, T b) { return a + b; });
    }

private:
    TempStorage& s_;
};
template <typename T, int kThreads>
class BlockScan {
public:
    struct TempStorage {
        T values[kThreads];
    };
    explicit BlockScan(TempStorage& s) : s_(s) {}
    void ExclusiveSum(T v, T& exclusive, T& aggregate) {
        s_.values[emu::tid()] = v;
        emu::sync();
        T e{}, a{};
        for (int i = 0; i < kThreads; ++i) {
            if (i == emu::tid()) e = a;
            a += s_.values[i];
        }
        exclusive = e;
        aggregate = a;
    }

private:
    TempStorage& s_;
};
}  // namespace cub
