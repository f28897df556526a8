#include "backends/cuda/cublas_gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <optional>

#include "absl/strings/str_cat.h"
#include "backends/cuda/library_status.h"
#include "kernels/base/status.h"
#include "kernels/cuda/linear_bias.h"

namespace forecastd {
namespace {

cublasComputeType_t ComputeType(CudaBackend::Options::Math math, cudaDataType_t ab_type) {
  // 16-bit operands are rounded already: plain fp32 accumulation.
  if (ab_type != CUDA_R_32F) return CUBLAS_COMPUTE_32F;
  // CUBLAS_COMPUTE_32F keeps fp32 multiplies and accumulation whatever the handle's math mode;
  // the fast variants let cuBLAS round the inputs for tensor cores and accumulate in fp32.
  using Math = CudaBackend::Options::Math;
  return math == Math::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
         : math == Math::kBf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
         : math == Math::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                               : CUBLAS_COMPUTE_32F;
}

absl::Status CheckIntRange(const GemmBatch& g) {
  for (const int64_t v : {g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.batch}) {
    if (v < 0 || v > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaBackend: GEMM dimension ", v, " outside cuBLAS's int range"));
    }
  }
  return absl::OkStatus();
}

// The largest power of two up to 256 that divides the address (cuBLASLt's alignment classes).
int64_t Alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int64_t alignment = 256;
  while (alignment > 1 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

template <typename T, cublasStatus_t (*Destroy)(T)>
struct LtDeleter {
  void operator()(T handle) const { Destroy(handle); }
};

}  // namespace

absl::Status RunGemm(cublasHandle_t handle, const GemmBatch& g, CudaBackend::Options::Math math) {
  RETURN_IF_ERROR(CheckIntRange(g));
  const float beta = 0.0f;
  const cublasComputeType_t compute = ComputeType(math, g.ab_type);
  const int m = static_cast<int>(g.M), n = static_cast<int>(g.N), k = static_cast<int>(g.K);
  const int lda = static_cast<int>(g.lda), ldb = static_cast<int>(g.ldb);
  const int ldc = static_cast<int>(g.ldc);
  if (g.batch == 1) {
    CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, g.op_a, g.op_b, m, n, k, &g.alpha, g.A, g.ab_type,
                                        lda, g.B, g.ab_type, ldb, &beta, g.C, CUDA_R_32F, ldc,
                                        compute, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      handle, g.op_a, g.op_b, m, n, k, &g.alpha, g.A, g.ab_type, lda, g.stride_a, g.B, g.ab_type,
      ldb, g.stride_b, &beta, g.C, CUDA_R_32F, ldc, g.stride_c, static_cast<int>(g.batch), compute,
      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

// --- LtBiasGemms

struct LtBiasGemms::Plan {
  std::unique_ptr<cublasLtMatmulDescOpaque_t,
                  LtDeleter<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>>
      op;
  std::unique_ptr<cublasLtMatrixLayoutOpaque_t,
                  LtDeleter<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>>
      a, b, c;
  std::optional<cublasLtMatmulAlgo_t> algo;  // none: fall back
};

LtBiasGemms::LtBiasGemms(const CudaStreamContext& context) : context_(context) {}

LtBiasGemms::~LtBiasGemms() = default;

absl::Status LtBiasGemms::Run(const GemmBatch& g, const float* bias,
                              CudaBackend::Options::Math math) {
  // The kBias epilogue only reads the vector.
  ASSIGN_OR_RETURN(const bool fused, TryRun(g, LtEpilogue::kBias, const_cast<float*>(bias), math));
  if (fused) return absl::OkStatus();
  ++fallback_calls_;
  RETURN_IF_ERROR(RunGemm(context_.cublas, g, math));
  return cuda::AddBias(g.C, bias, g.N, g.M, context_.stream);
}

absl::StatusOr<bool> LtBiasGemms::TryRun(const GemmBatch& g, LtEpilogue kind, float* bias,
                                         CudaBackend::Options::Math math) {
  if (g.batch != 1 || g.alpha != 1.0f || bias == nullptr || g.ldc != g.M) {
    return absl::InvalidArgumentError(
        "LtBiasGemms: one product with alpha 1, a bias and a dense D (ldc == M)");
  }
  RETURN_IF_ERROR(CheckIntRange(g));
  const Key key = {g.op_a,
                   g.op_b,
                   g.M,
                   g.N,
                   g.K,
                   g.lda,
                   g.ldb,
                   g.ldc,
                   static_cast<int64_t>(math),
                   Alignment(g.A),
                   Alignment(g.B),
                   Alignment(g.C),
                   Alignment(bias),
                   static_cast<int64_t>(g.ab_type),
                   static_cast<int64_t>(kind)};
  auto it = plans_.find(key);
  if (it == plans_.end()) {
    if (plans_.size() >= kMaxPlans) plans_.clear();
    auto plan = std::make_unique<Plan>();
    const cublasComputeType_t compute = ComputeType(math, g.ab_type);
    cublasLtMatmulDesc_t op = nullptr;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescCreate(&op, compute, CUDA_R_32F));
    plan->op.reset(op);
    const cublasLtEpilogue_t epilogue =
        kind == LtEpilogue::kBias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &g.op_a, sizeof(g.op_a)));
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &g.op_b, sizeof(g.op_b)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                          &epilogue, sizeof(epilogue)));
    // Stored (rows, cols) of each column-major operand before its op.
    const bool ta = g.op_a != CUBLAS_OP_N, tb = g.op_b != CUBLAS_OP_N;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutCreate(&a, g.ab_type, ta ? g.K : g.M, ta ? g.M : g.K, g.lda));
    plan->a.reset(a);
    CUBLAS_RETURN_IF_ERROR(
        cublasLtMatrixLayoutCreate(&b, g.ab_type, tb ? g.N : g.K, tb ? g.K : g.N, g.ldb));
    plan->b.reset(b);
    CUBLAS_RETURN_IF_ERROR(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, g.M, g.N, g.ldc));
    plan->c.reset(c);

    cublasLtMatmulPreference_t pref = nullptr;
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceCreate(&pref));
    const std::unique_ptr<cublasLtMatmulPreferenceOpaque_t,
                          LtDeleter<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>>
        pref_owner(pref);
    const uint64_t workspace = static_cast<uint64_t>(context_.workspace_bytes);
    const uint32_t align_a = static_cast<uint32_t>(key[9]),
                   align_b = static_cast<uint32_t>(key[10]);
    const uint32_t align_c = static_cast<uint32_t>(std::min(key[11], key[12]));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof(workspace)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a, sizeof(align_a)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b, sizeof(align_b)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c, sizeof(align_c)));
    CUBLAS_RETURN_IF_ERROR(cublasLtMatmulPreferenceSetAttribute(
        pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_c, sizeof(align_c)));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t heuristic =
        context_.cublas_lt == nullptr
            ? CUBLAS_STATUS_NOT_INITIALIZED
            : cublasLtMatmulAlgoGetHeuristic(context_.cublas_lt, op, a, b, c, c, pref, 1, &result,
                                             &found);
    // No algorithm (or a vector alignment the epilogue may not take): the caller falls back.
    if (heuristic == CUBLAS_STATUS_SUCCESS && found > 0 && key[12] >= 16) {
      plan->algo = result.algo;
    }
    it = plans_.emplace(key, std::move(plan)).first;
  }
  const Plan& plan = *it->second;
  if (!plan.algo.has_value() || context_.cublas_lt == nullptr) return false;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmulDescSetAttribute(
      plan.op.get(), CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  const float alpha = 1.0f, beta = 0.0f;
  CUBLAS_RETURN_IF_ERROR(cublasLtMatmul(
      context_.cublas_lt, plan.op.get(), &alpha, g.A, plan.a.get(), g.B, plan.b.get(), &beta, g.C,
      plan.c.get(), g.C, plan.c.get(), &*plan.algo, context_.workspace,
      static_cast<size_t>(context_.workspace_bytes), context_.stream));
  ++(kind == LtEpilogue::kBias ? fused_calls_ : fused_gradient_calls_);
  return true;
}

}  // namespace forecastd
