#include "backends/backend.h"

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {

absl::Status Backend::RecurrentStack(RecurrentCell cell, float* out, float* scratch,
                                     const float* inp, const RecurrentDirectionWeights* weights,
                                     const RecurrentDims& dims, int num_layers) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStack: num_layers is ", num_layers, "; it must be >= 1"));
  }
  if (num_layers > 1 && scratch == nullptr) {
    return absl::InvalidArgumentError("RecurrentStack: more than one layer and no scratch");
  }
  // Layers alternate between out and scratch so that the top one writes out.
  const float* layer_in = inp;
  for (int l = 0; l < num_layers; ++l) {
    float* layer_out = (num_layers - 1 - l) % 2 == 0 ? out : scratch;
    RecurrentDims layer_dims = dims;
    if (l > 0) layer_dims.I = dims.ND * dims.H;
    const RecurrentDirectionWeights* layer_weights = weights + l * dims.ND;
    if (cell == RecurrentCell::kLstm) {
      RETURN_IF_ERROR(LstmLayer(layer_out, nullptr, nullptr, layer_in, nullptr, nullptr,
                                layer_weights, layer_dims));
    } else {
      RETURN_IF_ERROR(GruLayer(layer_out, nullptr, layer_in, nullptr, layer_weights, layer_dims));
    }
    layer_in = layer_out;
  }
  return absl::OkStatus();
}

}  // namespace forecastd
