// Fused acceptance for one speculative step on the GPU: one launch of k+1 blocks.
//
// Block i owns target row i (and draft row i when there is q): it applies temperature /
// top-k / top-p, runs the ratio test for draft i and, only if draft i is rejected (or i is
// the bonus row k), samples that row's recovered/bonus token. The last block to finish
// (a ticket counter) assembles the step's tokens from the first rejection, so the host
// sees one launch and one small copy back. Loaded by localspec/kernels/_cuda.py (ctypes).
//
// Batches (lsk_accept_batch): several sequences' steps, packed (see BatchArgs in
// accept_math.cuh), run in ONE launch of sum(k_i + 1) blocks: block b decides packed row b
// of the sequence that owns it with the same device functions as the single-step kernels,
// and the last of a sequence's k_i + 1 blocks (a ticket counter per sequence) assembles that
// sequence's result. Inputs arrive in at most three host->device copies (target logits,
// draft logits if any item has them, one buffer of everything else) and results leave in
// one copy back.
#include <cuda_runtime.h>

#include <cstring>
#include <mutex>
#include <vector>

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

// Record row `row` (0..k) of one step; the last of the step's k+1 blocks to get here
// assembles the step's result. accepted/token: that step's k+1 slots; done: its counter.
__device__ void finish_rows(int* accepted, int* token, unsigned int* done, int row, int k, const int* drafts,
                            RowDecision r, int* out) {
    __shared__ int is_last;
    if (threadIdx.x == 0) {
        accepted[row] = r.accepted;
        token[row] = r.token;
        __threadfence();
        unsigned int ticket = atomicAdd(done, 1u);
        is_last = ticket == (unsigned int)k;
    }
    __syncthreads();
    if (is_last && threadIdx.x == 0) {
        __threadfence();
        const volatile int* acc = accepted;
        const volatile int* tok = token;
        assemble_result(k, drafts, acc, tok, out);
        *done = 0u;  // ready for the next launch
    }
}

__device__ void finish_step(Scratch* scratch, int k, const int* drafts, RowDecision r, int* out) {
    finish_rows(scratch->accepted, scratch->token, &scratch->done, blockIdx.x, k, drafts, r, out);
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

// One block per packed row of a batch (grid = row_offset[n_items]); greedy and sampled
// sequences mix in one launch (decide_batch_row branches per sequence, uniformly per block).
// accepted/token: [R] per-row slots; done: [n_items] counters (zero between launches).
__global__ void __launch_bounds__(BLOCK) accept_batch_kernel(BatchArgs b, int* accepted, int* token,
                                                             unsigned int* done, int* out) {
    __shared__ BlockShared<BLOCK> sh;
    BlockExec<BLOCK> ex(sh);
    BatchRow r = batch_row(b, (int)blockIdx.x);
    RowDecision d = decide_batch_row(ex, r);
    finish_rows(accepted + r.first, token + r.first, done + r.item, r.i, r.k, r.drafts, d,
                out + r.first + 2 * r.item);
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
    // Batches: one device buffer for the small per-item arrays, drafts and uniforms (staged
    // in `meta_host`), per-row slots, per-item counters, the packed output.
    unsigned char* meta = nullptr;
    size_t meta_capacity = 0;  // bytes
    std::vector<unsigned char> meta_host;
    int* rows_accepted = nullptr;
    int* rows_token = nullptr;
    size_t rows_capacity = 0;  // rows
    unsigned int* item_done = nullptr;
    size_t items_capacity = 0;  // items
    int* batch_out = nullptr;
    size_t out_capacity = 0;  // ints
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

cudaError_t ensure_batch_buffers(DeviceState& s, size_t meta_bytes, size_t rows, size_t items, size_t outs) {
    cudaError_t err = cudaSuccess;
    if (meta_bytes > s.meta_capacity) {
        cudaFree(s.meta);
        s.meta = nullptr;
        s.meta_capacity = 0;
        if ((err = cudaMalloc(&s.meta, meta_bytes))) return err;
        s.meta_capacity = meta_bytes;
    }
    if (rows > s.rows_capacity) {
        cudaFree(s.rows_accepted);
        cudaFree(s.rows_token);
        s.rows_accepted = s.rows_token = nullptr;
        s.rows_capacity = 0;
        if ((err = cudaMalloc(&s.rows_accepted, sizeof(int) * rows))) return err;
        if ((err = cudaMalloc(&s.rows_token, sizeof(int) * rows))) return err;
        s.rows_capacity = rows;
    }
    if (items > s.items_capacity) {
        cudaFree(s.item_done);
        s.item_done = nullptr;
        s.items_capacity = 0;
        if ((err = cudaMalloc(&s.item_done, sizeof(unsigned int) * items))) return err;
        if ((err = cudaMemset(s.item_done, 0, sizeof(unsigned int) * items))) return err;
        s.items_capacity = items;
    }
    if (outs > s.out_capacity) {
        cudaFree(s.batch_out);
        s.batch_out = nullptr;
        s.out_capacity = 0;
        if ((err = cudaMalloc(&s.batch_out, sizeof(int) * outs))) return err;
        s.out_capacity = outs;
    }
    return cudaSuccess;
}

// Append `count` elements at an offset aligned for T; returns the offset in bytes.
template <class T>
size_t stage(std::vector<unsigned char>& buf, const T* data, size_t count) {
    size_t offset = (buf.size() + alignof(double) - 1) / alignof(double) * alignof(double);
    buf.resize(offset + sizeof(T) * count);
    if (count) memcpy(buf.data() + offset, data, sizeof(T) * count);
    return offset;
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

// A batch of steps in one launch (layout: BatchArgs in accept_math.cuh). target
// [row_offset[n_items], n_vocab] and draft [n_draft_rows, n_vocab] (or NULL) are host
// float32; row_offset [n_items + 1], q_offset [n_items] (-1: no draft logits),
// drafts [row_offset[n_items] - n_items], top_k [n_items] int32; uniforms [row_offset[n_items]]
// float64; temperature, top_p [n_items] float32. out [row_offset[n_items] + 2 n_items]:
// item i's num_accepted, source and k_i + 1 tokens at out + row_offset[i] + 2 i.
// Returns a cudaError_t (0 = success); n_items = 0 does nothing.
int lsk_accept_batch(int n_items, int n_vocab, const float* target, const float* draft, int n_draft_rows,
                     const int* row_offset, const int* q_offset, const int* drafts, const double* uniforms,
                     const float* temperature, const int* top_k, const float* top_p, int* out) {
    using namespace lsk;
    if (n_items < 0 || (n_draft_rows > 0 && draft == nullptr)) return (int)cudaErrorInvalidValue;
    if (n_items == 0) return 0;
    if (batch_layout_error(n_items, n_vocab, row_offset, q_offset, n_draft_rows, MAX_K))
        return (int)cudaErrorInvalidValue;
    size_t rows = (size_t)row_offset[n_items];
    if ((size_t)n_draft_rows > rows) return (int)cudaErrorInvalidValue;
    size_t n = (size_t)n_items;
    DeviceState& s = state();
    std::lock_guard<std::mutex> guard(s.lock);
    std::vector<unsigned char>& h = s.meta_host;
    h.clear();
    size_t o_uniforms = stage(h, uniforms, rows);
    size_t o_row_offset = stage(h, row_offset, n + 1);
    size_t o_q_offset = stage(h, q_offset, n);
    size_t o_drafts = stage(h, drafts, rows - n);
    size_t o_temperature = stage(h, temperature, n);
    size_t o_top_k = stage(h, top_k, n);
    size_t o_top_p = stage(h, top_p, n);
    size_t outs = rows + 2 * n;
    cudaError_t err = ensure_buffers(s, rows * (size_t)n_vocab);  // the draft buffer has as many rows
    if (err) return (int)err;
    if ((err = ensure_batch_buffers(s, h.size(), rows, n, outs))) return (int)err;
    if ((err = cudaMemcpyAsync(s.target, target, sizeof(float) * rows * n_vocab, cudaMemcpyHostToDevice, s.stream)))
        return (int)err;
    if (n_draft_rows > 0 && (err = cudaMemcpyAsync(s.draft, draft, sizeof(float) * (size_t)n_draft_rows * n_vocab,
                                                   cudaMemcpyHostToDevice, s.stream)))
        return (int)err;
    if ((err = cudaMemcpyAsync(s.meta, h.data(), h.size(), cudaMemcpyHostToDevice, s.stream))) return (int)err;
    BatchArgs b;
    b.target = s.target;
    b.draft = n_draft_rows > 0 ? s.draft : nullptr;
    b.row_offset = (const int*)(s.meta + o_row_offset);
    b.q_offset = (const int*)(s.meta + o_q_offset);
    b.drafts = (const int*)(s.meta + o_drafts);
    b.uniforms = (const double*)(s.meta + o_uniforms);
    b.temperature = (const float*)(s.meta + o_temperature);
    b.top_k = (const int*)(s.meta + o_top_k);
    b.top_p = (const float*)(s.meta + o_top_p);
    b.n_items = n_items;
    b.n_vocab = n_vocab;
    b.fix_bits = fix_bits_for(n_vocab);
    accept_batch_kernel<<<(unsigned)rows, BLOCK, 0, s.stream>>>(b, s.rows_accepted, s.rows_token, s.item_done,
                                                                s.batch_out);
    if ((err = cudaGetLastError())) return (int)err;
    if ((err = cudaMemcpyAsync(out, s.batch_out, sizeof(int) * outs, cudaMemcpyDeviceToHost, s.stream)))
        return (int)err;
    return (int)cudaStreamSynchronize(s.stream);
}

}  // extern "C"
