// NativeLstm2: a fused LSTM over all frames of a batch, forward and gradient, as TensorFlow custom ops (CPU).
//
// Written for returnn_lite. The math and gate layout are those of the NativeLstm2 cell in
// returnn_lite/layers/rec/cells.py: with z = x W + b (the input projection of all frames, computed outside in one
// matmul) and per frame t
//   g = z[t] + h_prev W_re,   g = (j, i, f, o) (cell-in, input, forget, output gate; each n wide)
//   c = sigmoid(f) * c_prev + sigmoid(i) * tanh(j),   h = sigmoid(o) * tanh(c).
// Frames t >= seq_len[b] keep the state and give output 0. With reverse=true the frames are processed from T-1
// down to 0, which (as frames past the length are skipped) is the same as running forward over each sequence
// reversed in place (tf.reverse_sequence) and reversing the output back.
//
// Per step: one GEMM h_prev @ W_re through Eigen on TF's intra-op thread pool, then the gate math in one pass
// (parallel over the batch). The forward op keeps the activated gates and the cell states, so that the gradient
// op needs no forward recomputation: per step one GEMM dz @ W_re^T for the recurrent state gradient, and one big
// GEMM (sum_t h_prev[t]^T dz[t]) at the end for dW_re.

#define EIGEN_USE_THREADS

#include <cmath>

#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"
#include "unsupported/Eigen/CXX11/Tensor"

namespace returnn_lite {

using tensorflow::DEVICE_CPU;
using tensorflow::OpKernel;
using tensorflow::OpKernelConstruction;
using tensorflow::OpKernelContext;
using tensorflow::Status;
using tensorflow::Tensor;
using tensorflow::TensorShape;
using tensorflow::shape_inference::DimensionHandle;
using tensorflow::shape_inference::InferenceContext;
using tensorflow::shape_inference::ShapeHandle;
namespace errors = tensorflow::errors;
typedef Eigen::ThreadPoolDevice CPUDevice;
typedef Eigen::IndexPair<Eigen::DenseIndex> IdxPair;

template <typename T>
using Mat = Eigen::TensorMap<Eigen::Tensor<T, 2, Eigen::RowMajor>, Eigen::Unaligned>;
template <typename T>
using CMat = Eigen::TensorMap<Eigen::Tensor<const T, 2, Eigen::RowMajor>, Eigen::Unaligned>;

template <typename T>
using Arr = Eigen::Map<Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Unaligned>;
template <typename T>
using CArr = Eigen::Map<const Eigen::Array<T, Eigen::Dynamic, 1>, Eigen::Unaligned>;

REGISTER_OP("NativeLstm2")
    .Input("z: T")           // [T, B, 4n] input projection (x W + b)
    .Input("w_re: T")        // [n, 4n]
    .Input("c0: T")          // [B, n]
    .Input("h0: T")          // [B, n]
    .Input("seq_len: int32")  // [B]
    .Attr("T: {float, double}")
    .Attr("reverse: bool = false")
    .Output("y: T")          // [T, B, n] output h (0 past the length)
    .Output("c: T")          // [T, B, n] cell state (0 past the length), for the gradient
    .Output("gates: T")      // [T, B, 4n] activated gates (j, i, f, o), for the gradient
    .Output("c_final: T")    // [B, n]
    .Output("h_final: T")    // [B, n]
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle z, w, s0, s1, lens;
      TF_RETURN_IF_ERROR(c->WithRank(c->input(0), 3, &z));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(1), 2, &w));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(2), 2, &s0));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(3), 2, &s1));
      TF_RETURN_IF_ERROR(c->WithRank(c->input(4), 1, &lens));
      DimensionHandle n = c->Dim(w, 0), t = c->Dim(z, 0), b = c->Dim(z, 1);
      c->set_output(0, c->MakeShape({t, b, n}));
      c->set_output(1, c->MakeShape({t, b, n}));
      c->set_output(2, c->MakeShape({t, b, c->Dim(w, 1)}));
      c->set_output(3, c->MakeShape({b, n}));
      c->set_output(4, c->MakeShape({b, n}));
      return Status();
    })
    .Doc("Fused LSTM (NativeLstm2 layout) over all frames; see native_ops/lstm.cc.");

REGISTER_OP("NativeLstm2Grad")
    .Input("w_re: T")
    .Input("c0: T")
    .Input("h0: T")
    .Input("seq_len: int32")
    .Input("y: T")
    .Input("c: T")
    .Input("gates: T")
    .Input("dy: T")          // [T, B, n]
    .Input("dc_final: T")    // [B, n]
    .Input("dh_final: T")    // [B, n]
    .Attr("T: {float, double}")
    .Attr("reverse: bool = false")
    .Output("dz: T")         // [T, B, 4n]
    .Output("dw_re: T")      // [n, 4n]
    .Output("dc0: T")        // [B, n]
    .Output("dh0: T")        // [B, n]
    .SetShapeFn([](InferenceContext* c) {
      c->set_output(0, c->input(6));
      c->set_output(1, c->input(0));
      c->set_output(2, c->input(1));
      c->set_output(3, c->input(2));
      return Status();
    })
    .Doc("Gradient of NativeLstm2.");

// The per-step work (GEMM [B, n] x [n, 4n] and the gate math) goes to TF's intra-op thread pool only when it is
// large enough: for small steps the hand-off to the pool and back, 2-3 times per frame, costs more than it saves
// (and much more on a loaded machine). The dW_re GEMM over all frames always uses the pool.
static bool UsePool(int64_t n_batch, int64_t n) { return n_batch * n * 4 * n >= (int64_t(1) << 24); }

template <typename F>
static void for_batch(const CPUDevice& dev, bool use_pool, int64_t n_batch, const Eigen::TensorOpCost& cost, F f) {
  if (use_pool)
    dev.parallelFor(n_batch, cost, f);
  else
    f(0, n_batch);
}

// Shapes: checked once per call, with an error naming the input.
static Status CheckShapes(const Tensor& w_re, const Tensor& c0, const Tensor& h0, const Tensor& lens, int64_t n_time,
                          int64_t n_batch, int64_t n4, const char* what) {
  if (w_re.dims() != 2 || w_re.dim_size(1) != 4 * w_re.dim_size(0))
    return errors::InvalidArgument(what, ": w_re must be [n, 4n], got ", w_re.shape().DebugString());
  int64_t n = w_re.dim_size(0);
  if (n4 != 4 * n)
    return errors::InvalidArgument(what, ": the input projection has dim ", n4, ", w_re needs 4*", n, " = ", 4 * n);
  for (const Tensor* s : {&c0, &h0})
    if (s->dims() != 2 || s->dim_size(0) != n_batch || s->dim_size(1) != n)
      return errors::InvalidArgument(what, ": the initial state must be [batch=", n_batch, ", n=", n, "], got ",
                                     s->shape().DebugString());
  if (lens.dims() != 1 || lens.dim_size(0) != n_batch)
    return errors::InvalidArgument(what, ": seq_len must be [batch=", n_batch, "], got ", lens.shape().DebugString());
  (void)n_time;
  return Status();
}

template <typename T>
class NativeLstm2Op : public OpKernel {
 public:
  explicit NativeLstm2Op(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reverse", &reverse_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& z = ctx->input(0);
    const Tensor& w_re = ctx->input(1);
    const Tensor& c0 = ctx->input(2);
    const Tensor& h0 = ctx->input(3);
    const Tensor& lens_t = ctx->input(4);
    OP_REQUIRES(ctx, z.dims() == 3,
                errors::InvalidArgument("NativeLstm2: z must be [T, B, 4n], got ", z.shape().DebugString()));
    const int64_t n_time = z.dim_size(0), n_batch = z.dim_size(1), n4 = z.dim_size(2);
    OP_REQUIRES_OK(ctx, CheckShapes(w_re, c0, h0, lens_t, n_time, n_batch, n4, "NativeLstm2"));
    const int64_t n = n4 / 4;

    Tensor *y_t, *c_t, *gates_t, *cf_t, *hf_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n_time, n_batch, n}), &y_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n_time, n_batch, n}), &c_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n_time, n_batch, n4}), &gates_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({n_batch, n}), &cf_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({n_batch, n}), &hf_t));
    Tensor rec_t;  // h_prev @ W_re of one step
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value, TensorShape({n_batch, n4}), &rec_t));

    const CPUDevice& dev = ctx->eigen_device<CPUDevice>();
    const T* z_p = z.flat<T>().data();
    const int32_t* lens = lens_t.flat<int32_t>().data();
    T* y_p = y_t->flat<T>().data();
    T* c_p = c_t->flat<T>().data();
    T* g_p = gates_t->flat<T>().data();
    T* c_state = cf_t->flat<T>().data();  // the final-state outputs hold the running state
    T* h_state = hf_t->flat<T>().data();
    T* rec = rec_t.flat<T>().data();
    std::copy_n(c0.flat<T>().data(), n_batch * n, c_state);
    std::copy_n(h0.flat<T>().data(), n_batch * n, h_state);
    CMat<T> w(w_re.flat<T>().data(), n, n4);
    Mat<T> rec_m(rec, n_batch, n4);
    CMat<T> h_m(h_state, n_batch, n);
    const Eigen::array<IdxPair, 1> prod = {IdxPair(1, 0)};
    const Eigen::TensorOpCost cost(sizeof(T) * 6 * n, sizeof(T) * 6 * n, 60 * n);
    const bool use_pool = UsePool(n_batch, n);

    for (int64_t s = 0; s < n_time; ++s) {
      const int64_t t = reverse_ ? n_time - 1 - s : s;
      bool any = false;
      for (int64_t b = 0; b < n_batch; ++b) any |= t < lens[b];
      const int64_t off = t * n_batch;
      if (!any) {
        std::fill_n(y_p + off * n, n_batch * n, T(0));
        std::fill_n(c_p + off * n, n_batch * n, T(0));
        std::fill_n(g_p + off * n4, n_batch * n4, T(0));
        continue;
      }
      if (use_pool)
        rec_m.device(dev) = h_m.contract(w, prod);
      else
        rec_m = h_m.contract(w, prod);
      for_batch(dev, use_pool, n_batch, cost, [&](Eigen::Index b0, Eigen::Index b1) {
        for (Eigen::Index b = b0; b < b1; ++b) {
          T* y = y_p + (off + b) * n;
          T* c = c_p + (off + b) * n;
          T* g = g_p + (off + b) * n4;
          if (t >= lens[b]) {
            std::fill_n(y, n, T(0));
            std::fill_n(c, n, T(0));
            std::fill_n(g, n4, T(0));
            continue;
          }
          const T* zz = z_p + (off + b) * n4;
          const T* r = rec + b * n4;
          // vectorised gate math (Eigen's packet tanh/logistic, as TF's own Tanh/Sigmoid kernels)
          Arr<T> gj(g, n), gi(g + n, n), gf(g + 2 * n, n), go(g + 3 * n, n), cs(c_state + b * n, n),
              hs(h_state + b * n, n), cn(c, n), yn(y, n);
          gj = (CArr<T>(zz, n) + CArr<T>(r, n)).tanh();
          gi = (CArr<T>(zz + n, n) + CArr<T>(r + n, n)).logistic();
          gf = (CArr<T>(zz + 2 * n, n) + CArr<T>(r + 2 * n, n)).logistic();
          go = (CArr<T>(zz + 3 * n, n) + CArr<T>(r + 3 * n, n)).logistic();
          cn = gf * cs + gi * gj;
          yn = go * cn.tanh();
          cs = cn;
          hs = yn;
        }
      });
    }
  }

 private:
  bool reverse_;
};

template <typename T>
class NativeLstm2GradOp : public OpKernel {
 public:
  explicit NativeLstm2GradOp(OpKernelConstruction* ctx) : OpKernel(ctx) {
    OP_REQUIRES_OK(ctx, ctx->GetAttr("reverse", &reverse_));
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& w_re = ctx->input(0);
    const Tensor& c0 = ctx->input(1);
    const Tensor& h0 = ctx->input(2);
    const Tensor& lens_t = ctx->input(3);
    const Tensor& y_t = ctx->input(4);
    const Tensor& c_t = ctx->input(5);
    const Tensor& gates_t = ctx->input(6);
    const Tensor& dy_t = ctx->input(7);
    const Tensor& dcf_t = ctx->input(8);
    const Tensor& dhf_t = ctx->input(9);
    OP_REQUIRES(ctx, gates_t.dims() == 3,
                errors::InvalidArgument("NativeLstm2Grad: gates must be [T, B, 4n], got ",
                                        gates_t.shape().DebugString()));
    const int64_t n_time = gates_t.dim_size(0), n_batch = gates_t.dim_size(1), n4 = gates_t.dim_size(2);
    OP_REQUIRES_OK(ctx, CheckShapes(w_re, c0, h0, lens_t, n_time, n_batch, n4, "NativeLstm2Grad"));
    const int64_t n = n4 / 4;
    const TensorShape state_shape({n_time, n_batch, n});
    for (const Tensor* x : {&y_t, &c_t, &dy_t})
      OP_REQUIRES(ctx, x->shape() == state_shape,
                  errors::InvalidArgument("NativeLstm2Grad: y/c/dy must be ", state_shape.DebugString(), ", got ",
                                          x->shape().DebugString()));
    for (const Tensor* x : {&dcf_t, &dhf_t})
      OP_REQUIRES(ctx, x->shape() == c0.shape(),
                  errors::InvalidArgument("NativeLstm2Grad: final state grads must be ", c0.shape().DebugString()));

    Tensor *dz_t, *dw_t, *dc0_t, *dh0_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, gates_t.shape(), &dz_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, w_re.shape(), &dw_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, c0.shape(), &dc0_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, h0.shape(), &dh0_t));
    Tensor hprev_t, dhrec_t;
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value, state_shape, &hprev_t));
    OP_REQUIRES_OK(ctx, ctx->allocate_temp(tensorflow::DataTypeToEnum<T>::value, TensorShape({n_batch, n}), &dhrec_t));

    const CPUDevice& dev = ctx->eigen_device<CPUDevice>();
    const int32_t* lens = lens_t.flat<int32_t>().data();
    const T* c0_p = c0.flat<T>().data();
    const T* h0_p = h0.flat<T>().data();
    const T* y_p = y_t.flat<T>().data();
    const T* c_p = c_t.flat<T>().data();
    const T* g_p = gates_t.flat<T>().data();
    const T* dy_p = dy_t.flat<T>().data();
    T* dz_p = dz_t->flat<T>().data();
    T* hprev = hprev_t.flat<T>().data();
    T* dhrec = dhrec_t.flat<T>().data();
    T* dc_state = dc0_t->flat<T>().data();  // the initial-state grad outputs hold the running state grads
    T* dh_state = dh0_t->flat<T>().data();
    std::copy_n(dcf_t.flat<T>().data(), n_batch * n, dc_state);
    std::copy_n(dhf_t.flat<T>().data(), n_batch * n, dh_state);
    CMat<T> w(w_re.flat<T>().data(), n, n4);
    Mat<T> dhrec_m(dhrec, n_batch, n);
    const Eigen::array<IdxPair, 1> prod_t = {IdxPair(1, 1)};  // dz @ W_re^T
    const Eigen::TensorOpCost cost(sizeof(T) * 12 * n, sizeof(T) * 6 * n, 40 * n);
    const bool use_pool = UsePool(n_batch, n);

    for (int64_t s = n_time - 1; s >= 0; --s) {
      const int64_t t = reverse_ ? n_time - 1 - s : s;
      const int64_t t_prev = reverse_ ? t + 1 : t - 1;  // the frame processed before t
      const int64_t off = t * n_batch;
      bool any = false;
      for (int64_t b = 0; b < n_batch; ++b) any |= t < lens[b];
      if (!any) {
        std::fill_n(dz_p + off * n4, n_batch * n4, T(0));
        std::fill_n(hprev + off * n, n_batch * n, T(0));
        continue;
      }
      for_batch(dev, use_pool, n_batch, cost, [&](Eigen::Index b0, Eigen::Index b1) {
        for (Eigen::Index b = b0; b < b1; ++b) {
          T* dz = dz_p + (off + b) * n4;
          T* hp_out = hprev + (off + b) * n;
          if (t >= lens[b]) {
            std::fill_n(dz, n4, T(0));
            std::fill_n(hp_out, n, T(0));
            continue;
          }
          const bool first = reverse_ ? t == lens[b] - 1 : t == 0;
          const T* hp = first ? h0_p + b * n : y_p + (t_prev * n_batch + b) * n;
          const T* cp = first ? c0_p + b * n : c_p + (t_prev * n_batch + b) * n;
          std::copy_n(hp, n, hp_out);
          const T* g = g_p + (off + b) * n4;
          CArr<T> gj(g, n), gi(g + n, n), gf(g + 2 * n, n), go(g + 3 * n, n), c(c_p + (off + b) * n, n),
              dy(dy_p + (off + b) * n, n), cpa(cp, n);
          Arr<T> dcs(dc_state + b * n, n), dhs(dh_state + b * n, n), dzj(dz, n), dzi(dz + n, n),
              dzf(dz + 2 * n, n), dzo(dz + 3 * n, n);
          // no temporaries: dcs becomes dc (the grad of the new cell state) in place, then dc * f
          dzo = (dy + dhs) * c.tanh() * go * (T(1) - go);
          dcs += (dy + dhs) * go * (T(1) - c.tanh().square());
          dzj = dcs * gi * (T(1) - gj.square());
          dzi = dcs * gj * gi * (T(1) - gi);
          dzf = dcs * cpa * gf * (T(1) - gf);
          dcs *= gf;
        }
      });
      CMat<T> dz_m(dz_p + off * n4, n_batch, n4);
      if (use_pool)
        dhrec_m.device(dev) = dz_m.contract(w, prod_t);
      else
        dhrec_m = dz_m.contract(w, prod_t);
      for (int64_t b = 0; b < n_batch; ++b)
        if (t < lens[b]) std::copy_n(dhrec + b * n, n, dh_state + b * n);
    }
    // dW_re = sum_t h_prev[t]^T dz[t], as one GEMM over all frames
    CMat<T> hp_all(hprev, n_time * n_batch, n);
    CMat<T> dz_all(dz_p, n_time * n_batch, n4);
    Mat<T> dw(dw_t->flat<T>().data(), n, n4);
    const Eigen::array<IdxPair, 1> prod_0 = {IdxPair(0, 0)};
    if (n_time * n_batch > 0)
      dw.device(dev) = hp_all.contract(dz_all, prod_0);
    else
      dw.setZero();
  }

 private:
  bool reverse_;
};

#define REGISTER(T)                                                                            \
  REGISTER_KERNEL_BUILDER(Name("NativeLstm2").Device(DEVICE_CPU).TypeConstraint<T>("T"),     \
                          NativeLstm2Op<T>);                                                   \
  REGISTER_KERNEL_BUILDER(Name("NativeLstm2Grad").Device(DEVICE_CPU).TypeConstraint<T>("T"), \
                          NativeLstm2GradOp<T>);
REGISTER(float)
REGISTER(double)
#undef REGISTER

}  // namespace returnn_lite
