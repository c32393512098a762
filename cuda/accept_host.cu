// Host build of the kernel math (accept_math.cuh with SerialExec): compiled with the
// system C++ compiler as `-x c++` into a shared library, so CPU-only machines test the
// same code the device runs against localspec/kernels/reference.py.
#include "accept_math.cuh"

extern "C" {

// Same contract as lsk_accept in accept.cu, computed on the calling thread.
int lsk_accept_host(const float* target, const float* draft, const int* drafts, const double* uniforms,
                    int k, int n_vocab, float temperature, int top_k, float top_p, int* out) {
    using namespace lsk;
    if (k < 0 || k > 64 || n_vocab <= 0) return 1;
    Params p{temperature, top_k, top_p, n_vocab, fix_bits_for(n_vocab)};
    int accepted[65];
    int tokens[65];
    SerialExec ex;
    for (int row = 0; row <= k; ++row) {
        const float* x = target + (size_t)row * n_vocab;
        int d = row < k ? drafts[row] : -1;
        RowDecision r;
        if (temperature <= 0.0f) {
            r = decide_greedy_row(ex, x, d, p);
        } else {
            const float* y = (draft != nullptr && row < k) ? draft + (size_t)row * n_vocab : nullptr;
            r = decide_stochastic_row(ex, x, y, d, row < k ? uniforms[row] : 0.0, uniforms[k], p);
        }
        accepted[row] = r.accepted;
        tokens[row] = r.token;
        if (!r.accepted) {
            // Later rows cannot change the result; the device computes them in parallel.
            for (int rest = row + 1; rest <= k; ++rest) accepted[rest] = 0, tokens[rest] = -1;
            break;
        }
    }
    assemble_result(k, drafts, accepted, tokens, out);
    return 0;
}

// The processed probabilities the kernel uses (stochastic params): out [n_rows, n_vocab]
// float64, W_i / total in fixed point. Returns 0.
int lsk_probs_host(const float* logits, int n_rows, int n_vocab, float temperature, int top_k, float top_p,
                   double* out) {
    using namespace lsk;
    Params p{temperature, top_k, top_p, n_vocab, fix_bits_for(n_vocab)};
    SerialExec ex;
    for (int row = 0; row < n_rows; ++row) {
        const float* x = logits + (size_t)row * n_vocab;
        double* o = out + (size_t)row * n_vocab;
        RowStats s = row_stats(ex, x, p);
        for (int i = 0; i < n_vocab; ++i) o[i] = (double)kept_weight(x, i, s, p) / (double)s.total;
    }
    return 0;
}

}  // extern "C"
