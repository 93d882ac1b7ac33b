// Attention of query rows over a transposed K/V cache head (model/kvcache.h: head_dim lines of
// `stride` elements, position j at column j), the elements f32 or IEEE half (f16), f32 arithmetic.
//
// For one query q over a span of n columns:
//   out (head_dim) = Σ_j softmax_j(scale · Σ_d q[d] K[d][j]) V[:][j]
// in a fixed order that makes the result depend only on the span's values, never on what else is
// computed beside it or where the columns are stored:
//   - a score is a chain over d from 0: s = 0; s += (q[d]·scale)·K[d][j], each step one fused
//     multiply-add on CPUs with FMA (AVX2, AVX-512), a rounded product then a rounded sum otherwise;
//   - the softmax's sum and each product with a V line run in DS_ATTEND_LANES lanes, lane l taking
//     columns 16·i + l of the span in order (then the last partial block's columns, one per lane),
//     the lanes added by a fixed pairwise tree.
// Half elements are widened to float as they are read (exactly), so a query over an f16 cache gets
// the bits it gets over an f32 cache holding the widened values.
// So ds_attend_many (several queries sharing one pass over K and V) and ds_attend2 (a token tree's
// span in two pieces) give the same bits for the same query and span.
#ifndef DS_KERNELS_ATTEND_H
#define DS_KERNELS_ATTEND_H

#define DS_ATTEND_LANES 16
// The most queries one ds_attend_many call takes (its scores buffer holds this many spans).
#define DS_ATTEND_MAX_Q 16

// nq <= DS_ATTEND_MAX_Q queries over one K/V head: out[i] (head_dim) for q[i] (head_dim) over columns
// [start[i], end[i]) of K and V (0 <= start[i] < end[i]). The queries share each read of K and V:
// a GQA group's heads and a sequence's rows (a verification, a prefill chunk, a drafter's block)
// read the cache once rather than once per query. scores: nq · scores_stride floats, scores_stride
// >= every end[i] - start[i]. Each out[i] is bit for bit the query's result alone (nq = 1).
// K and V are float, or uint16_t halves when f16 is set.
void ds_attend_many(int nq, float *const *out, const float *const *q, const int *start, const int *end,
                    const void *K, const void *V, int f16, int stride, int head_dim, float scale, float *scores,
                    int scores_stride);

// One query over a span given in two pieces: columns [0, n1) of (K, V) at `stride`, then n2 columns
// of (K2, V2) at `stride2` (a token tree's ancestors, gathered); n1 must be a multiple of
// DS_ATTEND_LANES when n2 > 0. Bit for bit ds_attend_many over one span holding the same columns.
// scores: n1 + n2 floats.
// Both pieces hold elements of the same type (f16 as above).
void ds_attend2(float *out, const float *q, const void *K, const void *V, int n1, int stride, const void *K2,
                const void *V2, int n2, int stride2, int f16, int head_dim, float scale, float *scores);

// Tests and benchmarks: run the kernels of one instruction set ("avx512", "avx2", "scalar") from now
// on, process-wide; 0 (and nothing changes) if the CPU lacks it or the name is unknown. AVX-512 and
// AVX2 give the same bits (fused multiply-adds in the same order); "scalar" rounds each product.
int ds_attend_force_isa(const char *isa);

#endif
