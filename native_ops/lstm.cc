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
// This file is only the TF glue (op registration, shape checks, outputs); the math is in lstm_kernel.cc, a
// translation unit without TF or Eigen headers (compiled in parallel with this one, see returnn_lite/native_op.py).
// The forward op keeps the activated gates and the cell states, so that the gradient op needs no recomputation.

#include <cstdint>
#include <functional>

#include "lstm_kernel.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/shape_inference.h"

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

// TF's intra-op thread pool, for the kernel (lstm_kernel::Parallel)
static void PoolParallelFor(void* pool, int64_t n, int64_t cost_per_unit, lstm_kernel::ShardFn fn, void* arg) {
  static_cast<tensorflow::thread::ThreadPool*>(pool)->ParallelFor(
      n, cost_per_unit, [fn, arg](int64_t begin, int64_t end) { fn(arg, begin, end); });
}

static lstm_kernel::Parallel PoolOf(OpKernelContext* ctx) {
  return lstm_kernel::Parallel{&PoolParallelFor, ctx->device()->tensorflow_cpu_worker_threads()->workers};
}

// Shapes: checked once per call, with an error naming the input.
static Status CheckShapes(const Tensor& w_re, const Tensor& c0, const Tensor& h0, const Tensor& lens, int64_t n_batch,
                          int64_t n4, const char* what) {
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
  return Status();
}

template <typename T>
static const T* In(const Tensor& t) {
  return t.flat<T>().data();
}

template <typename T>
static T* Out(Tensor* t) {
  return t->flat<T>().data();
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
    const Tensor& lens = ctx->input(4);
    OP_REQUIRES(ctx, z.dims() == 3,
                errors::InvalidArgument("NativeLstm2: z must be [T, B, 4n], got ", z.shape().DebugString()));
    const int64_t n_time = z.dim_size(0), n_batch = z.dim_size(1), n4 = z.dim_size(2);
    OP_REQUIRES_OK(ctx, CheckShapes(w_re, c0, h0, lens, n_batch, n4, "NativeLstm2"));
    const int64_t n = n4 / 4;
    Tensor *y, *c, *gates, *c_final, *h_final;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, TensorShape({n_time, n_batch, n}), &y));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, TensorShape({n_time, n_batch, n}), &c));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, TensorShape({n_time, n_batch, n4}), &gates));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, TensorShape({n_batch, n}), &c_final));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(4, TensorShape({n_batch, n}), &h_final));
    lstm_kernel::Forward<T>(PoolOf(ctx), n_time, n_batch, n, reverse_, In<T>(z), In<T>(w_re), In<T>(c0), In<T>(h0),
                            In<int32_t>(lens), Out<T>(y), Out<T>(c), Out<T>(gates), Out<T>(c_final),
                            Out<T>(h_final));
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
    const Tensor& lens = ctx->input(3);
    const Tensor& y = ctx->input(4);
    const Tensor& c = ctx->input(5);
    const Tensor& gates = ctx->input(6);
    const Tensor& dy = ctx->input(7);
    const Tensor& dc_final = ctx->input(8);
    const Tensor& dh_final = ctx->input(9);
    OP_REQUIRES(ctx, gates.dims() == 3,
                errors::InvalidArgument("NativeLstm2Grad: gates must be [T, B, 4n], got ",
                                        gates.shape().DebugString()));
    const int64_t n_time = gates.dim_size(0), n_batch = gates.dim_size(1), n4 = gates.dim_size(2);
    OP_REQUIRES_OK(ctx, CheckShapes(w_re, c0, h0, lens, n_batch, n4, "NativeLstm2Grad"));
    const int64_t n = n4 / 4;
    const TensorShape state_shape({n_time, n_batch, n});
    for (const Tensor* x : {&y, &c, &dy})
      OP_REQUIRES(ctx, x->shape() == state_shape,
                  errors::InvalidArgument("NativeLstm2Grad: y/c/dy must be ", state_shape.DebugString(), ", got ",
                                          x->shape().DebugString()));
    for (const Tensor* x : {&dc_final, &dh_final})
      OP_REQUIRES(ctx, x->shape() == c0.shape(),
                  errors::InvalidArgument("NativeLstm2Grad: final state grads must be ", c0.shape().DebugString()));
    Tensor *dz, *dw_re, *dc0, *dh0;
    OP_REQUIRES_OK(ctx, ctx->allocate_output(0, gates.shape(), &dz));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(1, w_re.shape(), &dw_re));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(2, c0.shape(), &dc0));
    OP_REQUIRES_OK(ctx, ctx->allocate_output(3, h0.shape(), &dh0));
    lstm_kernel::Backward<T>(PoolOf(ctx), n_time, n_batch, n, reverse_, In<T>(w_re), In<T>(c0), In<T>(h0),
                             In<int32_t>(lens), In<T>(y), In<T>(c), In<T>(gates), In<T>(dy), In<T>(dc_final),
                             In<T>(dh_final), Out<T>(dz), Out<T>(dw_re), Out<T>(dc0), Out<T>(dh0));
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
