#include "backends/cuda/cuda_graph.h"

#include <utility>

#include "kernels/cuda/cuda_status.h"

namespace forecastd {

absl::StatusOr<CudaGraph> CudaGraph::Capture(cudaStream_t stream,
                                             absl::FunctionRef<absl::Status()> queue) {
  CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  const absl::Status queued = queue();
  CudaGraph captured;
  const cudaError_t ended = cudaStreamEndCapture(stream, &captured.graph_);
  if (!queued.ok() || ended != cudaSuccess) {
    cudaGetLastError();  // a failed capture's error is not sticky; clear it
    RETURN_IF_ERROR(queued);
    CUDA_RETURN_IF_ERROR(ended);
  }
  CUDA_RETURN_IF_ERROR(cudaGraphInstantiate(&captured.exec_, captured.graph_, 0));
  return captured;
}

CudaGraph::CudaGraph(CudaGraph&& other) noexcept
    : graph_(std::exchange(other.graph_, nullptr)), exec_(std::exchange(other.exec_, nullptr)) {}

CudaGraph& CudaGraph::operator=(CudaGraph&& other) noexcept {
  if (this != &other) {
    Destroy();
    graph_ = std::exchange(other.graph_, nullptr);
    exec_ = std::exchange(other.exec_, nullptr);
  }
  return *this;
}

CudaGraph::~CudaGraph() { Destroy(); }

void CudaGraph::Destroy() {
  if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  exec_ = nullptr;
  graph_ = nullptr;
}

absl::Status CudaGraph::Launch(cudaStream_t stream) const {
  CUDA_RETURN_IF_ERROR(cudaGraphLaunch(exec_, stream));
  return absl::OkStatus();
}

}  // namespace forecastd
