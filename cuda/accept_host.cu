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

// Same contract as lsk_accept_batch in accept.cu (layout: BatchArgs in accept_math.cuh),
// computed on the calling thread: each packed row is located with batch_row() and decided
// with decide_batch_row(), as one block of the device kernel does. Returns 0, or 1 for an
// invalid layout.
int lsk_accept_batch_host(int n_items, int n_vocab, const float* target, const float* draft, int n_draft_rows,
                          const int* row_offset, const int* q_offset, const int* drafts, const double* uniforms,
                          const float* temperature, const int* top_k, const float* top_p, int* out) {
    using namespace lsk;
    if (n_items < 0 || (n_draft_rows > 0 && draft == nullptr)) return 1;
    if (n_items == 0) return 0;
    if (batch_layout_error(n_items, n_vocab, row_offset, q_offset, n_draft_rows, 64)) return 1;
    if (n_draft_rows > row_offset[n_items]) return 1;
    BatchArgs b{target, n_draft_rows > 0 ? draft : nullptr, row_offset, q_offset, drafts, uniforms,
                temperature, top_k, top_p, n_items, n_vocab, fix_bits_for(n_vocab)};
    SerialExec ex;
    for (int item = 0; item < n_items; ++item) {
        int first = row_offset[item];
        int k = row_offset[item + 1] - first - 1;
        int accepted[65];
        int tokens[65];
        for (int i = 0; i < 65; ++i) accepted[i] = 0, tokens[i] = -1;
        for (int i = 0; i <= k; ++i) {
            BatchRow r = batch_row(b, first + i);
            RowDecision d = decide_batch_row(ex, r);
            accepted[i] = d.accepted;
            tokens[i] = d.token;
            if (!d.accepted) break;  // later rows cannot change the result
        }
        assemble_result(k, drafts + (first - item), accepted, tokens, out + first + 2 * item);
    }
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
