// NativeLstm2 kernel math (see lstm_kernel.h and lstm.cc). Plain C++ with GCC/Clang vector extensions, no TF or
// Eigen headers: it compiles in about a second, and with -march=native where the compiler supports it.
//
// Per step: one GEMM h_prev @ W_re (W_re packed once per call into column panels), then the gate math per batch
// entry. The gradient: per step the gate derivatives and one GEMM dz @ W_re^T; at the end one GEMM over all frames
// for dW_re = sum_t h_prev[t]^T dz[t] (on the thread pool).
//
// float: exp/tanh/sigmoid by a range-reduced polynomial (Cephes-style, ~1 ulp of exp), written with arithmetic and
// selects only so that the compiler vectorises the gate loops. double: the C library's exp/tanh.

#include "lstm_kernel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace returnn_lite {
namespace lstm_kernel {
namespace {

// ------------------------------------------------------------------------------------------------------------
// GEMM: C[M, N] (+)= A[M, K] @ B[K, N], with A and B packed into register-tile panels (zero-padded at the edges).

// the target's vector register width (wider vectors split over narrow registers compile badly)
#if defined(__AVX512F__)
constexpr int kVecBytes = 64;
#elif defined(__AVX__)
constexpr int kVecBytes = 32;
#else
constexpr int kVecBytes = 16;  // SSE2 (the x86-64 baseline), NEON (aarch64), ...
#endif
// rows of a register tile (2 * kMR accumulators, see MicroKernel)
#if defined(__AVX512F__)
constexpr int kMR = 8;
#else
constexpr int kMR = 4;
#endif
constexpr int kKC = 128;   // depth of a packed block (a B block of kKC x NR and the A rows it meets stay in L1)

// Vector types (GCC/Clang vector extensions; lowered to AVX-512, AVX, SSE or NEON as the target has them), and
// their unaligned twins for loads and stores (declared directly: attributes on template arguments are dropped).
typedef float VecF __attribute__((vector_size(kVecBytes)));
typedef double VecD __attribute__((vector_size(kVecBytes)));
typedef float VecFU __attribute__((vector_size(kVecBytes), aligned(alignof(float))));
typedef double VecDU __attribute__((vector_size(kVecBytes), aligned(alignof(double))));

inline VecF Load(const float* p) { return *reinterpret_cast<const VecFU*>(p); }
inline VecD Load(const double* p) { return *reinterpret_cast<const VecDU*>(p); }
inline void Store(float* p, VecF v) { *reinterpret_cast<VecFU*>(p) = v; }
inline void Store(double* p, VecD v) { *reinterpret_cast<VecDU*>(p) = v; }

template <typename T>
struct Vec;
template <>
struct Vec<float> {
  typedef VecF type;
};
template <>
struct Vec<double> {
  typedef VecD type;
};

template <typename T>
struct Tile {
  typedef typename Vec<T>::type V;
  static constexpr int kLanes = kVecBytes / sizeof(T);
  static constexpr int kNR = 2 * kLanes;  // columns of a register tile
};

// A matrix read as m[r * rs + k * ks] (covers row-major, transposed and strided views).
template <typename T>
struct View {
  const T* p;
  int64_t rs, ks;
  T at(int64_t r, int64_t k) const { return p[r * rs + k * ks]; }
};

// B [K, N] as blocks [pc][panel][kc][NR]: packed once (each kc x NR block contiguous, columns past N zero; for a B
// used in many GEMMs), or a row-major B read in place whose blocks each GEMM packs one at a time (no full copy).
template <typename T>
struct PackedB {
  int64_t K = 0, N = 0, panels = 0;
  const T* rows = nullptr;  // in place: B [K, N] row-major
  std::vector<T> data;

  // b.at(k, j) is B[k, j]
  void Pack(View<T> b, int64_t k_dim, int64_t n_dim) {
    Shape(k_dim, n_dim);
    data.assign(static_cast<size_t>(panels * Tile<T>::kNR * K), T(0));
    for (int64_t pc = 0; pc < K; pc += kKC)
      for (int64_t jp = 0; jp < panels; ++jp) PackBlock(b, pc, jp, data.data() + Offset(pc, jp));
  }
  void InPlace(const T* b, int64_t k_dim, int64_t n_dim) {
    Shape(k_dim, n_dim);
    rows = b;
  }
  // the block (pc, jp), packed into *buf if B is in place
  const T* Block(int64_t pc, int64_t jp, std::vector<T>* buf) const {
    if (!rows) return data.data() + Offset(pc, jp);
    constexpr int NR = Tile<T>::kNR;
    const int64_t kc = std::min<int64_t>(kKC, K - pc), j0 = jp * NR, nr = std::min<int64_t>(NR, N - j0);
    buf->resize(static_cast<size_t>(kc * NR));
    T* dst = buf->data();
    for (int64_t k = 0; k < kc; ++k) {  // rows of the block: contiguous copies
      std::copy_n(rows + (pc + k) * N + j0, nr, dst + k * NR);
      std::fill(dst + k * NR + nr, dst + (k + 1) * NR, T(0));
    }
    return dst;
  }

 private:
  void Shape(int64_t k_dim, int64_t n_dim) {
    K = k_dim;
    N = n_dim;
    panels = (N + Tile<T>::kNR - 1) / Tile<T>::kNR;
  }
  int64_t Offset(int64_t pc, int64_t jp) const {
    return pc * panels * Tile<T>::kNR + jp * std::min<int64_t>(kKC, K - pc) * Tile<T>::kNR;
  }
  void PackBlock(View<T> b, int64_t pc, int64_t jp, T* dst) const {
    constexpr int NR = Tile<T>::kNR;
    const int64_t kc = std::min<int64_t>(kKC, K - pc), j0 = jp * NR, nr = std::min<int64_t>(NR, N - j0);
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = 0; j < nr; ++j) dst[k * NR + j] = b.at(pc + k, j0 + j);
  }
};

// A [M, K] packed as blocks [pc][row tile][kc][MR]: rows past M zero.
template <typename T>
void PackA(View<T> a, int64_t m_dim, int64_t k_dim, std::vector<T>* out) {
  const int64_t tiles = (m_dim + kMR - 1) / kMR;
  out->assign(static_cast<size_t>(tiles * kMR * k_dim), T(0));
  for (int64_t pc = 0; pc < k_dim; pc += kKC) {
    const int64_t kc = std::min<int64_t>(kKC, k_dim - pc);
    for (int64_t it = 0; it < tiles; ++it) {
      T* dst = out->data() + pc * tiles * kMR + it * kc * kMR;
      const int64_t i0 = it * kMR, mr = std::min<int64_t>(kMR, m_dim - i0);
      for (int64_t k = 0; k < kc; ++k)
        for (int64_t i = 0; i < mr; ++i) dst[k * kMR + i] = a.at(i0 + i, pc + k);
    }
  }
}

// One register tile: C[mr, nr] (+)= Ap[kc][MR] @ Bp[kc][NR]: 2 * MR vector accumulators (fully unrolled, so that
// they stay in registers: 16 of AVX-512's 32, 8 of AVX's or SSE's 16).
template <typename T>
inline void MicroKernel(int64_t kc, const T* __restrict ap, const T* __restrict bp, T* c, int64_t ldc, int64_t mr,
                        int64_t nr, bool accumulate) {
  typedef typename Tile<T>::V V;
  constexpr int L = Tile<T>::kLanes, NR = Tile<T>::kNR;
  V acc0[kMR] = {}, acc1[kMR] = {};
  for (int64_t k = 0; k < kc; ++k) {
    const V b0 = Load(bp + k * NR), b1 = Load(bp + k * NR + L);
    const T* a = ap + k * kMR;
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      acc0[i] += a[i] * b0;
      acc1[i] += a[i] * b1;
    }
  }
  if (mr == kMR && nr == NR) {
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      T* row = c + i * ldc;
      Store(row, accumulate ? Load(row) + acc0[i] : acc0[i]);
      Store(row + L, accumulate ? Load(row + L) + acc1[i] : acc1[i]);
    }
    return;
  }
  T tmp[kMR][NR];
  for (int i = 0; i < kMR; ++i) {
    Store(tmp[i], acc0[i]);
    Store(tmp[i] + L, acc1[i]);
  }
  for (int64_t i = 0; i < mr; ++i)
    for (int64_t j = 0; j < nr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + tmp[i][j] : tmp[i][j];
}


// ------------------------------------------------------------------------------------------------------------
// A helper thread for an op that runs alone (see HelperParallel in lstm_kernel.h).

std::atomic<int> g_active_ops{0};  // Forward/Backward calls running now, in all threads

struct ActiveOp {
  ActiveOp() { g_active_ops.fetch_add(1, std::memory_order_relaxed); }
  ~ActiveOp() { g_active_ops.fetch_sub(1, std::memory_order_relaxed); }
};

inline void CpuRelax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// One job at a time: the caller and the helper take chunks of [0, n) from a counter that carries the job's
// generation in its high bits, so that a helper that comes late can never take a chunk of a later job; the caller
// does every chunk that nobody took, so a helper that is not scheduled only costs the wake-up call.
class Helper {
 public:
  static Helper* Get() {
    static Helper* helper = [] {
      Helper* h = new Helper;  // never deleted: the detached thread may use it until the process ends
      try {
        std::thread([h] { h->Loop(); }).detach();
      } catch (...) {
        h->broken_ = true;  // no thread: every job runs on its caller
      }
      return h;
    }();
    return helper;
  }

  // false if the helper is busy with another job (or has no thread): then the caller runs the work alone
  bool Run(int64_t n, int64_t chunk, ShardFn fn, void* arg) {
    if (broken_ || in_use_.exchange(true, std::memory_order_acquire)) return false;
    uint64_t gen;
    {
      std::lock_guard<std::mutex> lock(mu_);
      gen = ++gen_;
      fn_ = fn;
      arg_ = arg;
      n_ = n;
      chunk_ = chunk;
      done_.store(0, std::memory_order_relaxed);
      next_.store(gen << 32, std::memory_order_release);
      pending_.store(gen, std::memory_order_release);
    }
    cv_.notify_one();
    Work(gen, fn, arg, n, chunk);
    for (int spins = 0; done_.load(std::memory_order_acquire) < n; ++spins) {
      if (spins < 4000) CpuRelax();
      else std::this_thread::yield();  // the helper holds a chunk but lost its CPU
    }
    in_use_.store(false, std::memory_order_release);
    return true;
  }

 private:
  void Work(uint64_t gen, ShardFn fn, void* arg, int64_t n, int64_t chunk) {
    uint64_t v = next_.load(std::memory_order_acquire);
    for (;;) {
      if ((v >> 32) != gen) return;
      const int64_t b = static_cast<int64_t>(v & 0xffffffffu);
      if (b >= n) return;
      const int64_t e = std::min(n, b + chunk);
      if (!next_.compare_exchange_weak(v, (gen << 32) | static_cast<uint64_t>(e), std::memory_order_acq_rel))
        continue;
      fn(arg, b, e);
      done_.fetch_add(e - b, std::memory_order_acq_rel);
      v = next_.load(std::memory_order_acquire);
    }
  }

  void Loop() {
    uint64_t seen = 0;
    for (;;) {
      // the next step's job comes within microseconds: spin a little before sleeping
      for (int spins = 0; spins < 3000 && pending_.load(std::memory_order_acquire) == seen; ++spins) CpuRelax();
      ShardFn fn;
      void* arg;
      int64_t n, chunk;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return gen_ != seen; });
        seen = gen_;
        fn = fn_, arg = arg_, n = n_, chunk = chunk_;
      }
      Work(seen, fn, arg, n, chunk);
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t gen_ = 0;  // under mu_
  ShardFn fn_ = nullptr;
  void* arg_ = nullptr;
  int64_t n_ = 0, chunk_ = 1;
  std::atomic<uint64_t> pending_{0};  // gen_, readable without the lock
  std::atomic<uint64_t> next_{0};     // (generation << 32) | the next chunk's start
  std::atomic<int64_t> done_{0};
  std::atomic<bool> in_use_{false};
  bool broken_ = false;
};

// (-DRETURNN_LITE_LSTM_NO_HELPER, e.g. via $RETURNN_LITE_NATIVE_EXTRA_FLAGS: no helper thread, to compare)
void HelperFor(void*, int64_t n, int64_t cost_per_unit, ShardFn fn, void* arg) {
#ifdef RETURNN_LITE_LSTM_NO_HELPER
  if (true) return fn(arg, 0, n);
#endif
  // alone: another LSTM op running now (e.g. the other direction of a BLSTM) keeps the other core busy already
  const int64_t chunk = std::max<int64_t>(1, std::min<int64_t>(n / 8, 200000 / std::max<int64_t>(1, cost_per_unit)));
  if (n < 2 || g_active_ops.load(std::memory_order_relaxed) > 1 || !Helper::Get()->Run(n, chunk, fn, arg))
    fn(arg, 0, n);
}

template <typename F>
void ParallelRun(const Parallel& par, bool use_pool, int64_t n, int64_t cost_per_unit, F& f) {
  if (!use_pool || n <= 1) {
    f(int64_t(0), n);
    return;
  }
  par.Run(n, cost_per_unit, [](void* arg, int64_t b, int64_t e) { (*static_cast<F*>(arg))(b, e); }, &f);
}

// C[M, N] = A[M, K] @ B with A packed into *a_pack; split over the column panels when use_pool.
template <typename T>
void Gemm(const Parallel& par, bool use_pool, View<T> a, int64_t m_dim, const PackedB<T>& b, T* c, int64_t ldc,
          std::vector<T>* a_pack) {
  constexpr int NR = Tile<T>::kNR;
  const int64_t K = b.K, N = b.N;
  if (m_dim == 0 || N == 0) return;
  if (K == 0) {
    for (int64_t i = 0; i < m_dim; ++i) std::fill_n(c + i * ldc, N, T(0));
    return;
  }
  PackA(a, m_dim, K, a_pack);
  const T* ap_all = a_pack->data();
  const int64_t tiles = (m_dim + kMR - 1) / kMR;
  auto shard = [&](int64_t p0, int64_t p1) {
    std::vector<T> b_buf;  // one packed block of an in-place B
    // depth blocks outside: the packed A rows of one block ([M, kc]) stay in L2 over all panels (with the panels
    // outside, a long A, e.g. the [n, T*B] of dW_re's GEMM, would stream from memory once per panel)
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min<int64_t>(kKC, K - pc);
      for (int64_t jp = p0; jp < p1; ++jp) {
        const int64_t j0 = jp * NR, nr = std::min<int64_t>(NR, N - j0);
        const T* bp = b.Block(pc, jp, &b_buf);
        for (int64_t it = 0; it < tiles; ++it) {
          const int64_t i0 = it * kMR;
          MicroKernel<T>(kc, ap_all + pc * tiles * kMR + it * kc * kMR, bp, c + i0 * ldc + j0, ldc,
                         std::min<int64_t>(kMR, m_dim - i0), nr, pc > 0);
        }
      }
    }
  };
  ParallelRun(par, use_pool, b.panels, 2 * m_dim * K * NR, shard);
}

// ------------------------------------------------------------------------------------------------------------
// activations

inline float ExpF(float x) {
  x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;  // round(x / ln 2)
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;  // ln 2 in two parts, so that r is exact
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return e * scale;
}

inline float SigmoidF(float x) { return 1.0f / (1.0f + ExpF(-x)); }

inline float TanhF(float x) {
  const float ax = x < 0.0f ? -x : x;
  const float big = 1.0f - 2.0f / (ExpF(2.0f * ax) + 1.0f);
  const float z = x * x;  // near 0: odd polynomial (no cancellation)
  const float small =
      ((((-5.70498872745e-3f * z + 2.06390887954e-2f) * z - 5.37397155531e-2f) * z + 1.33314422036e-1f) * z -
       3.33332819422e-1f) * z * x + x;
  return ax < 0.625f ? small : (x < 0.0f ? -big : big);
}

inline float Sigmoid(float x) { return SigmoidF(x); }
inline float Tanh(float x) { return TanhF(x); }
inline double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
inline double Tanh(double x) { return std::tanh(x); }

// ------------------------------------------------------------------------------------------------------------
// per-step gate math (loops over the n units, vectorised)

// gates (activated) and the new state from z + rec; c_state/h_state updated in place; y = h, c_out = c
template <typename T>
inline void ForwardUnits(int64_t n, const T* __restrict z, const T* __restrict rec, T* __restrict g,
                         T* __restrict c_state, T* __restrict h_state, T* __restrict c_out, T* __restrict y) {
  for (int64_t k = 0; k < n; ++k) {
    const T gj = Tanh(z[k] + rec[k]);
    const T gi = Sigmoid(z[n + k] + rec[n + k]);
    const T gf = Sigmoid(z[2 * n + k] + rec[2 * n + k]);
    const T go = Sigmoid(z[3 * n + k] + rec[3 * n + k]);
    const T cn = gf * c_state[k] + gi * gj;
    const T h = go * Tanh(cn);
    g[k] = gj;
    g[n + k] = gi;
    g[2 * n + k] = gf;
    g[3 * n + k] = go;
    c_out[k] = cn;
    y[k] = h;
    c_state[k] = cn;
    h_state[k] = h;
  }
}

// dz of one frame; dc_state (the grad of the new cell state, before) becomes the grad of the previous one
template <typename T>
inline void BackwardUnits(int64_t n, const T* __restrict g, const T* __restrict c, const T* __restrict c_prev,
                          const T* __restrict dy, const T* __restrict dh_state, T* __restrict dc_state,
                          T* __restrict dz) {
  for (int64_t k = 0; k < n; ++k) {
    const T gj = g[k], gi = g[n + k], gf = g[2 * n + k], go = g[3 * n + k];
    const T tc = Tanh(c[k]);
    const T dh = dy[k] + dh_state[k];
    const T dc = dc_state[k] + dh * go * (T(1) - tc * tc);
    dz[3 * n + k] = dh * tc * go * (T(1) - go);
    dz[k] = dc * gi * (T(1) - gj * gj);
    dz[n + k] = dc * gj * gi * (T(1) - gi);
    dz[2 * n + k] = dc * c_prev[k] * gf * (T(1) - gf);
    dc_state[k] = dc * gf;
  }
}

// The per-step work goes to the thread pool only when it is large enough: for small steps the hand-off to the pool
// and back, 2-3 times per frame, costs more than it saves (and much more on a loaded machine).
bool StepUsesPool(int64_t n_batch, int64_t n) { return n_batch * n * 4 * n >= (int64_t(1) << 20); }

bool AnyActive(const int32_t* lens, int64_t n_batch, int64_t t) {
  for (int64_t b = 0; b < n_batch; ++b)
    if (t < lens[b]) return true;
  return false;
}

}  // namespace

template <typename T>
void Forward(const Parallel& par, int64_t n_time, int64_t n_batch, int64_t n, bool reverse, const T* z,
             const T* w_re, const T* c0, const T* h0, const int32_t* lens, T* y, T* c, T* gates, T* c_final,
             T* h_final) {
  const ActiveOp active;
  const int64_t n4 = 4 * n;
  T* c_state = c_final;  // the final-state outputs hold the running state
  T* h_state = h_final;
  std::copy_n(c0, n_batch * n, c_state);
  std::copy_n(h0, n_batch * n, h_state);
  PackedB<T> w;
  w.Pack(View<T>{w_re, n4, 1}, n, n4);
  std::vector<T> rec(static_cast<size_t>(n_batch * n4)), a_pack;
  const bool use_pool = StepUsesPool(n_batch, n);
  for (int64_t s = 0; s < n_time; ++s) {
    const int64_t t = reverse ? n_time - 1 - s : s;
    const int64_t off = t * n_batch;
    if (!AnyActive(lens, n_batch, t)) {
      std::fill_n(y + off * n, n_batch * n, T(0));
      std::fill_n(c + off * n, n_batch * n, T(0));
      std::fill_n(gates + off * n4, n_batch * n4, T(0));
      continue;
    }
    Gemm<T>(par, use_pool, View<T>{h_state, n, 1}, n_batch, w, rec.data(), n4, &a_pack);
    auto units = [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        T* yb = y + (off + b) * n;
        T* cb = c + (off + b) * n;
        T* gb = gates + (off + b) * n4;
        if (t >= lens[b]) {
          std::fill_n(yb, n, T(0));
          std::fill_n(cb, n, T(0));
          std::fill_n(gb, n4, T(0));
          continue;
        }
        ForwardUnits(n, z + (off + b) * n4, rec.data() + b * n4, gb, c_state + b * n, h_state + b * n, cb, yb);
      }
    };
    ParallelRun(par, use_pool, n_batch, 60 * n, units);
  }
}

template <typename T>
void Backward(const Parallel& par, int64_t n_time, int64_t n_batch, int64_t n, bool reverse, const T* w_re,
              const T* c0, const T* h0, const int32_t* lens, const T* y, const T* c, const T* gates, const T* dy,
              const T* dc_final, const T* dh_final, T* dz, T* dw_re, T* dc0, T* dh0) {
  const ActiveOp active;
  const int64_t n4 = 4 * n;
  T* dc_state = dc0;  // the initial-state grad outputs hold the running state grads
  T* dh_state = dh0;
  std::copy_n(dc_final, n_batch * n, dc_state);
  std::copy_n(dh_final, n_batch * n, dh_state);
  PackedB<T> w_t;  // W_re^T [4n, n]
  w_t.Pack(View<T>{w_re, 1, n4}, n4, n);
  std::vector<T> hprev(static_cast<size_t>(n_time * n_batch * n)), dhrec(static_cast<size_t>(n_batch * n)), a_pack;
  const bool use_pool = StepUsesPool(n_batch, n);
  for (int64_t s = n_time - 1; s >= 0; --s) {
    const int64_t t = reverse ? n_time - 1 - s : s;
    const int64_t t_prev = reverse ? t + 1 : t - 1;  // the frame processed before t
    const int64_t off = t * n_batch;
    if (!AnyActive(lens, n_batch, t)) {
      std::fill_n(dz + off * n4, n_batch * n4, T(0));
      std::fill_n(hprev.data() + off * n, n_batch * n, T(0));
      continue;
    }
    auto units = [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        T* dzb = dz + (off + b) * n4;
        T* hp_out = hprev.data() + (off + b) * n;
        if (t >= lens[b]) {
          std::fill_n(dzb, n4, T(0));
          std::fill_n(hp_out, n, T(0));
          continue;
        }
        const bool first = reverse ? t == lens[b] - 1 : t == 0;
        const T* hp = first ? h0 + b * n : y + (t_prev * n_batch + b) * n;
        const T* cp = first ? c0 + b * n : c + (t_prev * n_batch + b) * n;
        std::copy_n(hp, n, hp_out);
        BackwardUnits(n, gates + (off + b) * n4, c + (off + b) * n, cp, dy + (off + b) * n, dh_state + b * n,
                      dc_state + b * n, dzb);
      }
    };
    ParallelRun(par, use_pool, n_batch, 40 * n, units);
    Gemm<T>(par, use_pool, View<T>{dz + off * n4, n4, 1}, n_batch, w_t, dhrec.data(), n, &a_pack);
    for (int64_t b = 0; b < n_batch; ++b)
      if (t < lens[b]) std::copy_n(dhrec.data() + b * n, n, dh_state + b * n);
  }
  // dW_re = sum_t h_prev[t]^T dz[t], as one GEMM over all frames, on the pool
  const int64_t rows = n_time * n_batch;
  if (rows == 0) {
    std::fill_n(dw_re, n * n4, T(0));
    return;
  }
  PackedB<T> dz_all;  // in place: packed block by block, no copy of all of dz
  dz_all.InPlace(dz, rows, n4);
  Gemm<T>(par, true, View<T>{hprev.data(), 1, n}, n, dz_all, dw_re, n4, &a_pack);
}

Parallel HelperParallel() { return Parallel{&HelperFor, nullptr}; }

template void Forward<float>(const Parallel&, int64_t, int64_t, int64_t, bool, const float*, const float*,
                             const float*, const float*, const int32_t*, float*, float*, float*, float*, float*);
template void Forward<double>(const Parallel&, int64_t, int64_t, int64_t, bool, const double*, const double*,
                              const double*, const double*, const int32_t*, double*, double*, double*, double*,
                              double*);
template void Backward<float>(const Parallel&, int64_t, int64_t, int64_t, bool, const float*, const float*,
                              const float*, const int32_t*, const float*, const float*, const float*, const float*,
                              const float*, const float*, float*, float*, float*, float*);
template void Backward<double>(const Parallel&, int64_t, int64_t, int64_t, bool, const double*, const double*,
                               const double*, const int32_t*, const double*, const double*, const double*,
                               const double*, const double*, const double*, double*, double*, double*, double*);

namespace {

void SerialFor(void*, int64_t n, int64_t, ShardFn fn, void* arg) { fn(arg, 0, n); }

// Forward against a scalar reference, on sizes that leave partial register tiles; Backward must give finite values.
template <typename T>
bool SelfTest(double tol) {
  const int64_t n_time = 3, n_batch = 5, n = 7, n4 = 4 * n;
  const int32_t lens[n_batch] = {3, 2, 0, 1, 3};
  std::vector<T> z(n_time * n_batch * n4), w(n * n4), c0(n_batch * n), h0(n_batch * n);
  for (size_t i = 0; i < z.size(); ++i) z[i] = T(std::sin(0.37 * i));
  for (size_t i = 0; i < w.size(); ++i) w[i] = T(0.3 * std::cos(0.11 * i));
  for (size_t i = 0; i < c0.size(); ++i) c0[i] = T(0.5 * std::sin(1.3 * i)), h0[i] = T(0.5 * std::cos(0.7 * i));
  std::vector<T> y(n_time * n_batch * n), c(y.size()), gates(z.size()), cf(c0.size()), hf(c0.size());
  const Parallel serial{&SerialFor, nullptr};
  Forward<T>(serial, n_time, n_batch, n, false, z.data(), w.data(), c0.data(), h0.data(), lens, y.data(), c.data(),
             gates.data(), cf.data(), hf.data());
  for (int64_t b = 0; b < n_batch; ++b) {
    std::vector<double> cs(c0.begin() + b * n, c0.begin() + (b + 1) * n), hs(h0.begin() + b * n, h0.begin() + (b + 1) * n);
    for (int64_t t = 0; t < n_time; ++t) {
      const T* yt = y.data() + (t * n_batch + b) * n;
      for (int64_t k = 0; k < n; ++k) {
        if (t >= lens[b]) {
          if (yt[k] != T(0)) return false;
          continue;
        }
        double g[4];
        for (int q = 0; q < 4; ++q) {
          g[q] = z[(t * n_batch + b) * n4 + q * n + k];
          for (int64_t j = 0; j < n; ++j) g[q] += hs[j] * w[j * n4 + q * n + k];
        }
        const double cn = 1 / (1 + std::exp(-g[2])) * cs[k] + 1 / (1 + std::exp(-g[1])) * std::tanh(g[0]);
        const double h = 1 / (1 + std::exp(-g[3])) * std::tanh(cn);
        if (!(std::fabs(yt[k] - h) <= tol) || !(std::fabs(c[(t * n_batch + b) * n + k] - cn) <= tol)) return false;
      }
      if (t < lens[b])  // the new state (all units computed above from the previous one)
        for (int64_t k = 0; k < n; ++k) cs[k] = c[(t * n_batch + b) * n + k], hs[k] = yt[k];
    }
    for (int64_t k = 0; k < n; ++k)
      if (!(std::fabs(cf[b * n + k] - cs[k]) <= tol) || !(std::fabs(hf[b * n + k] - hs[k]) <= tol)) return false;
  }
  std::vector<T> dz(z.size()), dw(w.size()), dc0(c0.size()), dh0(c0.size());
  Backward<T>(serial, n_time, n_batch, n, true, w.data(), c0.data(), h0.data(), lens, y.data(), c.data(), gates.data(),
              y.data(), cf.data(), hf.data(), dz.data(), dw.data(), dc0.data(), dh0.data());
  double sum = 0;
  for (const std::vector<T>* v : {&dz, &dw, &dc0, &dh0})
    for (T x : *v) sum += std::fabs(x);
  return std::isfinite(sum) && sum > 0;
}

}  // namespace
}  // namespace lstm_kernel
}  // namespace returnn_lite

extern "C" int returnn_lite_lstm_selftest() {
#ifdef RETURNN_LITE_LSTM_SELFTEST_TRAP
  __builtin_trap();  // test hook: fail the way a library with instructions this CPU lacks fails
#endif
  using returnn_lite::lstm_kernel::SelfTest;
  return SelfTest<float>(1e-5) && SelfTest<double>(1e-12) ? 1 : 0;
}
