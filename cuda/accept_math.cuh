// The acceptance rule of localspec/kernels/reference.py as __host__ __device__ code.
//
// Every function here is written once against an "executor" E that supplies the
// reductions: SerialExec (below) runs a row on one host thread; BlockExec
// (block_exec.cuh) runs it on one CUDA thread block. The host build of this header is
// what the CPU-only test suite compares with the NumPy reference, so the device kernel
// and the host build share the per-element math, the radix selections, the fixed-point
// sums and the inverse-CDF search; only the order of integer additions differs, and
// integer addition is associative, so both produce the same bits given the same expf.
//
// Numerics (float32 logits in, the reference is float64):
//  - weights w = expf((x - max) / T), in float32;
//  - sums are 64-bit fixed point: W = trunc(w * 2^fix_bits) with fix_bits chosen so that
//    n_vocab * 2^fix_bits < 2^62; integer sums are exact and deterministic, which keeps
//    the top-p nucleus and the sampled token reproducible run to run;
//  - top-k and top-p thresholds are radix selections over an order-preserving 32-bit key
//    of the raw logit (ties at the boundary are kept, as in the reference);
//  - the ratio test and the final uniform are evaluated in double.
#pragma once

#include <stdint.h>

#ifdef __CUDACC__
#define LSK_HD __host__ __device__ __forceinline__
#else
#include <math.h>
#include <string.h>
#define LSK_HD inline
#endif

namespace lsk {

// Values of the `source` output; localspec/kernels/_cuda.py maps them to TokenSource.
enum Source : int { SOURCE_PLAIN = 0, SOURCE_RECOVERED = 2, SOURCE_BONUS = 3 };

constexpr int RADIX_BITS = 8;
constexpr int RADIX_BINS = 1 << RADIX_BITS;

// Sampling parameters as the kernel sees them (see localspec.types.SamplingParams).
struct Params {
    float temperature;  // <= 0: greedy
    int top_k;          // 0 or >= n_vocab: off
    float top_p;        // >= 1: off
    int n_vocab;
    int fix_bits;       // fixed-point scale of weights, from fix_bits_for()
};

// Per-row result of the processed distribution: weights are kept where key >= min_key.
struct RowStats {
    float max_logit;    // max over the row (always kept)
    int argmax;         // lowest index holding max_logit
    uint32_t min_key;   // keep x with logit_key(x) >= min_key (top-k and top-p combined)
    uint64_t total;     // sum of fixed-point weights over the kept set
};

// Per-row decision: accepted (draft rows) and the token this row would emit.
struct RowDecision {
    int accepted;
    int token;
};

// Fixed-point bits so that a sum of n weights <= 1 cannot overflow 2^62.
LSK_HD int fix_bits_for(int n_vocab) {
    int bitlen = 0;
    for (uint32_t v = (uint32_t)n_vocab; v; v >>= 1) ++bitlen;
    int bits = 62 - bitlen;
    return bits > 48 ? 48 : bits;
}

LSK_HD uint32_t float_bits(float x) {
#ifdef __CUDA_ARCH__
    return __float_as_uint(x);
#else
    uint32_t b;
    memcpy(&b, &x, sizeof b);
    return b;
#endif
}

// Order-preserving key: a < b  <=>  logit_key(a) < logit_key(b); -0 and +0 share a key.
LSK_HD uint32_t logit_key(float x) {
    if (x == 0.0f) x = 0.0f;
    uint32_t b = float_bits(x);
    return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}

LSK_HD float weight_of(float x, float max_logit, float temperature) {
    return expf((x - max_logit) / temperature);
}

// trunc(w * 2^bits) for w in [0, 1]; the scaling by a power of two is exact in float.
LSK_HD uint64_t to_fixed(float w, int bits) {
    float scaled = w * (float)(1ull << bits);
    return scaled > 0.0f ? (uint64_t)scaled : 0ull;
}

// ---------------------------------------------------------------------------------------
// Executor for one host thread: every "block" reduction is the identity.
struct SerialExec {
    static constexpr int warp_size = 1;
    uint64_t hist[RADIX_BINS];

    LSK_HD int tid() const { return 0; }
    LSK_HD int nthreads() const { return 1; }
    LSK_HD int lane() const { return 0; }
    LSK_HD int warp() const { return 0; }
    LSK_HD int nwarps() const { return 1; }
    LSK_HD void sync() {}
    LSK_HD void hist_clear() {
        for (int b = 0; b < RADIX_BINS; ++b) hist[b] = 0;
    }
    LSK_HD void hist_add(int bin, uint64_t v) { hist[bin] += v; }
    LSK_HD void hist_merge() {}
    LSK_HD uint64_t hist_at(int bin) const { return hist[bin]; }
    LSK_HD float max_f(float v) { return v; }
    LSK_HD void argmax(float&, int&) {}
    LSK_HD uint64_t sum_u64(uint64_t v) { return v; }
    LSK_HD uint64_t warp_sum(uint64_t v) { return v; }
    LSK_HD uint64_t warp_incl_scan(uint64_t v) { return v; }
    LSK_HD uint32_t warp_ballot(bool b) { return b ? 1u : 0u; }
    LSK_HD uint64_t warp_last(uint64_t v) { return v; }
    LSK_HD uint64_t warp_prefix(uint64_t seg_sum, uint64_t* total) {
        *total = seg_sum;
        return 0;
    }
    LSK_HD int broadcast_found(int found) { return found; }
};

LSK_HD int first_set_bit(uint32_t v) {
#ifdef __CUDA_ARCH__
    return __ffs(v) - 1;
#else
    return __builtin_ctz(v);
#endif
}

// ---------------------------------------------------------------------------------------
// Radix selection: the largest key K such that the mass (count or fixed-point weight) of
// elements with key >= K is >= need. `elem(i, &key, &mass)` returns false for elements
// outside the candidate set. Four passes of RADIX_BITS over the 32-bit key.
template <class E, class F>
LSK_HD uint32_t radix_select(E& ex, const F& elem, int n, uint64_t need) {
    uint32_t prefix = 0, mask = 0;
    uint64_t above = 0;  // mass of elements whose decided key bits are above the prefix
    for (int shift = 32 - RADIX_BITS; shift >= 0; shift -= RADIX_BITS) {
        ex.hist_clear();
        ex.sync();
        for (int i = ex.tid(); i < n; i += ex.nthreads()) {
            uint32_t key;
            uint64_t mass;
            if (elem(i, &key, &mass) && (key & mask) == prefix && mass)
                ex.hist_add((int)((key >> shift) & (RADIX_BINS - 1)), mass);
        }
        ex.sync();
        ex.hist_merge();
        uint64_t cum = above;
        int bin = RADIX_BINS - 1;
        for (; bin > 0; --bin) {
            uint64_t next = cum + ex.hist_at(bin);
            if (next >= need) break;
            cum = next;
        }
        above = cum;
        prefix |= (uint32_t)bin << shift;
        mask |= (uint32_t)(RADIX_BINS - 1) << shift;
        ex.sync();
    }
    return prefix;
}

struct CountElem {
    const float* x;
    LSK_HD bool operator()(int i, uint32_t* key, uint64_t* mass) const {
        *key = logit_key(x[i]);
        *mass = 1;
        return true;
    }
};

struct MassElem {
    const float* x;
    float max_logit, temperature;
    uint32_t min_key;
    int bits;
    LSK_HD bool operator()(int i, uint32_t* key, uint64_t* mass) const {
        float v = x[i];
        *key = logit_key(v);
        if (*key < min_key) return false;
        *mass = to_fixed(weight_of(v, max_logit, temperature), bits);
        return true;
    }
};

// Fixed-point weight of token i under `s` (0 outside the kept set).
LSK_HD uint64_t kept_weight(const float* x, int i, const RowStats& s, const Params& p) {
    float v = x[i];
    if (logit_key(v) < s.min_key) return 0;
    return to_fixed(weight_of(v, s.max_logit, p.temperature), p.fix_bits);
}

template <class E>
LSK_HD uint64_t kept_total(E& ex, const float* x, const RowStats& s, const Params& p) {
    uint64_t part = 0;
    for (int i = ex.tid(); i < p.n_vocab; i += ex.nthreads()) part += kept_weight(x, i, s, p);
    return ex.sum_u64(part);
}

// Max and argmax (lowest index on ties) of a row.
template <class E>
LSK_HD void row_argmax(E& ex, const float* x, int n, float* best_out, int* index_out) {
    float best = x[0];
    int index = 0;
    for (int i = ex.tid(); i < n; i += ex.nthreads()) {
        float v = x[i];
        if (v > best || (v == best && i < index)) {
            best = v;
            index = i;
        }
    }
    ex.argmax(best, index);
    *best_out = best;
    *index_out = index;
}

// Temperature, top-k, top-p for one row of logits [n_vocab] (stochastic params only).
template <class E>
LSK_HD RowStats row_stats(E& ex, const float* x, const Params& p) {
    RowStats s;
    row_argmax(ex, x, p.n_vocab, &s.max_logit, &s.argmax);
    s.min_key = 0;
    if (p.top_k > 0 && p.top_k < p.n_vocab) {
        CountElem count{x};
        s.min_key = radix_select(ex, count, p.n_vocab, (uint64_t)p.top_k);
    }
    s.total = kept_total(ex, x, s, p);
    if (p.top_p < 1.0f) {
        // Smallest nucleus reaching top_p of the mass: the largest threshold whose kept
        // mass is >= top_p * total (the reference's "last token of the shortest prefix").
        double need_d = ceil((double)p.top_p * (double)s.total);
        uint64_t need = need_d < 1.0 ? 1ull : (uint64_t)need_d;
        if (need > s.total) need = s.total;
        MassElem mass{x, s.max_logit, p.temperature, s.min_key, p.fix_bits};
        uint32_t key = radix_select(ex, mass, p.n_vocab, need);
        if (key > s.min_key) {
            s.min_key = key;
            s.total = kept_total(ex, x, s, p);
        }
    }
    return s;
}

// ---------------------------------------------------------------------------------------
// Inverse-CDF sampling over fixed-point weights: the smallest index whose inclusive
// cumulative weight exceeds floor(u * total). Returns -1 when the total weight is 0.
// The row is split into one contiguous segment per warp; the warp whose segment holds
// the crossing scans it tile by tile.
template <class E, class W>
LSK_HD int sample_weights(E& ex, const W& weight, int n, double u) {
    int nw = ex.nwarps();
    int seg = (n + nw - 1) / nw;
    int s0 = ex.warp() * seg;
    int s1 = s0 + seg < n ? s0 + seg : n;
    uint64_t part = 0;
    for (int i = s0 + ex.lane(); i < s1; i += E::warp_size) part += weight(i);
    uint64_t seg_sum = ex.warp_sum(part);
    uint64_t total;
    uint64_t before = ex.warp_prefix(seg_sum, &total);
    if (total == 0) return -1;
    uint64_t target = (uint64_t)floor(u * (double)total);
    if (target >= total) target = total - 1;
    int found = -1;
    if (before <= target && target < before + seg_sum) {  // uniform within the warp
        uint64_t base = before;
        for (int b0 = s0; b0 < s1; b0 += E::warp_size) {
            int i = b0 + ex.lane();
            uint64_t incl = ex.warp_incl_scan(i < s1 ? weight(i) : 0ull);
            uint32_t hit = ex.warp_ballot(base + incl > target);
            if (hit) {
                found = b0 + first_set_bit(hit);
                break;
            }
            base += ex.warp_last(incl);
        }
    }
    return ex.broadcast_found(found);
}

// Target weights, optionally with one token zeroed (recovery for drafts without q).
struct TargetWeight {
    const float* x;
    RowStats s;
    Params p;
    int zeroed;
    LSK_HD uint64_t operator()(int i) const { return i == zeroed ? 0ull : kept_weight(x, i, s, p); }
};

// max(0, p - q) in float32 probabilities, as fixed point.
struct ResidualWeight {
    const float* x;
    const float* y;
    RowStats sp, sq;
    Params p;
    float scale_p, scale_q;  // 2^fix_bits / total: fixed-point weight -> probability
    LSK_HD uint64_t operator()(int i) const {
        float pv = logit_key(x[i]) >= sp.min_key ? weight_of(x[i], sp.max_logit, p.temperature) * scale_p : 0.0f;
        float qv = logit_key(y[i]) >= sq.min_key ? weight_of(y[i], sq.max_logit, p.temperature) * scale_q : 0.0f;
        float r = pv - qv;
        return r > 0.0f ? to_fixed(r, p.fix_bits) : 0ull;
    }
};

// Greedy: the row's argmax; a draft row accepts when it equals the draft token.
template <class E>
LSK_HD RowDecision decide_greedy_row(E& ex, const float* x, int draft_token, const Params& p) {
    float best;
    int index;
    row_argmax(ex, x, p.n_vocab, &best, &index);
    RowDecision r;
    r.accepted = draft_token >= 0 && index == draft_token;
    r.token = index;
    return r;
}

// Stochastic: ratio test for a draft row (draft_token >= 0), then the recovered token if
// it is rejected; for the last row (draft_token < 0) the bonus/plain token.
template <class E>
LSK_HD RowDecision decide_stochastic_row(E& ex, const float* x, const float* y, int draft_token,
                                         double u_test, double u_sample, const Params& p) {
    RowDecision r;
    r.accepted = 0;
    r.token = -1;
    RowStats sp = row_stats(ex, x, p);
    if (draft_token < 0) {
        TargetWeight w{x, sp, p, -1};
        r.token = sample_weights(ex, w, p.n_vocab, u_sample);
        return r;
    }
    double pd = (double)kept_weight(x, draft_token, sp, p) / (double)sp.total;
    int recovered = -1;
    if (y == nullptr) {
        if (u_test < pd) {
            r.accepted = 1;
            return r;
        }
        TargetWeight w{x, sp, p, draft_token};
        recovered = sample_weights(ex, w, p.n_vocab, u_sample);
    } else {
        RowStats sq = row_stats(ex, y, p);
        double qd = (double)kept_weight(y, draft_token, sq, p) / (double)sq.total;
        if (u_test * qd < pd) {
            r.accepted = 1;
            return r;
        }
        float one = (float)(1ull << p.fix_bits);
        ResidualWeight w{x, y, sp, sq, p, (float)(1.0 / (double)sp.total) * one,
                         (float)(1.0 / (double)sq.total) * one};
        recovered = sample_weights(ex, w, p.n_vocab, u_sample);
    }
    if (recovered < 0) {
        // Not in algorithm 1, but needed when p == q bit for bit: fall back to p.
        TargetWeight w{x, sp, p, -1};
        recovered = sample_weights(ex, w, p.n_vocab, u_sample);
    }
    r.token = recovered;
    return r;
}

// ---------------------------------------------------------------------------------------
// A batch of steps (one per sequence) packed for one call: lsk_accept_batch (accept.cu)
// runs one block per packed row, lsk_accept_batch_host (accept_host.cu) loops over rows;
// both locate a row with batch_row() and decide it with decide_batch_row(), which calls
// the same decide_greedy_row / decide_stochastic_row as the single-step entry points.
//
// Item i owns target rows [row_offset[i], row_offset[i+1]) (k_i + 1 rows, k_i <= MAX_K),
// its drafts are drafts[row_offset[i] - i ..] (k_i of them: the packed drafts skip one
// row per earlier item), its uniforms are uniforms[row_offset[i] ..] (k_i + 1), its draft
// logits rows are draft[q_offset[i] ..] (k_i rows) or none when q_offset[i] < 0, and its
// output is out[row_offset[i] + 2 i ..]: [0] num_accepted, [1] source, [2 .. 2+k_i] tokens
// (k_i + 3 ints, as the single call's `out`).
struct BatchArgs {
    const float* target;       // [R, n_vocab], R = row_offset[n_items]
    const float* draft;        // [Q, n_vocab] or null
    const int* row_offset;     // [n_items + 1], row_offset[0] = 0, increasing
    const int* q_offset;       // [n_items], -1 = no draft logits (or greedy)
    const int* drafts;         // [R - n_items]
    const double* uniforms;    // [R]
    const float* temperature;  // [n_items], <= 0: greedy
    const int* top_k;          // [n_items]
    const float* top_p;        // [n_items]
    int n_items;
    int n_vocab;
    int fix_bits;
};

// Where one packed row belongs, and the inputs of its row decision.
struct BatchRow {
    int item;      // sequence index
    int first;     // its first packed row (row_offset[item])
    int k;         // its number of drafts
    int i;         // row within the sequence: 0..k (k = the bonus / plain row)
    Params p;
    const float* x;      // target row [n_vocab]
    const float* y;      // draft logits row, or null
    const int* drafts;   // the sequence's drafts [k]
    int draft_token;     // drafts[i], or -1 on row k
    double u_test;       // uniforms[first + i] (draft rows), 0 on row k
    double u_sample;     // uniforms[first + k]
};

LSK_HD BatchRow batch_row(const BatchArgs& b, int row) {
    int lo = 0, hi = b.n_items;  // the last item whose first row is <= row
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (b.row_offset[mid] <= row) lo = mid;
        else hi = mid;
    }
    BatchRow r;
    r.item = lo;
    r.first = b.row_offset[lo];
    r.k = b.row_offset[lo + 1] - r.first - 1;
    r.i = row - r.first;
    r.p = Params{b.temperature[lo], b.top_k[lo], b.top_p[lo], b.n_vocab, b.fix_bits};
    r.x = b.target + (size_t)row * b.n_vocab;
    int q = b.q_offset[lo];
    r.y = (b.draft != nullptr && q >= 0 && r.i < r.k) ? b.draft + (size_t)(q + r.i) * b.n_vocab : nullptr;
    r.drafts = b.drafts + (r.first - lo);
    r.draft_token = r.i < r.k ? r.drafts[r.i] : -1;
    const double* u = b.uniforms + r.first;
    r.u_test = r.i < r.k ? u[r.i] : 0.0;
    r.u_sample = u[r.k];
    return r;
}

template <class E>
LSK_HD RowDecision decide_batch_row(E& ex, const BatchRow& r) {
    if (r.p.temperature <= 0.0f) return decide_greedy_row(ex, r.x, r.draft_token, r.p);
    return decide_stochastic_row(ex, r.x, r.y, r.draft_token, r.u_test, r.u_sample, r.p);
}

// Checks of lsk_accept_batch(_host)'s per-item layout on the host: 0 if valid.
LSK_HD int batch_layout_error(int n_items, int n_vocab, const int* row_offset, const int* q_offset,
                              int n_draft_rows, int max_k) {
    if (n_items < 0 || n_vocab <= 0 || n_draft_rows < 0 || row_offset[0] != 0) return 1;
    for (int i = 0; i < n_items; ++i) {
        int k = row_offset[i + 1] - row_offset[i] - 1;
        if (k < 0 || k > max_k) return 1;
        if (q_offset[i] >= 0 && q_offset[i] + k > n_draft_rows) return 1;
    }
    return 0;
}

// Combine per-row decisions: accepted drafts up to the first rejection, then that row's
// token. out: [0] num_accepted, [1] source, [2 .. 2+num_accepted] tokens.
template <class Flags, class Tokens>
LSK_HD void assemble_result(int k, const int* drafts, const Flags& accepted, const Tokens& tokens, int* out) {
    int j = 0;
    while (j < k && accepted[j]) {
        out[2 + j] = drafts[j];
        ++j;
    }
    out[2 + j] = tokens[j];
    out[0] = j;
    out[1] = j < k ? SOURCE_RECOVERED : (k ? SOURCE_BONUS : SOURCE_PLAIN);
}

}  // namespace lsk
