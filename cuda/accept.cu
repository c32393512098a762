// Fused acceptance for one speculative step on the GPU: one launch of k+1 blocks.
//
// Block i owns target row i (and draft row i when there is q): it applies temperature /
// top-k / top-p, runs the ratio test for draft i and, only if draft i is rejected (or i is
// the bonus row k), samples that row's recovered/bonus token. The last block to finish
// (a ticket counter) assembles the step's tokens from the first rejection, so the host
// sees one launch and one small copy back. Loaded by localspec/kernels/_cuda.py (ctypes).
#include <cuda_runtime.h>

#include <mutex>

#include "accept_math.cuh"
#include "block_exec.cuh"

namespace lsk {

constexpr int BLOCK = 512;
constexpr int MAX_K = 64;

struct Scratch {
    int accepted[MAX_K + 1];
    int token[MAX_K + 1];
    unsigned int done;
};

__device__ void finish_step(Scratch* scratch, int k, const int* drafts, RowDecision r, int* out) {
    __shared__ int is_last;
    if (threadIdx.x == 0) {
        scratch->accepted[blockIdx.x] = r.accepted;
        scratch->token[blockIdx.x] = r.token;
        __threadfence();
        unsigned int ticket = atomicAdd(&scratch->done, 1u);
        is_last = ticket == gridDim.x - 1;
    }
    __syncthreads();
    if (is_last && threadIdx.x == 0) {
        __threadfence();
        const volatile int* acc = scratch->accepted;
        const volatile int* tok = scratch->token;
        assemble_result(k, drafts, acc, tok, out);
        scratch->done = 0u;  // ready for the next launch
    }
}

__global__ void __launch_bounds__(BLOCK) accept_greedy_kernel(
    const float* __restrict__ target, const int* __restrict__ drafts, int k, Params p,
    Scratch* scratch, int* out) {
    __shared__ BlockShared<BLOCK> sh;
    BlockExec<BLOCK> ex(sh);
    int row = blockIdx.x;
    const float* x = target + (size_t)row * p.n_vocab;
    RowDecision r = decide_greedy_row(ex, x, row < k ? drafts[row] : -1, p);
    finish_step(scratch, k, drafts, r, out);
}

__global__ void __launch_bounds__(BLOCK) accept_stochastic_kernel(
    const float* __restrict__ target, const float* __restrict__ draft, const int* __restrict__ drafts,
    const double* __restrict__ uniforms, int k, Params p, Scratch* scratch, int* out) {
    __shared__ BlockShared<BLOCK> sh;
    BlockExec<BLOCK> ex(sh);
    int row = blockIdx.x;
    const float* x = target + (size_t)row * p.n_vocab;
    const float* y = (draft != nullptr && row < k) ? draft + (size_t)row * p.n_vocab : nullptr;
    RowDecision r = decide_stochastic_row(ex, x, y, row < k ? drafts[row] : -1,
                                          row < k ? uniforms[row] : 0.0, uniforms[k], p);
    finish_step(scratch, k, drafts, r, out);
}

// Device buffers reused across steps, grown on demand.
struct DeviceState {
    std::mutex lock;
    float* target = nullptr;
    float* draft = nullptr;
    size_t capacity = 0;  // floats per buffer
    int* drafts = nullptr;
    double* uniforms = nullptr;
    int* out = nullptr;
    Scratch* scratch = nullptr;
    cudaStream_t stream = nullptr;
};

DeviceState& state() {
    static DeviceState s;
    return s;
}

cudaError_t ensure_buffers(DeviceState& s, size_t floats) {
    cudaError_t err = cudaSuccess;
    if (s.stream == nullptr) {
        if ((err = cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking))) return err;
        if ((err = cudaMalloc(&s.drafts, sizeof(int) * (MAX_K + 1)))) return err;
        if ((err = cudaMalloc(&s.uniforms, sizeof(double) * (MAX_K + 1)))) return err;
        if ((err = cudaMalloc(&s.out, sizeof(int) * (MAX_K + 3)))) return err;
        if ((err = cudaMalloc(&s.scratch, sizeof(Scratch)))) return err;
        if ((err = cudaMemset(s.scratch, 0, sizeof(Scratch)))) return err;
    }
    if (floats > s.capacity) {
        cudaFree(s.target);
        cudaFree(s.draft);
        s.target = s.draft = nullptr;
        s.capacity = 0;
        if ((err = cudaMalloc(&s.target, sizeof(float) * floats))) return err;
        if ((err = cudaMalloc(&s.draft, sizeof(float) * floats))) return err;
        s.capacity = floats;
    }
    return cudaSuccess;
}

}  // namespace lsk

extern "C" {

// cudaGetDeviceCount: 0 = success; 35 = insufficient driver (none here); 100 = no device.
int lsk_device_count(int* count) {
    *count = 0;
    return (int)cudaGetDeviceCount(count);
}

int lsk_device_capability(int device, int* major, int* minor) {
    cudaError_t err = cudaDeviceGetAttribute(major, cudaDevAttrComputeCapabilityMajor, device);
    if (err) return (int)err;
    return (int)cudaDeviceGetAttribute(minor, cudaDevAttrComputeCapabilityMinor, device);
}

int lsk_runtime_version(int* version) { return (int)cudaRuntimeGetVersion(version); }

const char* lsk_error_name(int err) { return cudaGetErrorName((cudaError_t)err); }

const char* lsk_error_string(int err) { return cudaGetErrorString((cudaError_t)err); }

int lsk_max_k(void) { return lsk::MAX_K; }

// One speculative step. target [k+1, n_vocab] and draft [k, n_vocab] (or NULL) are host
// float32; drafts [k] int32; uniforms [k+1] float64. out: [0] num_accepted, [1] source,
// [2 .. 2+k] tokens. Returns a cudaError_t (0 = success).
int lsk_accept(const float* target, const float* draft, const int* drafts, const double* uniforms,
               int k, int n_vocab, float temperature, int top_k, float top_p, int* out) {
    using namespace lsk;
    if (k < 0 || k > MAX_K || n_vocab <= 0) return (int)cudaErrorInvalidValue;
    DeviceState& s = state();
    std::lock_guard<std::mutex> guard(s.lock);
    size_t rows = (size_t)k + 1;
    cudaError_t err = ensure_buffers(s, rows * (size_t)n_vocab);
    if (err) return (int)err;
    Params p{temperature, top_k, top_p, n_vocab, fix_bits_for(n_vocab)};
    bool greedy = temperature <= 0.0f;
    if ((err = cudaMemcpyAsync(s.target, target, sizeof(float) * rows * n_vocab, cudaMemcpyHostToDevice, s.stream)))
        return (int)err;
    if (k && (err = cudaMemcpyAsync(s.drafts, drafts, sizeof(int) * k, cudaMemcpyHostToDevice, s.stream)))
        return (int)err;
    if (greedy) {
        accept_greedy_kernel<<<(unsigned)rows, BLOCK, 0, s.stream>>>(s.target, s.drafts, k, p, s.scratch, s.out);
    } else {
        bool with_q = draft != nullptr && k > 0;
        if (with_q && (err = cudaMemcpyAsync(s.draft, draft, sizeof(float) * k * (size_t)n_vocab,
                                             cudaMemcpyHostToDevice, s.stream)))
            return (int)err;
        if ((err = cudaMemcpyAsync(s.uniforms, uniforms, sizeof(double) * rows, cudaMemcpyHostToDevice, s.stream)))
            return (int)err;
        accept_stochastic_kernel<<<(unsigned)rows, BLOCK, 0, s.stream>>>(
            s.target, with_q ? s.draft : nullptr, s.drafts, s.uniforms, k, p, s.scratch, s.out);
    }
    if ((err = cudaGetLastError())) return (int)err;
    if ((err = cudaMemcpyAsync(out, s.out, sizeof(int) * (k + 3), cudaMemcpyDeviceToHost, s.stream)))
        return (int)err;
    return (int)cudaStreamSynchronize(s.stream);
}

}  // extern "C"
