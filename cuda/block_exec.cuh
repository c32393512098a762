// Executor for accept_math.cuh on one CUDA thread block of NT threads: block-level
// reductions through shared memory and warp shuffles. Device code only.
#pragma once

#include "accept_math.cuh"

namespace lsk {

template <int NT>
struct BlockShared {
    static constexpr int NW = NT / 32;
    unsigned long long hist[NW][RADIX_BINS];  // per-warp privatized radix histograms
    unsigned long long merged[RADIX_BINS];
    unsigned long long warp_u64[NW];
    float warp_f[NW];
    int warp_i[NW];
    int found;
};

template <int NT>
struct BlockExec {
    static constexpr int warp_size = 32;
    static constexpr int NW = NT / 32;
    static_assert(NT % 32 == 0 && NT <= 1024, "block size must be a multiple of 32, at most 1024");
    BlockShared<NT>& sh;

    __device__ explicit BlockExec(BlockShared<NT>& s) : sh(s) {}
    __device__ int tid() const { return threadIdx.x; }
    __device__ int nthreads() const { return NT; }
    __device__ int lane() const { return threadIdx.x & 31; }
    __device__ int warp() const { return threadIdx.x >> 5; }
    __device__ int nwarps() const { return NW; }
    __device__ void sync() { __syncthreads(); }

    __device__ void hist_clear() {
        unsigned long long* h = &sh.hist[0][0];
        for (int i = threadIdx.x; i < NW * RADIX_BINS; i += NT) h[i] = 0ull;
    }
    __device__ void hist_add(int bin, uint64_t v) {
        atomicAdd(&sh.hist[warp()][bin], (unsigned long long)v);
    }
    // Sum the per-warp histograms (integer: order does not matter); callers sync before.
    __device__ void hist_merge() {
        for (int b = threadIdx.x; b < RADIX_BINS; b += NT) {
            unsigned long long s = 0;
            for (int w = 0; w < NW; ++w) s += sh.hist[w][b];
            sh.merged[b] = s;
        }
        __syncthreads();
    }
    __device__ uint64_t hist_at(int bin) const { return sh.merged[bin]; }

    __device__ float max_f(float v) {
        for (int o = 16; o; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
        if (lane() == 0) sh.warp_f[warp()] = v;
        __syncthreads();
        float r = sh.warp_f[0];
        for (int w = 1; w < NW; ++w) r = fmaxf(r, sh.warp_f[w]);
        __syncthreads();
        return r;
    }
    // Block-wide (max value, lowest index holding it), returned to every thread.
    __device__ void argmax(float& v, int& i) {
        for (int o = 16; o; o >>= 1) {
            float ov = __shfl_xor_sync(0xffffffffu, v, o);
            int oi = __shfl_xor_sync(0xffffffffu, i, o);
            if (ov > v || (ov == v && oi < i)) {
                v = ov;
                i = oi;
            }
        }
        if (lane() == 0) {
            sh.warp_f[warp()] = v;
            sh.warp_i[warp()] = i;
        }
        __syncthreads();
        v = sh.warp_f[0];
        i = sh.warp_i[0];
        for (int w = 1; w < NW; ++w) {
            float ov = sh.warp_f[w];
            int oi = sh.warp_i[w];
            if (ov > v || (ov == v && oi < i)) {
                v = ov;
                i = oi;
            }
        }
        __syncthreads();
    }
    __device__ uint64_t warp_sum(uint64_t v) {
        unsigned long long x = v;
        for (int o = 16; o; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
        return x;
    }
    __device__ uint64_t sum_u64(uint64_t v) {
        unsigned long long x = warp_sum(v);
        if (lane() == 0) sh.warp_u64[warp()] = x;
        __syncthreads();
        unsigned long long r = 0;
        for (int w = 0; w < NW; ++w) r += sh.warp_u64[w];
        __syncthreads();
        return r;
    }
    __device__ uint64_t warp_incl_scan(uint64_t v) {
        unsigned long long x = v;
        for (int o = 1; o < 32; o <<= 1) {
            unsigned long long y = __shfl_up_sync(0xffffffffu, x, o);
            if (lane() >= o) x += y;
        }
        return x;
    }
    __device__ uint32_t warp_ballot(bool b) { return __ballot_sync(0xffffffffu, b); }
    __device__ uint64_t warp_last(uint64_t v) {
        return __shfl_sync(0xffffffffu, (unsigned long long)v, 31);
    }
    // Exclusive prefix of per-warp segment sums over warps, and their total.
    __device__ uint64_t warp_prefix(uint64_t seg_sum, uint64_t* total) {
        if (lane() == 0) sh.warp_u64[warp()] = seg_sum;
        if (threadIdx.x == 0) sh.found = -1;
        __syncthreads();
        unsigned long long before = 0, all = 0;
        for (int w = 0; w < NW; ++w) {
            if (w == warp()) before = all;
            all += sh.warp_u64[w];
        }
        __syncthreads();
        *total = all;
        return before;
    }
    // One warp found the index (its lane 0 publishes it); every thread gets it.
    __device__ int broadcast_found(int found) {
        if (found >= 0 && lane() == 0) sh.found = found;
        __syncthreads();
        int r = sh.found;
        __syncthreads();
        return r;
    }
};

}  // namespace lsk
