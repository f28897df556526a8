#include "backends/backend.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {

bool Backend::HasFastPath(FastPath /*path*/) const { return false; }

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

absl::Status Backend::RecurrentStackLast(RecurrentCell /*cell*/, float* /*last*/,
                                         float* /*scratch*/, const float* /*inp*/,
                                         const RecurrentDirectionWeights* /*weights*/,
                                         const RecurrentDims& /*dims*/, int /*num_layers*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), " has no RecurrentStackLast (SupportsOp(kRecurrentStackLast))"));
}

absl::Status Backend::RecurrentStep(RecurrentCell /*cell*/, float* /*out*/, float* /*scratch*/,
                                    float* /*slab*/, const int32_t* /*slots*/, const float* /*inp*/,
                                    const RecurrentDirectionWeights* /*weights*/,
                                    const RecurrentDims& /*dims*/, int /*num_layers*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), " has no RecurrentStep (HasFastPath(kRecurrentStep))"));
}

bool Backend::RecurrentStepForecastFits(const RecurrentDims& /*dims*/, int /*num_layers*/,
                                        const RecurrentStepForecastSpec& /*spec*/) const {
  return false;
}

absl::Status Backend::RecurrentStepForecast(RecurrentCell /*cell*/, float* /*y*/, float* /*slab*/,
                                            const int32_t* /*slots*/, const float* /*x*/,
                                            const RecurrentDirectionWeights* /*weights*/,
                                            const RecurrentDims& /*dims*/, int /*num_layers*/,
                                            const RecurrentStepForecastSpec& /*spec*/) {
  return absl::UnimplementedError(
      absl::StrCat(name(), " has no RecurrentStepForecast (HasFastPath(kRecurrentStepForecast))"));
}

absl::Status Backend::LinearForTraining(float* out, float* /*saved*/, const float* inp,
                                        const float* weight, const float* bias, int64_t N,
                                        int64_t IN, int64_t OUT) {
  return Linear(out, inp, weight, bias, N, IN, OUT);
}

int64_t Backend::LinearSavedFloats(int64_t /*N*/, int64_t /*IN*/, int64_t /*OUT*/) const {
  return 0;
}

int64_t Backend::AttentionSavedFloats(int64_t B, int64_t T, int64_t /*D*/, int64_t NH,
                                      bool /*dropout*/) const {
  return B * NH * T * T;
}

absl::StatusOr<int64_t> Backend::RecurrentSavedFloats(RecurrentCell /*cell*/,
                                                      const RecurrentDims& /*dims*/,
                                                      int /*num_layers*/) {
  return 0;
}

absl::Status Backend::RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                                const float* inp,
                                                const RecurrentDirectionWeights* weights,
                                                const RecurrentDims& dims, int num_layers,
                                                RecurrentSaved* saved) {
  if (saved != nullptr) saved->filled = false;
  return RecurrentStack(cell, out, scratch, inp, weights, dims, num_layers);
}

absl::Status Backend::RecurrentStackBackward(RecurrentCell cell, float* dinp,
                                             const RecurrentDirectionGrads* dweights,
                                             const float* dout, float* scratch, const float* inp,
                                             const RecurrentDirectionWeights* weights,
                                             const RecurrentDims& dims, int num_layers,
                                             RecurrentSaved* /*saved*/) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStackBackward: num_layers is ", num_layers, "; it must be >= 1"));
  }
  if (scratch == nullptr) return absl::InvalidArgumentError("RecurrentStackBackward: no scratch");
  const int64_t S = dims.B * dims.T * dims.ND * dims.H;
  const auto layer_dims = [&dims](int l) {
    RecurrentDims d = dims;
    if (l > 0) d.I = dims.ND * dims.H;
    return d;
  };
  // Layer l's input: inp for l = 0, else layer l-1's output, recomputed into scratch.
  std::vector<const float*> layer_in(static_cast<size_t>(num_layers));
  layer_in[0] = inp;
  for (int l = 0; l + 1 < num_layers; ++l) {
    float* out = scratch + l * S;
    const RecurrentDirectionWeights* w = weights + l * dims.ND;
    if (cell == RecurrentCell::kLstm) {
      RETURN_IF_ERROR(LstmLayer(out, nullptr, nullptr, layer_in[static_cast<size_t>(l)], nullptr,
                                nullptr, w, layer_dims(l)));
    } else {
      RETURN_IF_ERROR(
          GruLayer(out, nullptr, layer_in[static_cast<size_t>(l)], nullptr, w, layer_dims(l)));
    }
    layer_in[static_cast<size_t>(l + 1)] = out;
  }
  float* const dlayer[2] = {scratch + (num_layers - 1) * S, scratch + num_layers * S};
  const float* dl_out = dout;
  for (int l = num_layers - 1; l >= 0; --l) {
    float* dl_in = l > 0 ? dlayer[(num_layers - 1 - l) % 2] : dinp;
    const RecurrentDirectionGrads* g = dweights == nullptr ? nullptr : dweights + l * dims.ND;
    const RecurrentDirectionWeights* w = weights + l * dims.ND;
    const float* x = layer_in[static_cast<size_t>(l)];
    if (cell == RecurrentCell::kLstm) {
      RETURN_IF_ERROR(LstmLayerBackward(dl_in, g, dl_out, x, nullptr, nullptr, w, layer_dims(l)));
    } else {
      RETURN_IF_ERROR(GruLayerBackward(dl_in, g, dl_out, x, nullptr, w, layer_dims(l)));
    }
    dl_out = dl_in;
  }
  return absl::OkStatus();
}

}  // namespace forecastd
