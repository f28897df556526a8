// CudaBackend's LSTM and GRU layers on cuDNN's RNN API (cuDNN 9: cudnnRNNForward,
// cudnnRNNBackwardData_v8, cudnnRNNBackwardWeights_v8): one layer per call for LstmLayer /
// GruLayer and the backward passes, and a whole stack of layers in one call for
// RecurrentStack (inference).
//
// How PyTorch's parameters map onto cuDNN's (cudnnGetRNNWeightParams, cuDNN API reference, and
// PyTorch's own aten/src/ATen/native/cudnn/RNN.cpp, which hands nn.LSTM / nn.GRU weights to
// cuDNN by exactly this mapping):
//   pseudoLayer = layer * ND + direction (direction 0 forward, 1 reverse with
//                 CUDNN_BIDIRECTIONAL); layer 0's input width is I, the others' ND*H
//   linLayerID g in [0, G)      the input-side matrix W_g (H x I, row-major) and bias b_W_g:
//                               rows [g*H, (g+1)*H) of weight_ih, entries of bias_ih
//   linLayerID G + g            the recurrent matrix R_g (H x H) and bias b_R_g: rows of
//                               weight_hh, entries of bias_hh
//   LSTM (G = 4): ids 0..3 = input, forget, cell ("new memory"), output gates = PyTorch's
//                 i, f, g, o
//   GRU  (G = 3): ids 0..2 = reset, update, new gates = PyTorch's r, z, n; cuDNN's GRU is
//                 h' = tanh(W_h x + b_Wh + r * (R_h h + b_Rh)), h = (1 - z) h' + z h: the
//                 reset applied after the recurrent matmul and its bias, as PyTorch's
//                 ("linear before reset")
// CUDNN_RNN_DOUBLE_BIAS keeps b_W and b_R apart, as PyTorch's bias_ih and bias_hh. The plan
// reads every matrix's and bias's offset and shape from cuDNN once per shape and checks the
// shapes, so a layout we did not expect fails loudly (INTERNAL) instead of computing nonsense.
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <climits>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_graph.h"
#include "backends/cuda/library_status.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/recurrent_sequence.h"
#include "kernels/cuda/recurrent_step.h"

namespace forecastd {
namespace {

template <typename T, cudnnStatus_t (*Destroy)(T*)>
struct CudnnDeleter {
  void operator()(T* descriptor) const { Destroy(descriptor); }
};
using RnnDescriptor =
    std::unique_ptr<cudnnRNNStruct, CudnnDeleter<cudnnRNNStruct, cudnnDestroyRNNDescriptor>>;
using DropoutDescriptor =
    std::unique_ptr<cudnnDropoutStruct,
                    CudnnDeleter<cudnnDropoutStruct, cudnnDestroyDropoutDescriptor>>;
using RnnDataDescriptor =
    std::unique_ptr<cudnnRNNDataStruct,
                    CudnnDeleter<cudnnRNNDataStruct, cudnnDestroyRNNDataDescriptor>>;
using TensorDescriptor =
    std::unique_ptr<cudnnTensorStruct,
                    CudnnDeleter<cudnnTensorStruct, cudnnDestroyTensorDescriptor>>;

constexpr int64_t kFloatBytes = sizeof(float);
constexpr int64_t k16BitBytes = 2;

// One contiguous copy between our per-direction tensor and cuDNN's weight space, in floats.
struct CopyRun {
  int64_t space_offset;   // into the weight space
  int64_t tensor_offset;  // into w_ih / w_hh / b_ih / b_hh of one direction
  int64_t count;
};

// The four parameter tensors of one direction, in RecurrentDirectionWeights' order.
enum Param : int { kWIh, kWHh, kBIh, kBHh, kParamCount };

absl::Status CheckDims(const RecurrentDims& dims, absl::string_view op) {
  const auto [B, T, I, H, ND] = dims;
  if (B < 0 || T < 0 || I < 1 || H < 1 || (ND != 1 && ND != 2)) {
    return absl::InvalidArgumentError(absl::StrCat("CudaBackend::", op, ": bad dims B=", B,
                                                   " T=", T, " I=", I, " H=", H, " ND=", ND));
  }
  // cuDNN takes int sizes; its weight space and data descriptors must fit them too.
  if (B > INT_MAX || T > INT_MAX || I > INT_MAX / 4 || H > INT_MAX / 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackend::", op, ": dims beyond cuDNN's int range"));
  }
  return absl::OkStatus();
}

absl::Status Copy(void* dst, const void* src, int64_t floats, cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dst, src, static_cast<size_t>(floats) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream));
  return absl::OkStatus();
}

absl::Status Zero(void* dst, int64_t floats, cudaStream_t stream) {
  CUDA_RETURN_IF_ERROR(
      cudaMemsetAsync(dst, 0, static_cast<size_t>(floats) * sizeof(float), stream));
  return absl::OkStatus();
}

// Element count and shape check of a matrix or bias descriptor cudnnGetRNNWeightParams filled
// (documented as {1, rows, cols} and {1, rows, 1}): `rows` x `cols` (cols = 1 for a bias),
// dense and row-major. Dims of size 1 are ignored, so the check does not depend on how many
// of them cuDNN reports.
absl::StatusOr<int64_t> CheckParamShape(cudnnTensorDescriptor_t desc, cudnnDataType_t data_type,
                                        int64_t rows, int64_t cols, absl::string_view what) {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  int nb_dims = 0;
  int dim[8] = {0}, stride[8] = {0};
  CUDNN_RETURN_IF_ERROR(cudnnGetTensorNdDescriptor(desc, 8, &type, &nb_dims, dim, stride));
  const int n = std::min(nb_dims, 8);
  std::vector<int64_t> got, want;
  bool dense = true;
  int64_t inner = 1;  // elements per step of the current dim in a dense row-major layout
  for (int i = n - 1; i >= 0; --i) {
    if (dim[i] == 1) continue;
    got.insert(got.begin(), dim[i]);
    dense = dense && stride[i] == inner;
    inner *= dim[i];
  }
  for (const int64_t d : {rows, cols}) {
    if (d != 1) want.push_back(d);
  }
  if (type != data_type || n < 1 || got != want || !dense) {
    return absl::InternalError(
        absl::StrCat("cuDNN's weight layout is not the one expected: ", what, " should be ", rows,
                     " x ", cols, " of type ", static_cast<int>(data_type),
                     ", dense and row-major; cuDNN reports type ", static_cast<int>(type), ", ",
                     nb_dims, " dims [", absl::StrJoin(absl::MakeSpan(dim, n), ", "), "] strides [",
                     absl::StrJoin(absl::MakeSpan(stride, n), ", "), "]"));
  }
  return rows * cols;
}

cuda::Storage16 Storage16Of(cudnnDataType_t type) {
  return type == CUDNN_DATA_BFLOAT16 ? cuda::Storage16::kBf16 : cuda::Storage16::kFp16;
}

}  // namespace

struct CudaBackend::RnnPlan {
  // CUDNN_DATA_FLOAT, or a 16-bit type (inference under the bf16 / fp16 precisions): then x, y
  // and the weight space hold 16-bit values and the caller converts at the edges.
  cudnnDataType_t data_type = CUDNN_DATA_FLOAT;
  int64_t element_bytes = kFloatBytes;
  DropoutDescriptor dropout;
  RnnDescriptor rnn;
  // (B, T, I) and (B, T, ND*H), batch-major, or (T, B, ...) time-major (RecurrentStackLast's
  // plans); every sequence T long.
  RnnDataDescriptor x, y;
  TensorDescriptor h;  // (L*ND, B, H): h_0, h_n, and (same shape) c_0, c_n
  int64_t weight_space_bytes = 0;
  int64_t inference_work_bytes = 0;
  int64_t training_work_bytes = 0;
  int64_t reserve_bytes = 0;
  DeviceBuffer seq_lengths;  // int32 (B), all T, on the device: cuDNN reads it asynchronously
  // runs[l * ND + d][param]: where layer l's direction d tensors sit in the weight space, in
  // elements.
  std::vector<std::array<std::vector<CopyRun>, kParamCount>> runs;
  uint64_t last_use = 0;
  // Training calls of this plan as CUDA graphs (RecordedTrainingCallLocked), by the memory they
  // touch: the keys seen once (waiting for a second call), the graphs captured (least recently
  // used last to go), and whether CUDA refused a capture of this plan's calls.
  struct Recorded {
    std::vector<uintptr_t> key;
    CudaGraph graph;
    uint64_t last_use = 0;
  };
  std::vector<std::vector<uintptr_t>> seen_once;
  std::vector<Recorded> recorded;
  bool capture_refused = false;
};

absl::StatusOr<CudaBackend::RnnPlan*> CudaBackend::PlanLocked(RecurrentCell cell,
                                                              const RecurrentDims& dims,
                                                              int num_layers, bool inference,
                                                              bool storage16, bool time_major) {
  const RnnKey key = {static_cast<int64_t>(cell),
                      dims.B,
                      dims.T,
                      dims.I,
                      dims.H,
                      dims.ND,
                      num_layers,
                      inference ? 1 : 0,
                      storage16 ? 1 : 0,
                      time_major ? 1 : 0};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    if (static_cast<int>(plans_.size()) >= options_.rnn_plan_capacity) {
      auto oldest = std::min_element(
          plans_.begin(), plans_.end(),
          [](const auto& a, const auto& b) { return a.second->last_use < b.second->last_use; });
      // Queued work may still read its sequence lengths.
      CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context_.stream));
      plans_.erase(oldest);
    }
    // Candidates in order of preference; the first cuDNN accepts is kept. The persistent
    // kernel's time grows with the rows (it wins at one or two, measured on an H100,
    // bench/RESULTS.md); the small-H variant covers every batch size where it applies.
    using Algo = Options::RnnAlgo;
    std::vector<cudnnRNNAlgo_t> candidates;
    if (inference) {
      switch (options_.rnn_algo) {
        case Algo::kAuto:
          if (dims.B <= options_.rnn_persist_max_batch) {
            candidates.push_back(CUDNN_RNN_ALGO_PERSIST_STATIC);
          }
          if (dims.H <= 192) candidates.push_back(CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H);
          candidates.push_back(CUDNN_RNN_ALGO_STANDARD);
          break;
        case Algo::kPersistStatic:
          candidates.push_back(CUDNN_RNN_ALGO_PERSIST_STATIC);
          break;
        case Algo::kPersistStaticSmallH:
          candidates.push_back(CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H);
          break;
        case Algo::kStandard:
          candidates.push_back(CUDNN_RNN_ALGO_STANDARD);
          break;
      }
    } else {
      if (dims.H <= 192 && options_.rnn_algo != Algo::kStandard) {
        candidates.push_back(CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H);
      }
      candidates.push_back(CUDNN_RNN_ALGO_STANDARD);
    }
    // 16-bit storage where cuDNN takes it, fp16 first under both 16-bit precisions: cuDNN's
    // fp16 persistent kernel ran an LSTM H=128 B=1024 forecast in 0.67 ms on an H100 where its
    // bf16 path took 1.38 ms plus ~3 ms of host time per call (bench/RESULTS.md), fp16's
    // mantissa is finer than bf16's, and standardised windows sit far inside its range
    // (|x| < 65504; ConvertTo16 saturates a stray value beyond it). bf16, then fp32, where
    // cuDNN refuses fp16.
    std::vector<cudnnDataType_t> data_types;
    if (storage16) {
      data_types.push_back(CUDNN_DATA_HALF);
      data_types.push_back(CUDNN_DATA_BFLOAT16);
    }
    data_types.push_back(CUDNN_DATA_FLOAT);
    absl::StatusOr<std::shared_ptr<RnnPlan>> plan = absl::InternalError("no RNN algorithm");
    for (const cudnnDataType_t data_type : data_types) {
      for (const cudnnRNNAlgo_t algo : candidates) {
        plan = BuildPlanLocked(cell, dims, num_layers, algo, data_type, time_major);
        if (plan.ok()) break;
      }
      if (plan.ok()) break;
    }
    RETURN_IF_ERROR(plan.status());
    ++stats_.rnn_plans_built;
    it = plans_.emplace(key, *std::move(plan)).first;
  }
  it->second->last_use = ++plan_clock_;
  return it->second.get();
}

absl::StatusOr<std::shared_ptr<CudaBackend::RnnPlan>> CudaBackend::BuildPlanLocked(
    RecurrentCell cell, const RecurrentDims& dims, int num_layers, cudnnRNNAlgo_t algo,
    cudnnDataType_t data_type, bool time_major) {
  const auto [B, T, I, H, ND] = dims;
  const int64_t L = num_layers;
  const int64_t G = cell == RecurrentCell::kLstm ? 4 : 3;
  const cudnnHandle_t handle = context_.cudnn;
  auto plan = std::make_shared<RnnPlan>();
  plan->data_type = data_type;
  plan->element_bytes = data_type == CUDNN_DATA_FLOAT ? kFloatBytes : k16BitBytes;

  // Inference and single layers apply no dropout, but cuDNN wants a descriptor; with dropout 0
  // it needs no RNG states (PyTorch sets its no-dropout descriptor up the same way).
  cudnnDropoutDescriptor_t dropout = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateDropoutDescriptor(&dropout));
  plan->dropout.reset(dropout);
  CUDNN_RETURN_IF_ERROR(cudnnSetDropoutDescriptor(dropout, handle, /*dropout=*/0.0f,
                                                  /*states=*/nullptr, /*stateSizeInBytes=*/0,
                                                  /*seed=*/0));

  cudnnRNNDescriptor_t rnn = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateRNNDescriptor(&rnn));
  plan->rnn.reset(rnn);
  // FMA math keeps fp32 data off TF32 tensor cores, which CUDNN_DEFAULT_MATH would allow on
  // Ampere and later; 16-bit data runs on tensor cores with fp32 accumulation.
  const bool packed = B == 1 || time_major;
  const cudnnMathType_t math = data_type != CUDNN_DATA_FLOAT           ? CUDNN_TENSOR_OP_MATH
                               : options_.math == Options::Math::kFp32 ? CUDNN_FMA_MATH
                                                                       : CUDNN_DEFAULT_MATH;
  CUDNN_RETURN_IF_ERROR(cudnnSetRNNDescriptor_v8(
      rnn, algo, cell == RecurrentCell::kLstm ? CUDNN_LSTM : CUDNN_GRU, CUDNN_RNN_DOUBLE_BIAS,
      ND == 2 ? CUDNN_BIDIRECTIONAL : CUDNN_UNIDIRECTIONAL, CUDNN_LINEAR_INPUT, data_type,
      CUDNN_DATA_FLOAT, math, static_cast<int32_t>(I), static_cast<int32_t>(H),
      /*projSize=*/static_cast<int32_t>(H), static_cast<int32_t>(L), dropout,
      // The unpacked (padded) batch-major layout is accepted only with padded I/O enabled. One
      // row in batch-major order is already time-major and packed, the layout cuDNN runs
      // without padding support (measurably less work per call: no rearrangement of x and y).
      packed ? CUDNN_RNN_PADDED_IO_DISABLED : CUDNN_RNN_PADDED_IO_ENABLED));

  const std::vector<int> seq_lengths(B, static_cast<int>(T));
  const cudnnRNNDataLayout_t layout =
      packed ? CUDNN_RNN_DATA_LAYOUT_SEQ_MAJOR_PACKED : CUDNN_RNN_DATA_LAYOUT_BATCH_MAJOR_UNPACKED;
  cudnnRNNDataDescriptor_t x = nullptr, y = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateRNNDataDescriptor(&x));
  plan->x.reset(x);
  CUDNN_RETURN_IF_ERROR(cudnnCreateRNNDataDescriptor(&y));
  plan->y.reset(y);
  CUDNN_RETURN_IF_ERROR(cudnnSetRNNDataDescriptor(x, data_type, layout, static_cast<int>(T),
                                                  static_cast<int>(B), static_cast<int>(I),
                                                  seq_lengths.data(), /*paddingFill=*/nullptr));
  CUDNN_RETURN_IF_ERROR(cudnnSetRNNDataDescriptor(y, data_type, layout, static_cast<int>(T),
                                                  static_cast<int>(B), static_cast<int>(ND * H),
                                                  seq_lengths.data(), /*paddingFill=*/nullptr));

  cudnnTensorDescriptor_t h = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&h));
  plan->h.reset(h);
  const int h_dims[3] = {static_cast<int>(L * ND), static_cast<int>(B), static_cast<int>(H)};
  const int h_strides[3] = {static_cast<int>(B * H), static_cast<int>(H), 1};
  CUDNN_RETURN_IF_ERROR(cudnnSetTensorNdDescriptor(h, data_type, 3, h_dims, h_strides));

  size_t weight_space = 0, inference_work = 0, training_work = 0, reserve = 0, unused = 0;
  CUDNN_RETURN_IF_ERROR(cudnnGetRNNWeightSpaceSize(handle, rnn, &weight_space));
  CUDNN_RETURN_IF_ERROR(cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_INFERENCE, x,
                                                  &inference_work, &unused));
  CUDNN_RETURN_IF_ERROR(
      cudnnGetRNNTempSpaceSizes(handle, rnn, CUDNN_FWD_MODE_TRAINING, x, &training_work, &reserve));
  plan->weight_space_bytes = static_cast<int64_t>(weight_space);
  plan->inference_work_bytes = static_cast<int64_t>(inference_work);
  plan->training_work_bytes = static_cast<int64_t>(training_work);
  plan->reserve_bytes = static_cast<int64_t>(reserve);

  // Offsets of every matrix and bias, read against the real weight space (its base is
  // 256-byte aligned like any other this backend will pass).
  ASSIGN_OR_RETURN(void* space, ScratchLocked(kWeightSpace, plan->weight_space_bytes));
  cudnnTensorDescriptor_t m_desc = nullptr, b_desc = nullptr;
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&m_desc));
  const TensorDescriptor m_owner(m_desc);
  CUDNN_RETURN_IF_ERROR(cudnnCreateTensorDescriptor(&b_desc));
  const TensorDescriptor b_owner(b_desc);
  const char* base = static_cast<const char*>(space);
  plan->runs.resize(L * ND);
  for (int64_t pseudo = 0; pseudo < L * ND; ++pseudo) {
    for (int64_t id = 0; id < 2 * G; ++id) {
      const bool recurrent = id >= G;
      const int64_t g = recurrent ? id - G : id;
      const int64_t cols = recurrent ? H : (pseudo < ND ? I : ND * H);
      void* m_addr = nullptr;
      void* b_addr = nullptr;
      CUDNN_RETURN_IF_ERROR(cudnnGetRNNWeightParams(handle, rnn, static_cast<int32_t>(pseudo),
                                                    weight_space, space, static_cast<int32_t>(id),
                                                    m_desc, &m_addr, b_desc, &b_addr));
      const std::string what = absl::StrCat("layer ", pseudo / ND, " direction ", pseudo % ND,
                                            " linLayerID ", id, recurrent ? " (recurrent)" : "");
      if (m_addr == nullptr || b_addr == nullptr) {
        return absl::InternalError(absl::StrCat("cuDNN reports no ", what, " matrix or bias"));
      }
      ASSIGN_OR_RETURN(const int64_t m_count,
                       CheckParamShape(m_desc, data_type, H, cols, what + " matrix"));
      ASSIGN_OR_RETURN(const int64_t b_count,
                       CheckParamShape(b_desc, data_type, H, 1, what + " bias"));
      const int64_t m_offset = static_cast<const char*>(m_addr) - base;
      const int64_t b_offset = static_cast<const char*>(b_addr) - base;
      for (const auto& [offset, count] :
           {std::pair{m_offset, m_count}, std::pair{b_offset, b_count}}) {
        if (offset < 0 || offset % plan->element_bytes != 0 ||
            offset + count * plan->element_bytes > plan->weight_space_bytes) {
          return absl::InternalError(
              absl::StrCat("cuDNN placed ", what, " outside its weight space (offset ", offset,
                           " bytes, ", count, " elements, space ", plan->weight_space_bytes, ")"));
        }
      }
      auto add = [](std::vector<CopyRun>& runs, int64_t space_offset, int64_t tensor_offset,
                    int64_t count) {
        // Gates are usually stored back to back in both layouts: one copy then serves them all.
        if (!runs.empty()) {
          CopyRun& last = runs.back();
          if (last.space_offset + last.count == space_offset &&
              last.tensor_offset + last.count == tensor_offset) {
            last.count += count;
            return;
          }
        }
        runs.push_back({space_offset, tensor_offset, count});
      };
      auto& runs = plan->runs[pseudo];
      add(runs[recurrent ? kWHh : kWIh], m_offset / plan->element_bytes, g * H * cols, m_count);
      add(runs[recurrent ? kBHh : kBIh], b_offset / plan->element_bytes, g * H, b_count);
    }
  }
  ASSIGN_OR_RETURN(plan->seq_lengths,
                   allocator_->Allocate(B * static_cast<int64_t>(sizeof(int32_t))));
  // Last, so that no failure above leaves a copy queued into a block the plan's destruction
  // would give back. The source is pageable: it is staged before this returns, and the copy is
  // ordered before every use on the stream.
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(plan->seq_lengths.data(), seq_lengths.data(),
                                       static_cast<size_t>(B) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, context_.stream));

  return plan;
}

absl::Status CudaBackend::CopyWeightsInLocked(const RnnPlan& plan,
                                              const RecurrentDirectionWeights* weights,
                                              void* weight_space) {
  if (weights == nullptr) return absl::InvalidArgumentError("CudaBackend: weights are null");
  for (size_t d = 0; d < plan.runs.size(); ++d) {
    const float* tensors[kParamCount] = {weights[d].w_ih, weights[d].w_hh, weights[d].b_ih,
                                         weights[d].b_hh};
    for (int p = 0; p < kParamCount; ++p) {
      for (const CopyRun& run : plan.runs[d][p]) {
        if (tensors[p] == nullptr) {
          if (p == kWIh || p == kWHh) {
            return absl::InvalidArgumentError(
                absl::StrCat("CudaBackend: direction ", d, " has a null weight matrix"));
          }
          // A missing bias is a zero bias (all-zero bits in every format).
          CUDA_RETURN_IF_ERROR(cudaMemsetAsync(
              static_cast<char*>(weight_space) + run.space_offset * plan.element_bytes, 0,
              static_cast<size_t>(run.count * plan.element_bytes), context_.stream));
          continue;
        }
        const float* from = tensors[p] + run.tensor_offset;
        if (plan.data_type == CUDNN_DATA_FLOAT) {
          RETURN_IF_ERROR(Copy(static_cast<float*>(weight_space) + run.space_offset, from,
                               run.count, context_.stream));
        } else {
          RETURN_IF_ERROR(cuda::ConvertTo16(
              static_cast<char*>(weight_space) + run.space_offset * plan.element_bytes, from,
              run.count, Storage16Of(plan.data_type), context_.stream));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::CopyGradientsOutLocked(const RnnPlan& plan, const float* weight_grads,
                                                 const RecurrentDirectionGrads* dweights) {
  if (dweights == nullptr) return absl::OkStatus();
  for (size_t d = 0; d < plan.runs.size(); ++d) {
    float* tensors[kParamCount] = {dweights[d].dw_ih, dweights[d].dw_hh, dweights[d].db_ih,
                                   dweights[d].db_hh};
    for (int p = 0; p < kParamCount; ++p) {
      if (tensors[p] == nullptr) continue;
      for (const CopyRun& run : plan.runs[d][p]) {
        RETURN_IF_ERROR(Copy(tensors[p] + run.tensor_offset, weight_grads + run.space_offset,
                             run.count, context_.stream));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::RnnInferenceLocked(const RnnPlan& plan, RecurrentCell cell,
                                             const RecurrentDirectionWeights* weights,
                                             const void* x, void* y, const float* h_0, float* h_n,
                                             const float* c_0, float* c_n) {
  ASSIGN_OR_RETURN(void* space, ScratchLocked(kWeightSpace, plan.weight_space_bytes));
  RETURN_IF_ERROR(CopyWeightsInLocked(plan, weights, space));
  ASSIGN_OR_RETURN(void* work, WorkspaceLocked(plan.inference_work_bytes));
  // Null hx / cx are zero initial states; null hy / cy are not written (cuDNN's convention,
  // and ours).
  CUDNN_RETURN_IF_ERROR(cudnnRNNForward(
      context_.cudnn, plan.rnn.get(), CUDNN_FWD_MODE_INFERENCE, plan.seq_lengths.as<int32_t>(),
      plan.x.get(), x, plan.y.get(), y, plan.h.get(), h_0, h_n, plan.h.get(),
      cell == RecurrentCell::kLstm ? c_0 : nullptr, cell == RecurrentCell::kLstm ? c_n : nullptr,
      static_cast<size_t>(plan.weight_space_bytes), space,
      static_cast<size_t>(plan.inference_work_bytes), work, /*reserveSpaceSize=*/0,
      /*reserveSpace=*/nullptr));
  return absl::OkStatus();
}

absl::Status CudaBackend::RecurrentForwardLocked(RecurrentCell cell, float* out, float* h_n,
                                                 float* c_n, const float* inp, const float* h_0,
                                                 const float* c_0,
                                                 const RecurrentDirectionWeights* weights,
                                                 const RecurrentDims& dims, int num_layers) {
  RETURN_IF_ERROR(CheckDims(dims, num_layers > 1                 ? "RecurrentStack"
                                  : cell == RecurrentCell::kLstm ? "LstmLayer"
                                                                 : "GruLayer"));
  const auto [B, T, I, H, ND] = dims;
  if (B == 0) return absl::OkStatus();
  const cudaStream_t stream = context_.stream;
  if (T == 0) {  // no steps: the final states are the initial ones
    const int64_t n = num_layers * ND * B * H;
    for (const auto& [dst, src] : {std::pair{h_n, h_0}, std::pair{c_n, c_0}}) {
      if (dst == nullptr) continue;
      RETURN_IF_ERROR(src != nullptr ? Copy(dst, src, n, stream) : Zero(dst, n, stream));
    }
    return absl::OkStatus();
  }
  // The bf16 / fp16 precisions run a stack without states (a forecast) on 16-bit data.
  const bool storage16 = Storage16().has_value() && h_0 == nullptr && c_0 == nullptr &&
                         h_n == nullptr && c_n == nullptr;
  ASSIGN_OR_RETURN(RnnPlan * plan, PlanLocked(cell, dims, num_layers, /*inference=*/true, storage16,
                                              /*time_major=*/false));
  const void* x = inp;
  void* y = out;
  if (plan->data_type != CUDNN_DATA_FLOAT) {
    ASSIGN_OR_RETURN(void* x16, ScratchLocked(kRnnInput16, B * T * I * plan->element_bytes));
    ASSIGN_OR_RETURN(y, ScratchLocked(kRnnOutput16, B * T * ND * H * plan->element_bytes));
    RETURN_IF_ERROR(cuda::ConvertTo16(x16, inp, B * T * I, Storage16Of(plan->data_type), stream));
    x = x16;
  }
  RETURN_IF_ERROR(RnnInferenceLocked(*plan, cell, weights, x, y, h_0, h_n, c_0, c_n));
  if (plan->data_type != CUDNN_DATA_FLOAT) {
    return cuda::ConvertFrom16(out, y, B * T * ND * H, Storage16Of(plan->data_type), stream);
  }
  return absl::OkStatus();
}

bool CudaBackend::PersistentStack(const RecurrentDims& dims, int num_layers) const {
  using Kernel = Options::RecurrentKernel;
  if (options_.recurrent_kernel == Kernel::kCudnn) return false;
  if (options_.recurrent_kernel == Kernel::kAuto &&
      dims.B > (Storage16().has_value() ? options_.persistent_max_batch_16
                                        : options_.persistent_max_batch)) {
    return false;
  }
  if (dims.B < 1 || dims.T < 1 || num_layers < 1) return false;
  if (dims.ND == 1 && cuda::RecurrentWavefrontFits(dims.I, dims.H, num_layers, true)) return true;
  return cuda::RecurrentSweepFits(dims.I, dims.H, /*with_proj=*/true);
}

absl::Status CudaBackend::PersistentStackLocked(RecurrentCell cell, float* out_seq, float* out_last,
                                                const float* inp,
                                                const RecurrentDirectionWeights* weights,
                                                const RecurrentDims& dims, int num_layers) {
  RETURN_IF_ERROR(CheckDims(dims, out_seq != nullptr ? "RecurrentStack" : "RecurrentStackLast"));
  if ((out_seq == nullptr && out_last == nullptr) || inp == nullptr || weights == nullptr) {
    return absl::InvalidArgumentError("RecurrentStack: null pointer");
  }
  // Named copies, not a structured binding: the lambda below captures them.
  const int64_t B = dims.B, T = dims.T, I = dims.I, H = dims.H, ND = dims.ND;
  const cuda::StepCell step_cell =
      cell == RecurrentCell::kLstm ? cuda::StepCell::kLstm : cuda::StepCell::kGru;
  const cudaStream_t stream = context_.stream;
  if (ND == 1 && cuda::RecurrentWavefrontFits(I, H, num_layers, /*with_proj=*/false)) {
    ++stats_.persistent_stacks;
    return cuda::RecurrentWavefront(out_seq, out_last, inp, /*proj=*/nullptr, weights, step_cell, B,
                                    T, I, H, num_layers, Storage16(), stream);
  }
  const int64_t GH = (cell == RecurrentCell::kLstm ? 4 : 3) * H;
  ASSIGN_OR_RETURN(float* proj, ScratchFloatsLocked(kSequenceProj, ND * B * T * GH));
  // proj + d * B * T * GH (B, T, G*H) = input (B, T, width) @ w_ih^T + b_ih of weights[d].
  const auto project = [&](const float* input, int64_t width, const RecurrentDirectionWeights* w)
                           ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    for (int64_t d = 0; d < ND; ++d) {
      RETURN_IF_ERROR(LinearGemmLocked({.op_a = CUBLAS_OP_T,
                                        .M = GH,
                                        .N = B * T,
                                        .K = width,
                                        .A = w[d].w_ih,
                                        .lda = width,
                                        .B = input,
                                        .ldb = width,
                                        .C = proj + d * B * T * GH,
                                        .ldc = GH},
                                       /*a16=*/nullptr, /*b16=*/nullptr, w[d].b_ih));
    }
    return absl::OkStatus();
  };
  if (ND == 1 && cuda::RecurrentWavefrontFits(I, H, num_layers, /*with_proj=*/true)) {
    // Layer 0's input is too wide to multiply in the kernel: its projection comes first.
    RETURN_IF_ERROR(project(inp, I, weights));
    ++stats_.persistent_stacks;
    return cuda::RecurrentWavefront(out_seq, out_last, inp, proj, weights, step_cell, B, T, I, H,
                                    num_layers, Storage16(), stream);
  }
  // Layer by layer: a sweep each, from input projections of every step computed first (one GEMM
  // per direction) where the input is too wide to multiply in the kernel. The layers in between
  // alternate between two buffers, since a sweep may read its input while it writes.
  const int64_t layer_floats = B * T * ND * H;
  float* between = nullptr;
  if (num_layers > 1) {
    ASSIGN_OR_RETURN(between,
                     ScratchFloatsLocked(kSequenceLayer, (num_layers > 2 ? 2 : 1) * layer_floats));
  }
  const float* layer_in = inp;
  for (int l = 0; l < num_layers; ++l) {
    const float* projections[2] = {proj, proj + B * T * GH};
    const int64_t width = l == 0 ? I : ND * H;
    const bool in_kernel = cuda::RecurrentSweepFits(width, H, /*with_proj=*/false);
    if (!in_kernel) RETURN_IF_ERROR(project(layer_in, width, weights + l * ND));
    const bool top = l == num_layers - 1;
    float* const layer_out = top ? out_seq : between + (l % 2) * layer_floats;
    RETURN_IF_ERROR(cuda::RecurrentSweep(
        layer_out, top ? out_last : nullptr, layer_in, in_kernel ? nullptr : projections,
        weights + l * ND, step_cell, B, T, width, H, static_cast<int>(ND), Storage16(), stream));
    layer_in = layer_out;
  }
  ++stats_.persistent_stacks;
  return absl::OkStatus();
}

absl::Status CudaBackend::RecurrentStackLast(RecurrentCell cell, float* last, float* scratch,
                                             const float* inp,
                                             const RecurrentDirectionWeights* weights,
                                             const RecurrentDims& dims, int num_layers) {
  if (num_layers < 1 || dims.T < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RecurrentStackLast: need num_layers >= 1 and T >= 1, got ", num_layers, " and ", dims.T));
  }
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    RETURN_IF_ERROR(CheckDims(dims, "RecurrentStackLast"));
    const auto [B, T, I, H, ND] = dims;
    if (B == 0) return absl::OkStatus();
    if (last == nullptr || scratch == nullptr || inp == nullptr) {
      return absl::InvalidArgumentError("RecurrentStackLast: null pointer");
    }
    if (PersistentStack(dims, num_layers)) {
      return PersistentStackLocked(cell, /*out_seq=*/nullptr, last, inp, weights, dims, num_layers);
    }
    const cudaStream_t stream = context_.stream;
    ASSIGN_OR_RETURN(RnnPlan * plan,
                     PlanLocked(cell, dims, num_layers, /*inference=*/true,
                                /*storage16=*/Storage16().has_value(), /*time_major=*/true));
    const bool float_data = plan->data_type == CUDNN_DATA_FLOAT;
    const std::optional<cuda::Storage16> type =
        float_data ? std::nullopt : std::optional(Storage16Of(plan->data_type));
    ASSIGN_OR_RETURN(void* x, ScratchLocked(kRnnInput16, B * T * I * plan->element_bytes));
    void* const y = scratch;  // (T, B, ND*H), of 16-bit values where the plan runs on them
    RETURN_IF_ERROR(cuda::ToTimeMajor(x, inp, B, T, I, type, stream));
    RETURN_IF_ERROR(RnnInferenceLocked(*plan, cell, weights, x, y, /*h_0=*/nullptr,
                                       /*h_n=*/nullptr, /*c_0=*/nullptr, /*c_n=*/nullptr));
    // y is (T, B, ND*H): the last step is its final B*ND*H values.
    const int64_t n = B * ND * H, offset = (T - 1) * n * plan->element_bytes;
    const void* y_last = static_cast<const char*>(y) + offset;
    if (float_data) return Copy(last, static_cast<const float*>(y_last), n, stream);
    return cuda::ConvertFrom16(last, y_last, n, *type, stream);
  });
}

absl::Status CudaBackend::RecurrentStep(RecurrentCell cell, float* out, float* scratch, float* slab,
                                        const int32_t* slots, const float* inp,
                                        const RecurrentDirectionWeights* weights,
                                        const RecurrentDims& dims, int num_layers) {
  if (num_layers < 1 || dims.T != 1 || dims.ND != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStep: need num_layers >= 1, T = 1 and ND = 1, got ", num_layers,
                     ", ", dims.T, " and ", dims.ND));
  }
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    RETURN_IF_ERROR(CheckDims(dims, "RecurrentStep"));
    if (dims.B == 0) return absl::OkStatus();
    // The counters must start at zero; the kernels leave them so. Only a new block needs it.
    // Room for 16384 streams from the start, so that a larger batch than the first one seen
    // rarely moves them (a CUDA graph captured earlier would still point at the old block).
    const int64_t counter_bytes =
        std::max(cuda::RecurrentStepCounterInts(dims.B), cuda::RecurrentStepCounterInts(16384)) *
        static_cast<int64_t>(sizeof(int));
    const bool fresh = counter_bytes > scratch_[kStepCounters].block_bytes();
    ASSIGN_OR_RETURN(void* counters, ScratchLocked(kStepCounters, counter_bytes));
    if (fresh) {
      CUDA_RETURN_IF_ERROR(
          cudaMemsetAsync(counters, 0, static_cast<size_t>(scratch_[kStepCounters].block_bytes()),
                          context_.stream));
    }
    cuda::StepKernel kernel = cuda::StepKernel::kAuto;
    switch (options_.step_kernel) {
      case Options::StepKernel::kAuto:
        break;
      case Options::StepKernel::kCluster:
        kernel = cuda::StepKernel::kCluster;
        break;
      case Options::StepKernel::kWarp:
        kernel = cuda::StepKernel::kWarp;
        break;
      case Options::StepKernel::kTiled:
        kernel = cuda::StepKernel::kTiled;
        break;
    }
    return cuda::RecurrentStepForward(
        out, scratch, slab, static_cast<int*>(counters), slots, inp, weights,
        cell == RecurrentCell::kLstm ? cuda::StepCell::kLstm : cuda::StepCell::kGru, kernel, dims.B,
        dims.I, dims.H, num_layers, context_.stream);
  });
}

namespace {

// The kernels' form of a step's forecast; false when it has more targets than they take.
bool ToStepForecast(const RecurrentStepForecastSpec& spec, cuda::StepForecast* out) {
  if (spec.target_features.size() > static_cast<size_t>(cuda::kStepForecastMaxTargets) ||
      spec.outputs > std::numeric_limits<int>::max() || spec.quantiles < 1 ||
      spec.quantiles > std::numeric_limits<int>::max()) {
    return false;
  }
  out->x_mean = spec.x_mean;
  out->x_std = spec.x_std;
  out->head_weight = spec.head_weight;
  out->head_bias = spec.head_bias;
  out->outputs = static_cast<int>(spec.outputs);
  out->y_mean = spec.y_mean;
  out->y_std = spec.y_std;
  out->targets = static_cast<int>(spec.target_features.size());
  out->quantiles = static_cast<int>(spec.quantiles);
  for (size_t k = 0; k < spec.target_features.size(); ++k) {
    out->target_feature[k] = spec.target_features[k];
  }
  return true;
}

}  // namespace

bool CudaBackend::StepForecastFor(const RecurrentDims& dims, int num_layers,
                                  const RecurrentStepForecastSpec& spec,
                                  cuda::StepForecast* forecast) const {
  return options_.step_kernel != Options::StepKernel::kWarp &&
         options_.step_kernel != Options::StepKernel::kTiled && dims.T == 1 && dims.ND == 1 &&
         ToStepForecast(spec, forecast) &&
         cuda::RecurrentStepForecastFits(dims.B, dims.I, dims.H, num_layers, *forecast);
}

bool CudaBackend::RecurrentStepForecastFits(const RecurrentDims& dims, int num_layers,
                                            const RecurrentStepForecastSpec& spec) const {
  cuda::StepForecast forecast;
  return StepForecastFor(dims, num_layers, spec, &forecast);
}

absl::Status CudaBackend::RecurrentStepForecast(RecurrentCell cell, float* y, float* slab,
                                                const int32_t* slots, const float* x,
                                                const RecurrentDirectionWeights* weights,
                                                const RecurrentDims& dims, int num_layers,
                                                const RecurrentStepForecastSpec& spec) {
  cuda::StepForecast forecast;
  if (!StepForecastFor(dims, num_layers, spec, &forecast)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RecurrentStepForecast: ", dims.B, " streams, I=", dims.I, " H=", dims.H, " T=", dims.T,
        " ND=", dims.ND, ", ", num_layers, " layers, ", spec.outputs, " outputs and ",
        spec.target_features.size(), " targets are not what one launch takes"));
  }
  const cuda::StepCell step_cell =
      cell == RecurrentCell::kLstm ? cuda::StepCell::kLstm : cuda::StepCell::kGru;
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    step_finished_ = false;
    if (resident_ != nullptr && dims.B <= cuda::kResidentStepMaxStreams &&
        num_layers <= cuda::kResidentStepMaxLayers) {
      cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
      CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(context_.stream, &capture));
      if (capture == cudaStreamCaptureStatusNone) {
        ResidentStep::Model model;
        model.slab = slab;
        std::copy(weights, weights + num_layers, model.weights.begin());
        model.layers = num_layers;
        model.cell = step_cell;
        model.I = dims.I;
        model.H = dims.H;
        model.forecast = forecast;
        ASSIGN_OR_RETURN(const bool ran, resident_->TryRun(model, y, slots, x, dims.B));
        if (ran) {
          step_finished_ = true;
          return absl::OkStatus();
        }
      }
    }
    return cuda::RecurrentStepForecast(y, slab, slots, x, weights, step_cell, dims.B, dims.I,
                                       dims.H, num_layers, forecast, context_.stream);
  });
}

void CudaBackend::set_resident_step(ResidentStep* resident) {
  absl::MutexLock lock(&mu_);
  resident_ = resident;
}

bool CudaBackend::TakeStepFinished() {
  absl::MutexLock lock(&mu_);
  return std::exchange(step_finished_, false);
}

namespace {

// How many keys and graphs a plan keeps: a training job calls each of its plans on one or two
// sets of buffers (a step's, and a saved forward's or the backend's own), so a few suffice.
constexpr size_t kRecordedKeys = 4;

// The pointers of every weight tensor (AppendWeights) or gradient (AppendGrads) of `n`
// directions, for a recorded call's key.
void AppendWeights(std::vector<uintptr_t>& key, const RecurrentDirectionWeights* weights,
                   size_t n) {
  if (weights == nullptr) {
    key.push_back(0);
    return;
  }
  for (size_t d = 0; d < n; ++d) {
    for (const float* tensor :
         {weights[d].w_ih, weights[d].w_hh, weights[d].b_ih, weights[d].b_hh}) {
      key.push_back(reinterpret_cast<uintptr_t>(tensor));
    }
  }
}

void AppendGrads(std::vector<uintptr_t>& key, const RecurrentDirectionGrads* grads, size_t n) {
  if (grads == nullptr) {
    key.push_back(0);
    return;
  }
  for (size_t d = 0; d < n; ++d) {
    for (const float* tensor : {grads[d].dw_ih, grads[d].dw_hh, grads[d].db_ih, grads[d].db_hh}) {
      key.push_back(reinterpret_cast<uintptr_t>(tensor));
    }
  }
}

}  // namespace

absl::Status CudaBackend::RecordedTrainingCallLocked(RnnPlan& plan, std::vector<uintptr_t> key,
                                                     absl::FunctionRef<absl::Status()> queue) {
  const cudaStream_t stream = context_.stream;
  if (!options_.rnn_training_graphs || plan.capture_refused) return queue();
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capturing));
  if (capturing != cudaStreamCaptureStatusNone) return queue();  // part of a caller's graph
  for (RnnPlan::Recorded& recorded : plan.recorded) {
    if (recorded.key == key) {
      recorded.last_use = plan.last_use;
      ++stats_.rnn_training_graph_replays;
      return recorded.graph.Launch(stream);
    }
  }
  const auto seen = std::find(plan.seen_once.begin(), plan.seen_once.end(), key);
  if (seen == plan.seen_once.end()) {
    if (plan.seen_once.size() >= kRecordedKeys) plan.seen_once.erase(plan.seen_once.begin());
    plan.seen_once.push_back(std::move(key));
    return queue();
  }
  plan.seen_once.erase(seen);
  absl::StatusOr<CudaGraph> graph = CudaGraph::Capture(stream, queue);
  if (!graph.ok()) {
    // Nothing of the capture ran: the call runs directly. If it succeeds so, the capture was
    // what failed, and this plan's calls run directly from now on.
    const absl::Status direct = queue();
    if (direct.ok()) {
      ++stats_.rnn_training_capture_failures;
      plan.capture_refused = true;
    }
    return direct;
  }
  ++stats_.rnn_training_graphs_captured;
  RETURN_IF_ERROR(graph->Launch(stream));
  if (plan.recorded.size() >= kRecordedKeys) {
    plan.recorded.erase(
        std::min_element(plan.recorded.begin(), plan.recorded.end(),
                         [](const auto& a, const auto& b) { return a.last_use < b.last_use; }));
  }
  plan.recorded.push_back({std::move(key), *std::move(graph), plan.last_use});
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CudaBackend::RecurrentSavedFloats(RecurrentCell cell,
                                                          const RecurrentDims& dims,
                                                          int num_layers) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentSavedFloats: num_layers is ", num_layers, "; it must be >= 1"));
  }
  RETURN_IF_ERROR(CheckDims(dims, "RecurrentSavedFloats"));
  if (dims.B == 0 || dims.T == 0) return 0;  // the forward runs no cuDNN call then
  int64_t reserve_bytes = 0;
  RETURN_IF_ERROR(Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    ASSIGN_OR_RETURN(const RnnPlan* plan, PlanLocked(cell, dims, num_layers, /*inference=*/false,
                                                     /*storage16=*/false, /*time_major=*/false));
    reserve_bytes = plan->reserve_bytes;
    return absl::OkStatus();
  }));
  return (reserve_bytes + kFloatBytes - 1) / kFloatBytes;
}

absl::Status CudaBackend::RecurrentTrainingForwardLocked(RecurrentCell cell, float* out,
                                                         const float* inp,
                                                         const RecurrentDirectionWeights* weights,
                                                         const RecurrentDims& dims, int num_layers,
                                                         RecurrentSaved& saved) {
  RETURN_IF_ERROR(CheckDims(dims, "RecurrentStackForTraining"));
  const auto [B, T, I, H, ND] = dims;
  if (B == 0 || T == 0) {
    return RecurrentForwardLocked(cell, out, nullptr, nullptr, inp, nullptr, nullptr, weights, dims,
                                  num_layers);
  }
  ASSIGN_OR_RETURN(RnnPlan * plan, PlanLocked(cell, dims, num_layers, /*inference=*/false,
                                              /*storage16=*/false, /*time_major=*/false));
  if (saved.state_floats * kFloatBytes < plan->reserve_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStackForTraining: saved state holds ", saved.state_floats,
                     " floats; the stack's reserve space takes ", plan->reserve_bytes, " bytes"));
  }
  ASSIGN_OR_RETURN(void* space, ScratchLocked(kWeightSpace, plan->weight_space_bytes));
  ASSIGN_OR_RETURN(void* work, WorkspaceLocked(plan->training_work_bytes));
  std::vector<uintptr_t> key = {1,
                                reinterpret_cast<uintptr_t>(out),
                                reinterpret_cast<uintptr_t>(inp),
                                reinterpret_cast<uintptr_t>(space),
                                reinterpret_cast<uintptr_t>(work),
                                reinterpret_cast<uintptr_t>(saved.state)};
  AppendWeights(key, weights, plan->runs.size());
  RETURN_IF_ERROR(RecordedTrainingCallLocked(
      *plan, std::move(key), [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        RETURN_IF_ERROR(CopyWeightsInLocked(*plan, weights, space));
        CUDNN_RETURN_IF_ERROR(cudnnRNNForward(
            context_.cudnn, plan->rnn.get(), CUDNN_FWD_MODE_TRAINING,
            plan->seq_lengths.as<int32_t>(), plan->x.get(), inp, plan->y.get(), out, plan->h.get(),
            /*hx=*/nullptr, /*hy=*/nullptr, plan->h.get(), /*cx=*/nullptr, /*cy=*/nullptr,
            static_cast<size_t>(plan->weight_space_bytes), space,
            static_cast<size_t>(plan->training_work_bytes), work,
            static_cast<size_t>(plan->reserve_bytes), saved.state));
        return absl::OkStatus();
      }));
  saved.out = out;
  saved.filled = true;
  return absl::OkStatus();
}

absl::Status CudaBackend::RecurrentBackwardLocked(
    RecurrentCell cell, float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
    const float* inp, const float* h_0, const float* c_0, const RecurrentDirectionWeights* weights,
    const RecurrentDims& dims, int num_layers, RecurrentSaved* saved) {
  const bool lstm = cell == RecurrentCell::kLstm;
  RETURN_IF_ERROR(CheckDims(dims, num_layers > 1 ? "RecurrentStackBackward"
                                  : lstm         ? "LstmLayerBackward"
                                                 : "GruLayerBackward"));
  const auto [B, T, I, H, ND] = dims;
  const cudaStream_t stream = context_.stream;
  if (B == 0 || T == 0) {  // nothing flows: every weight gradient is an empty sum
    if (dweights == nullptr) return absl::OkStatus();
    const int64_t GH = (lstm ? 4 : 3) * H;
    for (int64_t d = 0; d < num_layers * ND; ++d) {
      const RecurrentDirectionGrads& g = dweights[d];
      const int64_t in = d < ND ? I : ND * H;
      for (const auto& [grad, n] : {std::pair{g.dw_ih, GH * in}, std::pair{g.dw_hh, GH * H},
                                    std::pair{g.db_ih, GH}, std::pair{g.db_hh, GH}}) {
        if (grad != nullptr) RETURN_IF_ERROR(Zero(grad, n, stream));
      }
    }
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(RnnPlan * plan, PlanLocked(cell, dims, num_layers, /*inference=*/false,
                                              /*storage16=*/false, /*time_major=*/false));
  const size_t space_bytes = static_cast<size_t>(plan->weight_space_bytes);
  const size_t work_bytes = static_cast<size_t>(plan->training_work_bytes);
  const size_t reserve_bytes = static_cast<size_t>(plan->reserve_bytes);
  // The caller's saved training forward of this stack spares the recomputation: its y and its
  // reserve space (which the plan's size check in the forward made large enough).
  const bool use_saved = saved != nullptr && saved->filled && h_0 == nullptr && c_0 == nullptr;
  if (use_saved && saved->state_floats * kFloatBytes < plan->reserve_bytes) {
    return absl::InvalidArgumentError(
        "RecurrentStackBackward: the saved forward is not of this stack (its state is too small)");
  }
  ASSIGN_OR_RETURN(void* space, ScratchLocked(kWeightSpace, plan->weight_space_bytes));
  void* y = use_saved ? const_cast<float*>(saved->out) : nullptr;
  void* reserve = use_saved ? saved->state : nullptr;
  if (!use_saved) {
    ASSIGN_OR_RETURN(y, ScratchLocked(kRnnOutput, B * T * ND * H * kFloatBytes));
    ASSIGN_OR_RETURN(reserve, ScratchLocked(kReserve, plan->reserve_bytes));
  }
  void* dx = dinp;
  if (dx == nullptr) {
    ASSIGN_OR_RETURN(dx, ScratchLocked(kRnnInputGrad, B * T * I * kFloatBytes));
  }
  ASSIGN_OR_RETURN(void* grads, ScratchLocked(kWeightGrads, plan->weight_space_bytes));
  ASSIGN_OR_RETURN(void* work, WorkspaceLocked(plan->training_work_bytes));
  const int32_t* seq_lengths = plan->seq_lengths.as<int32_t>();
  const float* cx = lstm ? c_0 : nullptr;

  if (use_saved) {
    ++stats_.rnn_saved_forwards_read;
    // cudnnRNNBackwardData_v8 writes into the reserve space: the state serves this backward only.
    saved->filled = false;
  }
  std::vector<uintptr_t> key = {2,
                                use_saved ? 1u : 0u,
                                reinterpret_cast<uintptr_t>(dx),
                                reinterpret_cast<uintptr_t>(dout),
                                reinterpret_cast<uintptr_t>(inp),
                                reinterpret_cast<uintptr_t>(h_0),
                                reinterpret_cast<uintptr_t>(cx),
                                reinterpret_cast<uintptr_t>(space),
                                reinterpret_cast<uintptr_t>(y),
                                reinterpret_cast<uintptr_t>(reserve),
                                reinterpret_cast<uintptr_t>(grads),
                                reinterpret_cast<uintptr_t>(work)};
  AppendWeights(key, weights, plan->runs.size());
  AppendGrads(key, dweights, plan->runs.size());
  return RecordedTrainingCallLocked(
      *plan, std::move(key), [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
        RETURN_IF_ERROR(CopyWeightsInLocked(*plan, weights, space));
        if (!use_saved) {
          // The forward again, in training mode: y and the reserve space feed both backward passes.
          CUDNN_RETURN_IF_ERROR(cudnnRNNForward(
              context_.cudnn, plan->rnn.get(), CUDNN_FWD_MODE_TRAINING, seq_lengths, plan->x.get(),
              inp, plan->y.get(), y, plan->h.get(), h_0, /*hy=*/nullptr, plan->h.get(), cx,
              /*cy=*/nullptr, space_bytes, space, work_bytes, work, reserve_bytes, reserve));
        }
        // dhy = dcy = null: the final states do not reach the loss; dhx = dcx = null: no gradient
        // flows to the initial states (kernels/ref/recurrent.h).
        CUDNN_RETURN_IF_ERROR(cudnnRNNBackwardData_v8(
            context_.cudnn, plan->rnn.get(), seq_lengths, plan->y.get(), y, dout, plan->x.get(), dx,
            plan->h.get(), h_0, /*dhy=*/nullptr, /*dhx=*/nullptr, plan->h.get(), cx,
            /*dcy=*/nullptr,
            /*dcx=*/nullptr, space_bytes, space, work_bytes, work, reserve_bytes, reserve));
        if (dweights == nullptr) return absl::OkStatus();
        // cudnnRNNBackwardWeights_v8 documents CUDNN_WGRAD_MODE_ADD as the mode it supports, so the
        // gradients are accumulated into a zeroed space: written, not accumulated, for our callers.
        CUDA_RETURN_IF_ERROR(cudaMemsetAsync(grads, 0, space_bytes, stream));
        CUDNN_RETURN_IF_ERROR(cudnnRNNBackwardWeights_v8(
            context_.cudnn, plan->rnn.get(), CUDNN_WGRAD_MODE_ADD, seq_lengths, plan->x.get(), inp,
            plan->h.get(), h_0, plan->y.get(), y, space_bytes, grads, work_bytes, work,
            reserve_bytes, reserve));
        return CopyGradientsOutLocked(*plan, static_cast<const float*>(grads), dweights);
      });
}

}  // namespace forecastd
