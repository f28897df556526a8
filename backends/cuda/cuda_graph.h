// A CUDA graph captured from the work one function queues on a stream, in its executable form,
// ready to be replayed on any stream of its device. Capture runs in thread-local mode: the
// capturing thread may not allocate device memory or synchronise meanwhile (the capture then
// fails with CUDA's error, a sign the work is not graph-safe), while other threads go on with
// their own streams. Move-only; destroying it destroys the graph. Thread-compatible; a launched
// graph may still be running when the object is destroyed (CUDA keeps it alive until done).
#ifndef FORECASTD_BACKENDS_CUDA_CUDA_GRAPH_H_
#define FORECASTD_BACKENDS_CUDA_CUDA_GRAPH_H_

#include <cuda_runtime.h>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace forecastd {

class CudaGraph {
 public:
  // Captures what `queue` puts on `stream` (which must not be capturing already). An error
  // from `queue` or from the capture fails it; the stream is out of capture mode afterwards
  // and the error the failed capture left in CUDA's per-thread state is cleared.
  static absl::StatusOr<CudaGraph> Capture(cudaStream_t stream,
                                           absl::FunctionRef<absl::Status()> queue);

  CudaGraph(CudaGraph&& other) noexcept;
  CudaGraph& operator=(CudaGraph&& other) noexcept;
  CudaGraph(const CudaGraph&) = delete;
  CudaGraph& operator=(const CudaGraph&) = delete;
  ~CudaGraph();

  // Queues one replay on `stream`.
  absl::Status Launch(cudaStream_t stream) const;

 private:
  CudaGraph() = default;
  void Destroy();

  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUDA_GRAPH_H_
