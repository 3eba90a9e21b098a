// NativeLstm2 kernel math: plain C++ (no TensorFlow or Eigen headers), so that it compiles in about a second and
// with any -march. The TF op glue (lstm.cc) calls these functions; see lstm.cc for the op's meaning.
#ifndef RETURNN_LITE_LSTM_KERNEL_H_
#define RETURNN_LITE_LSTM_KERNEL_H_

#include <cstdint>

namespace returnn_lite {
namespace lstm_kernel {

// Runs fn(arg, begin, end) over a split of [0, n) (possibly in parallel, e.g. on TF's intra-op thread pool);
// cost_per_unit: rough cycles of one unit, so that the pool can choose the split.
typedef void (*ShardFn)(void* arg, int64_t begin, int64_t end);
struct Parallel {
  void (*parallel_for)(void* pool, int64_t n, int64_t cost_per_unit, ShardFn fn, void* arg);
  void* pool;
  void Run(int64_t n, int64_t cost_per_unit, ShardFn fn, void* arg) const { parallel_for(pool, n, cost_per_unit, fn, arg); }
};

// Runs on the calling thread and a helper thread of the library (started on first use), while the calling op is the
// only Forward/Backward running in the process (else, e.g. beside the other direction of a BLSTM, on the calling
// thread alone). TF's C API gives a custom kernel no access to TF's intra-op thread pool.
Parallel HelperParallel();

// Forward over z [T, B, 4n] (gates j, i, f, o); w_re [n, 4n]; c0, h0 [B, n]; lens [B].
// Outputs: y, c [T, B, n] (0 past the length), gates [T, B, 4n] (activated; 0 past the length),
// c_final, h_final [B, n].
template <typename T>
void Forward(const Parallel& par, int64_t n_time, int64_t n_batch, int64_t n, bool reverse, const T* z,
             const T* w_re, const T* c0, const T* h0, const int32_t* lens, T* y, T* c, T* gates, T* c_final,
             T* h_final);

// Gradient: from the forward's inputs and outputs and dy [T, B, n], dc_final, dh_final [B, n] to
// dz [T, B, 4n], dw_re [n, 4n], dc0, dh0 [B, n].
template <typename T>
void Backward(const Parallel& par, int64_t n_time, int64_t n_batch, int64_t n, bool reverse, const T* w_re,
              const T* c0, const T* h0, const int32_t* lens, const T* y, const T* c, const T* gates, const T* dy,
              const T* dc_final, const T* dh_final, T* dz, T* dw_re, T* dc0, T* dh0);

}  // namespace lstm_kernel
}  // namespace returnn_lite

// Runs Forward and Backward on a small input (float and double) and compares them with a scalar reference:
// 1 if all is well. returnn_lite/native_op.py calls it in a separate process right after the build, so that a
// library whose flags do not fit this CPU (an illegal instruction) is found there and not in the training process.
extern "C" int returnn_lite_lstm_selftest();

#endif  // RETURNN_LITE_LSTM_KERNEL_H_
