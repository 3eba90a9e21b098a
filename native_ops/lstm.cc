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
// This file is only the TF glue (op and kernel registration, shape checks, outputs), written against TF's stable
// C API (tensorflow/c/kernels.h, ops.h: plain C headers, no Eigen), so that it compiles in a fraction of a second
// with any flags. The math is in lstm_kernel.cc. The forward op keeps the activated gates and the cell states, so
// that the gradient op needs no recomputation.

#include <cstdint>
#include <string>

#include "lstm_kernel.h"
#include "tensorflow/c/kernels.h"
#include "tensorflow/c/ops.h"
#include "tensorflow/c/tf_status.h"
#include "tensorflow/c/tf_tensor.h"

namespace {

using returnn_lite::lstm_kernel::Parallel;

// The C API has no access to TF's intra-op thread pool: the kernel's own helper thread (see lstm_kernel.h), used
// only while one LSTM op runs (TF runs independent ops, e.g. the two directions of a BLSTM, in parallel on its
// inter-op pool: then each runs on its own thread).
const Parallel kPar = returnn_lite::lstm_kernel::HelperParallel();

// ------------------------------------------------------------------------------------------------------------
// op definitions

// out = concat(a[a0:a1], b[b0:b1]) (shapes), and its dims known where the inputs' are
bool Concat(TF_ShapeInferenceContext* ctx, TF_ShapeHandle* a, int64_t a0, int64_t a1, TF_ShapeHandle* b, int64_t b0,
            int64_t b1, TF_ShapeHandle* out, TF_Status* status) {
  TF_ShapeHandle* sa = TF_NewShapeHandle();
  TF_ShapeHandle* sb = TF_NewShapeHandle();
  TF_ShapeInferenceContextSubshape(ctx, a, a0, a1, sa, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSubshape(ctx, b, b0, b1, sb, status);
  if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextConcatenateShapes(ctx, sa, sb, out, status);
  TF_DeleteShapeHandle(sa);
  TF_DeleteShapeHandle(sb);
  return TF_GetCode(status) == TF_OK;
}

void LstmShape(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  const int ranks[5] = {3, 2, 2, 2, 1};
  TF_ShapeHandle* in[5];
  for (int i = 0; i < 5; ++i) in[i] = TF_NewShapeHandle();
  for (int i = 0; i < 5 && TF_GetCode(status) == TF_OK; ++i) {
    TF_ShapeHandle* raw = TF_NewShapeHandle();
    TF_ShapeInferenceContextGetInput(ctx, i, raw, status);
    if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextWithRank(ctx, raw, ranks[i], in[i], status);
    TF_DeleteShapeHandle(raw);
  }
  TF_ShapeHandle *z = in[0], *w = in[1];
  TF_ShapeHandle* tbn = TF_NewShapeHandle();  // [T, B, n]
  TF_ShapeHandle* tbn4 = TF_NewShapeHandle();  // [T, B, 4n]
  TF_ShapeHandle* bn = TF_NewShapeHandle();  // [B, n]
  if (TF_GetCode(status) == TF_OK && Concat(ctx, z, 0, 2, w, 0, 1, tbn, status) &&
      Concat(ctx, z, 0, 2, w, 1, 2, tbn4, status) && Concat(ctx, z, 1, 2, w, 0, 1, bn, status)) {
    TF_ShapeHandle* outs[5] = {tbn, tbn, tbn4, bn, bn};
    for (int i = 0; i < 5 && TF_GetCode(status) == TF_OK; ++i)
      TF_ShapeInferenceContextSetOutput(ctx, i, outs[i], status);
  }
  for (TF_ShapeHandle* h : {tbn, tbn4, bn}) TF_DeleteShapeHandle(h);
  for (int i = 0; i < 5; ++i) TF_DeleteShapeHandle(in[i]);
}

void LstmGradShape(TF_ShapeInferenceContext* ctx, TF_Status* status) {
  const int from[4] = {6, 0, 1, 2};  // dz like gates, dw_re like w_re, dc0 like c0, dh0 like h0
  for (int i = 0; i < 4 && TF_GetCode(status) == TF_OK; ++i) {
    TF_ShapeHandle* h = TF_NewShapeHandle();
    TF_ShapeInferenceContextGetInput(ctx, from[i], h, status);
    if (TF_GetCode(status) == TF_OK) TF_ShapeInferenceContextSetOutput(ctx, i, h, status);
    TF_DeleteShapeHandle(h);
  }
}

void RegisterOp(const char* name, const char* const* inputs, const char* const* outputs,
                void (*shape_fn)(TF_ShapeInferenceContext*, TF_Status*)) {
  TF_Status* status = TF_NewStatus();
  TF_OpDefinitionBuilder* b = TF_NewOpDefinitionBuilder(name);
  for (const char* const* s = inputs; *s; ++s) TF_OpDefinitionBuilderAddInput(b, *s);
  for (const char* const* s = outputs; *s; ++s) TF_OpDefinitionBuilderAddOutput(b, *s);
  TF_OpDefinitionBuilderAddAttr(b, "T: {float, double}");
  TF_OpDefinitionBuilderAddAttr(b, "reverse: bool = false");
  TF_OpDefinitionBuilderSetShapeInferenceFunction(b, shape_fn);
  TF_RegisterOpDefinition(b, status);  // takes the builder
  TF_DeleteStatus(status);
}

// ------------------------------------------------------------------------------------------------------------
// kernels

struct Attrs {
  bool reverse = false;
};

void* CreateKernel(TF_OpKernelConstruction* ctx) {
  Attrs* attrs = new Attrs;
  TF_Status* status = TF_NewStatus();
  TF_Bool reverse = 0;
  TF_OpKernelConstruction_GetAttrBool(ctx, "reverse", &reverse, status);
  if (TF_GetCode(status) != TF_OK) TF_OpKernelConstruction_Failure(ctx, status);
  attrs->reverse = reverse;
  TF_DeleteStatus(status);
  return attrs;
}

void DeleteKernel(void* attrs) { delete static_cast<Attrs*>(attrs); }

// Inputs and outputs of one call; owns the TF_Tensor handles and reports the first error to TF.
class Call {
 public:
  Call(TF_OpKernelContext* ctx, const char* what) : ctx_(ctx), what_(what), status_(TF_NewStatus()) {}
  ~Call() {
    if (!error_.empty()) {
      TF_SetStatus(status_, TF_INVALID_ARGUMENT, (std::string(what_) + ": " + error_).c_str());
      TF_OpKernelContext_Failure(ctx_, status_);
    }
    for (int i = 0; i < n_in_; ++i) TF_DeleteTensor(in_[i]);
    for (int i = 0; i < n_out_; ++i) TF_DeleteTensor(out_[i]);
    TF_DeleteStatus(status_);
  }
  bool ok() const { return error_.empty() && TF_GetCode(status_) == TF_OK; }
  void Fail(const std::string& msg) {
    if (error_.empty()) error_ = msg;
  }
  // input i, checked to have the given rank
  TF_Tensor* In(int i, int rank) {
    TF_Tensor* t = nullptr;
    TF_GetInput(ctx_, i, &t, status_);
    if (TF_GetCode(status_) != TF_OK) {
      TF_OpKernelContext_Failure(ctx_, status_);
      error_ = "-";  // reported
      return nullptr;
    }
    in_[n_in_++] = t;
    if (TF_NumDims(t) != rank) Fail("input " + std::to_string(i) + " must have rank " + std::to_string(rank));
    return t;
  }
  void* Out(int i, TF_DataType dtype, std::initializer_list<int64_t> dims) {
    int64_t d[3];
    size_t bytes = TF_DataTypeSize(dtype);
    int k = 0;
    for (int64_t x : dims) bytes *= static_cast<size_t>(d[k++] = x);
    TF_Tensor* t = TF_AllocateOutput(ctx_, i, dtype, d, k, bytes, status_);
    if (TF_GetCode(status_) != TF_OK) {
      TF_OpKernelContext_Failure(ctx_, status_);
      error_ = "-";
      return nullptr;
    }
    out_[n_out_++] = t;
    return TF_TensorData(t);
  }

 private:
  TF_OpKernelContext* ctx_;
  const char* what_;
  TF_Status* status_;
  std::string error_;
  TF_Tensor* in_[10] = {};
  TF_Tensor* out_[5] = {};
  int n_in_ = 0, n_out_ = 0;
};

std::string Dims(TF_Tensor* t) {
  std::string s = "[";
  for (int i = 0; i < TF_NumDims(t); ++i) s += (i ? ", " : "") + std::to_string(TF_Dim(t, i));
  return s + "]";
}

// w_re [n, 4n], c0 and h0 [B, n], lens [B]
bool CheckShapes(Call* call, TF_Tensor* w_re, TF_Tensor* c0, TF_Tensor* h0, TF_Tensor* lens, int64_t n_batch,
                 int64_t n4) {
  if (!call->ok()) return false;
  const int64_t n = TF_Dim(w_re, 0);
  if (TF_Dim(w_re, 1) != 4 * n) call->Fail("w_re must be [n, 4n], got " + Dims(w_re));
  else if (n4 != 4 * n)
    call->Fail("the input projection has dim " + std::to_string(n4) + ", w_re needs 4*" + std::to_string(n) + " = " +
               std::to_string(4 * n));
  for (TF_Tensor* s : {c0, h0})
    if (TF_Dim(s, 0) != n_batch || TF_Dim(s, 1) != n)
      call->Fail("the initial state must be [batch=" + std::to_string(n_batch) + ", n=" + std::to_string(n) +
                 "], got " + Dims(s));
  if (TF_Dim(lens, 0) != n_batch) call->Fail("seq_len must be [batch=" + std::to_string(n_batch) + "], got " + Dims(lens));
  return call->ok();
}

template <typename T>
const T* Data(TF_Tensor* t) {
  return static_cast<const T*>(TF_TensorData(t));
}

template <typename T>
void ComputeLstm(void* attrs, TF_OpKernelContext* ctx) {
  Call call(ctx, "NativeLstm2");
  TF_Tensor* z = call.In(0, 3);
  TF_Tensor* w_re = call.In(1, 2);
  TF_Tensor* c0 = call.In(2, 2);
  TF_Tensor* h0 = call.In(3, 2);
  TF_Tensor* lens = call.In(4, 1);
  if (!call.ok()) return;
  const int64_t n_time = TF_Dim(z, 0), n_batch = TF_Dim(z, 1), n4 = TF_Dim(z, 2), n = n4 / 4;
  if (!CheckShapes(&call, w_re, c0, h0, lens, n_batch, n4)) return;
  const TF_DataType dt = TF_TensorType(z);
  T* y = static_cast<T*>(call.Out(0, dt, {n_time, n_batch, n}));
  T* c = static_cast<T*>(call.Out(1, dt, {n_time, n_batch, n}));
  T* gates = static_cast<T*>(call.Out(2, dt, {n_time, n_batch, n4}));
  T* c_final = static_cast<T*>(call.Out(3, dt, {n_batch, n}));
  T* h_final = static_cast<T*>(call.Out(4, dt, {n_batch, n}));
  if (!call.ok()) return;
  returnn_lite::lstm_kernel::Forward<T>(kPar, n_time, n_batch, n, static_cast<Attrs*>(attrs)->reverse, Data<T>(z),
                                        Data<T>(w_re), Data<T>(c0), Data<T>(h0), Data<int32_t>(lens), y, c, gates,
                                        c_final, h_final);
}

template <typename T>
void ComputeLstmGrad(void* attrs, TF_OpKernelContext* ctx) {
  Call call(ctx, "NativeLstm2Grad");
  TF_Tensor* w_re = call.In(0, 2);
  TF_Tensor* c0 = call.In(1, 2);
  TF_Tensor* h0 = call.In(2, 2);
  TF_Tensor* lens = call.In(3, 1);
  TF_Tensor* y = call.In(4, 3);
  TF_Tensor* c = call.In(5, 3);
  TF_Tensor* gates = call.In(6, 3);
  TF_Tensor* dy = call.In(7, 3);
  TF_Tensor* dc_final = call.In(8, 2);
  TF_Tensor* dh_final = call.In(9, 2);
  if (!call.ok()) return;
  const int64_t n_time = TF_Dim(gates, 0), n_batch = TF_Dim(gates, 1), n4 = TF_Dim(gates, 2), n = n4 / 4;
  if (!CheckShapes(&call, w_re, c0, h0, lens, n_batch, n4)) return;
  for (TF_Tensor* x : {y, c, dy})
    if (TF_Dim(x, 0) != n_time || TF_Dim(x, 1) != n_batch || TF_Dim(x, 2) != n)
      call.Fail("y/c/dy must be [" + std::to_string(n_time) + ", " + std::to_string(n_batch) + ", " +
                std::to_string(n) + "], got " + Dims(x));
  for (TF_Tensor* x : {dc_final, dh_final})
    if (TF_Dim(x, 0) != n_batch || TF_Dim(x, 1) != n) call.Fail("final state grads must be " + Dims(c0));
  if (!call.ok()) return;
  const TF_DataType dt = TF_TensorType(gates);
  T* dz = static_cast<T*>(call.Out(0, dt, {n_time, n_batch, n4}));
  T* dw_re = static_cast<T*>(call.Out(1, dt, {n, n4}));
  T* dc0 = static_cast<T*>(call.Out(2, dt, {n_batch, n}));
  T* dh0 = static_cast<T*>(call.Out(3, dt, {n_batch, n}));
  if (!call.ok()) return;
  returnn_lite::lstm_kernel::Backward<T>(kPar, n_time, n_batch, n, static_cast<Attrs*>(attrs)->reverse,
                                         Data<T>(w_re), Data<T>(c0), Data<T>(h0), Data<int32_t>(lens), Data<T>(y),
                                         Data<T>(c), Data<T>(gates), Data<T>(dy), Data<T>(dc_final),
                                         Data<T>(dh_final), dz, dw_re, dc0, dh0);
}

template <typename T>
void RegisterKernel(const char* op, TF_DataType dtype, void (*compute)(void*, TF_OpKernelContext*)) {
  TF_Status* status = TF_NewStatus();
  TF_KernelBuilder* b = TF_NewKernelBuilder(op, "CPU", &CreateKernel, compute, &DeleteKernel);
  TF_KernelBuilder_TypeConstraint(b, "T", dtype, status);
  if (TF_GetCode(status) == TF_OK) TF_RegisterKernelBuilder(op, b, status);  // takes the builder
  TF_DeleteStatus(status);
}

// registered when TF loads the library (tf.load_op_library)
const bool kRegistered = [] {
  static const char* const kLstmIn[] = {"z: T", "w_re: T", "c0: T", "h0: T", "seq_len: int32", nullptr};
  static const char* const kLstmOut[] = {"y: T", "c: T", "gates: T", "c_final: T", "h_final: T", nullptr};
  static const char* const kGradIn[] = {"w_re: T", "c0: T", "h0: T", "seq_len: int32", "y: T", "c: T",
                                        "gates: T", "dy: T", "dc_final: T", "dh_final: T", nullptr};
  static const char* const kGradOut[] = {"dz: T", "dw_re: T", "dc0: T", "dh0: T", nullptr};
  RegisterOp("NativeLstm2", kLstmIn, kLstmOut, &LstmShape);
  RegisterOp("NativeLstm2Grad", kGradIn, kGradOut, &LstmGradShape);
  RegisterKernel<float>("NativeLstm2", TF_FLOAT, &ComputeLstm<float>);
  RegisterKernel<double>("NativeLstm2", TF_DOUBLE, &ComputeLstm<double>);
  RegisterKernel<float>("NativeLstm2Grad", TF_FLOAT, &ComputeLstmGrad<float>);
  RegisterKernel<double>("NativeLstm2Grad", TF_DOUBLE, &ComputeLstmGrad<double>);
  return true;
}();

}  // namespace
