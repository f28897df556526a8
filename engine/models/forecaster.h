// A forecaster: a validated ModelConfig, its parameters in one arena, and a forward pass
// from raw input windows (B, T, F) to raw forecasts (B, P, targets), written once against
// the Backend op set. Inputs are standardised per feature with the mean and std stored in
// the weights (`normalizer.mean`, `normalizer.std`), and forecasts are de-standardised with
// the targets' statistics, so callers send and receive raw values; a model with window scaling
// (ModelConfig.window_scaling) also scales each window by its own statistics and maps the
// forecast back, inside Forward and the training pair alike. Forward runs on host
// memory by default; with a ForwardPlacement it reads a device copy of the arena and moves data
// with device kernels, so the whole forecast runs on a GPU backend.
// Thread-safety: Forward() is const and may run concurrently, each call with its own
// Workspace; changing parameters needs exclusive access.
#ifndef FORECASTD_ENGINE_MODELS_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_FORECASTER_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/backend.h"
#include "engine/models/data_ops.h"
#include "engine/models/model_config.h"
#include "engine/models/parameters.h"
#include "engine/models/training_tape.h"
#include "engine/models/workspace.h"

namespace forecastd {

// Where one Forward call finds its weights and how it moves data; the defaults are the
// model's own (host) arena and HostDataOps().
struct ForwardPlacement {
  // A copy of parameters().data() (parameters().size() floats, same layout), e.g. uploaded to
  // the backend's device; nullptr: the arena itself.
  const float* weights = nullptr;
  // nullptr: HostDataOps().
  DataOps* data_ops = nullptr;
};

class Forecaster {
 public:
  // The most parameters a model may have: 512 MiB of float32 weights (training keeps about
  // four times that). The config's per-field bounds multiply to far more; a config above this
  // is refused before anything is allocated, so a Train request cannot exhaust memory.
  static constexpr int64_t kMaxParameters = int64_t{1} << 27;

  // Validates `config` and lays out the parameters (zero until loaded or initialised).
  // INVALID_ARGUMENT for an invalid config or one with more than kMaxParameters parameters.
  static absl::StatusOr<std::unique_ptr<Forecaster>> Create(const ModelConfig& config);
  virtual ~Forecaster() = default;

  const ModelConfig& config() const { return config_; }
  int lookback() const { return config_.lookback(); }  // T
  int horizon() const { return config_.horizon(); }    // P
  int num_features() const { return num_features_; }   // F (FeatureColumnNames)
  int num_targets() const { return num_targets_; }
  int num_quantiles() const { return num_quantiles_; }  // Q; 1 for point forecasts
  // Values per window: P * targets * Q.
  int64_t num_outputs() const { return int64_t{horizon()} * num_targets_ * num_quantiles_; }
  // For each target, its column in the input features.
  const std::vector<int>& target_features() const { return target_features_; }
  // Floats of one input record (InputRecordFloats): the window (T, F), then with future-known
  // features their values for the forecast steps (P, Fk), then for a model with series the
  // window's index in ModelConfig.series (a float). T * F for a model without either, so the
  // record is the window.
  int64_t input_floats() const { return input_floats_; }
  int num_future_features() const { return static_cast<int>(future_features_.size()); }  // Fk
  int num_series() const { return num_series_; }  // S; 0 for one series

  ParameterArena& parameters() { return parameters_; }
  const ParameterArena& parameters() const { return parameters_; }

  // out (B, P, targets[, Q]) raw forecasts from inp (B, input_floats()) raw input records, all
  // host memory.
  absl::Status Forward(Backend& backend, float* out, const float* inp, int64_t B,
                       Workspace& workspace) const {
    return Forward(backend, out, inp, B, workspace, ForwardPlacement{});
  }
  // The same on other memory: out, inp, the workspace's memory and placement.weights are
  // memory of the backend's device, and placement.data_ops works on it. Asynchronous when the
  // backend's ops are: out is complete once the backend's work is.
  absl::Status Forward(Backend& backend, float* out, const float* inp, int64_t B,
                       Workspace& workspace, const ForwardPlacement& placement) const;

  // Training. The training step works in standardised units: xn (B, input_floats()) are
  // standardised input records (windows and future-known values standardised, a series index
  // as it is) and out (B, num_outputs()) the standardised forecasts, before de-standardisation
  // (each window by its series' statistics for a model with series).
  // ForwardTrain keeps in `tape` what Backward needs (xn must stay valid until then);
  // Backward then writes dparams (parameters().size() floats, the arena's layout) with
  // d(loss)/d(parameter) given dout = d(loss)/d(out). Entries of parameters that are not
  // trained (the normaliser's) are set to 0. Dropout is applied as PyTorch's training mode
  // applies it (between recurrent layers; in the transformer on the attention weights, after
  // the attention's projection, after the feed-forward activation and after its second
  // linear) when tape.dropout_seed is set, and Backward goes through the same masks; Forward
  // never applies it.
  // xn, out, dout and dparams are memory of the tape's placement (host memory by default)
  // and the weights are the placement's; asynchronous when the backend's ops are.
  absl::Status ForwardTrain(Backend& backend, float* out, const float* xn, int64_t B,
                            TrainingTape& tape) const;
  absl::Status Backward(Backend& backend, float* dparams, const float* dout,
                        TrainingTape& tape) const;
  // False for the normaliser's statistics, which training fits from data, not by gradient.
  static bool IsTrainable(const ParameterSpec& spec);
  // The arena offsets Backward reports to TrainingTape::on_gradients_final, in the order it
  // reports them (decreasing): fixed by the architecture, so a data-parallel rank that has no
  // windows in a step can queue the same collectives as the ranks that ran Backward. Empty
  // for a model whose backward reports none.
  virtual std::vector<int64_t> GradientBlockStarts() const { return {}; }

  // Stateful training (truncated back-propagation through time, TrainingConfig.stateful; the
  // maths is in recurrent_stateful_training.cc). OK when this model can be trained so (a
  // unidirectional LSTM or GRU); otherwise INVALID_ARGUMENT saying why.
  virtual absl::Status SupportsStatefulTraining() const;
  // Floats of the recurrent state B streams carry between chunks: every layer's h, then, for
  // an LSTM, every layer's c, each (L, B, H). 0 when SupportsStatefulTraining() is not OK.
  virtual int64_t ChunkStateFloats(int64_t B) const;
  // The training forward of one chunk of K time steps of B streams, from the states state_0
  // (ChunkStateFloats(B) floats; zeros start a stream): out (B, K, num_outputs()) standardised
  // forecasts, one per step from the top layer's output at that step, and state_n, the final
  // states (not aliasing state_0). Backward then gives d(loss)/d(parameter) through the chunk
  // only (no gradient reaches state_0). xn (B, K, F) and state_0 must stay valid and unchanged
  // until Backward. Memory and dropout as ForwardTrain.
  absl::Status ForwardTrainChunk(Backend& backend, float* out, float* state_n, const float* xn,
                                 const float* state_0, int64_t B, int64_t K,
                                 TrainingTape& tape) const;

  // Floats of scratch one Forward with batch B needs.
  int64_t WorkspaceFloats(int64_t B) const;

  // --- State mode (tick streams of a unidirectional LSTM / GRU; see SupportsStateMode).
  // Floats of one stream's state: each layer's h then, for an LSTM, its c: L * (2 or 1) * H.
  // 0 for a model without a state mode.
  virtual int64_t StateFloats() const { return 0; }
  // One time step for B streams: out (B, P, targets[, Q]) raw forecasts after one more raw tick
  // x (B, F) per stream, whose state before the tick is slab[slots[b] * StateFloats(), + that)
  // and is replaced by the state after it. Slots are distinct, int32 of the slab's memory. So
  // B streams fed x_1..x_N one step at a time from zero states forecast what Forward does on
  // the window x_1..x_N (a model of lookback N). Memory and asynchrony as Forward with a
  // placement. UNIMPLEMENTED for a model without a state mode.
  absl::Status Step(Backend& backend, float* out, const float* x, float* slab, const int32_t* slots,
                    int64_t B, Workspace& workspace, const ForwardPlacement& placement) const;
  // Floats of scratch one Step with batch B needs.
  int64_t StepWorkspaceFloats(int64_t B) const;
  // Whether Step on `backend` for B streams is one backend call that reads x and slots and
  // writes out itself (Backend::RecurrentStepForecast): then, on a GPU, they may be pinned
  // host memory the device reaches, and the step needs no copies around it.
  bool StepIsOneCall(const Backend& backend, int64_t B) const {
    return StateFloats() > 0 && B > 0 && StepOneCallFits(backend, B);
  }
  // B raw input records (B, input_floats()) at the normaliser's mean (zeros for a model without
  // one; the first series' for a model with series, whose index they hold): they standardise to
  // zeros, so a forecast from them is finite whenever the weights are. For warm-up and padding.
  std::vector<float> NeutralWindows(int64_t B) const;

 protected:
  explicit Forecaster(const ModelConfig& config);

  // What the architecture's body reads per window: body_lookback() rows (T, then P forecast
  // steps for a model with future-known features) of body_features() columns (the F features,
  // then the static covariates, then the forecast-step flag with future-known features); see
  // ModelConfig.covariates. T and F for a model without covariates.
  int body_lookback() const { return body_lookback_; }
  int body_features() const { return body_features_; }

  // Declares the architecture's parameters, in state_dict order. Called once, by Create, which
  // declares the normaliser's first; a model may keep the offsets Add returns, so that it never
  // looks a parameter up by name per call.
  virtual void DeclareParameters(ParameterArena& arena) = 0;
  // out (B, P*targets) standardised forecasts from xn (B, body_lookback(), body_features())
  // standardised windows, with the weights of `p` and the data movement of `data`.
  virtual absl::Status ForwardStandardized(Backend& backend, const ParameterView& p, DataOps& data,
                                           float* out, const float* xn, int64_t B,
                                           Workspace& workspace) const = 0;
  virtual int64_t BodyWorkspaceFloats(int64_t B) const = 0;
  // Step's body in standardised units: out (B, P*targets*Q) from xn (B, F); see Step.
  virtual absl::Status StepStandardized(Backend& backend, const ParameterView& p, DataOps& data,
                                        float* out, const float* xn, float* slab,
                                        const int32_t* slots, int64_t B,
                                        Workspace& workspace) const;
  virtual int64_t StepBodyWorkspaceFloats(int64_t /*B*/) const { return 0; }
  // Step as one backend call, where the architecture and the backend allow it (see
  // StepIsOneCall): out from the raw ticks x, standardising and de-standardising included.
  virtual bool StepOneCallFits(const Backend& /*backend*/, int64_t /*B*/) const { return false; }
  virtual absl::Status StepOneCall(Backend& backend, const ParameterView& p, float* out,
                                   const float* x, float* slab, const int32_t* slots,
                                   int64_t B) const;
  // The training pair of ForwardStandardized; see ForwardTrain / Backward.
  virtual absl::Status ForwardTrainBody(Backend& backend, float* out, const float* xn, int64_t B,
                                        TrainingTape& tape) const = 0;
  // dxn (B, body_lookback(), body_features()), when not nullptr, receives d(loss)/d(xn)
  // (window scaling's affine map needs it).
  virtual absl::Status BackwardBody(Backend& backend, float* dparams, float* dxn, const float* dout,
                                    TrainingTape& tape) const = 0;
  // The training pair's chunk forward (ForwardTrainChunk), for a model whose
  // SupportsStatefulTraining() is OK; BackwardBody then runs the chunk's backward. The
  // default returns SupportsStatefulTraining()'s error.
  virtual absl::Status ForwardTrainChunkBody(Backend& backend, float* out, float* state_n,
                                             const float* xn, const float* state_0, int64_t B,
                                             int64_t K, TrainingTape& tape) const;
  // out = act(inp) over n values (out may be inp); ACTIVATION_UNSPECIFIED is GELU's erf form.
  static absl::Status Activate(Backend& backend, v1::Activation act, float* out, const float* inp,
                               int64_t n);
  // dinp = dout * act'(inp) over n values (dinp may be dout).
  static absl::Status ActivateBackward(Backend& backend, v1::Activation act, float* dinp,
                                       const float* dout, const float* inp, int64_t n);
  // x (n) *= mask (n), in place; nothing when mask is nullptr (no dropout).
  static absl::Status ApplyDropout(DataOps& data, float* x, const float* mask, int64_t n) {
    if (mask == nullptr) return absl::OkStatus();
    return data.Multiply(x, x, mask, n);
  }
  // The gradient slot of a named parameter in a dparams array.
  float* grad(float* dparams, absl::string_view name) const { return dparams + Offset(name); }
  // Tells the tape's on_gradients_final (if set) that every gradient from the named
  // parameter's offset to the arena's end is now final. For a backward pass that finishes the
  // arena's blocks from its end towards its start.
  absl::Status GradientsFinalFrom(TrainingTape& tape, absl::string_view name) const {
    if (!tape.on_gradients_final) return absl::OkStatus();
    return tape.on_gradients_final(Offset(name));
  }
  int64_t Offset(absl::string_view name) const { return parameters_.at(name) - parameters_.data(); }

 public:
  bool standardized() const;

 private:
  // out (rows, P, targets[, Q]) raw forecasts from y, the same standardised.
  absl::Status Destandardize(DataOps& data, const ParameterView& p, float* out, const float* y,
                             int64_t rows) const;
  // Window scaling (ModelConfig.window_scaling; see the proto for the maths).
  bool scales_windows() const { return HasWindowScaling(config_); }
  bool window_statistics() const {
    return config_.window_scaling().kind() != v1::WindowScaling::WINDOW_SCALING_NONE;
  }
  bool window_affine() const { return config_.window_scaling().affine(); }
  // The scaled windows xw (and z, before the affine map, where not nullptr) of xn (B, T, F),
  // with each window's center and scale (B, F) computed into the given buffers; the
  // future-known columns of xw keep xn's values. xw may be xn for a model without future-known
  // features. For a model with window statistics (a kind other than NONE).
  absl::Status ScaleWindows(DataOps& data, const ParameterView& p, float* xw, float* z,
                            float* center, float* scale, const float* xn, int64_t B) const;
  // out (B, P*targets*Q) in xn's units from d, the body's output, and the scaled windows xw
  // it read; v (where not nullptr) keeps each value before scale and center. center and scale
  // nullptr: 0 and 1 (no statistics).
  absl::Status UnscaleForecasts(DataOps& data, const ParameterView& p, float* out, float* v,
                                const float* d, const float* xw, const float* center,
                                const float* scale, int64_t B) const;
  // Backward for a model with window scaling: the forecast's side, the body, the window's side.
  absl::Status BackwardScaled(Backend& backend, float* dparams, const float* dout,
                              TrainingTape& tape) const;

  // Models with future-known features or series (HasRecordExtras; the maths is in
  // forecaster_records.cc). Forward: raw records to raw forecasts.
  absl::Status ForwardRecords(Backend& backend, const ParameterView& p, DataOps& data, float* out,
                              const float* inp, int64_t B, Workspace& workspace) const;
  int64_t RecordWorkspaceFloats(int64_t B) const;
  // The normaliser's statistics per window (B, F): each window's series' row (idx[b *
  // idx_stride]) with series, else the model's one row; 0 and 1 without a normaliser.
  absl::Status RecordStatistics(DataOps& data, const ParameterView& p, float* center, float* scale,
                                const float* idx, int64_t idx_stride, int64_t B) const;
  // The body's input u (B, body_lookback(), body_features()) from the (scaled) windows xw
  // (B, T, F), the standardised future-known values fn (B, P, Fk) and the series indices
  // (idx[b * idx_stride]); statics is scratch of B * static features floats.
  absl::Status AssembleBodyInput(DataOps& data, const ParameterView& p, float* u, float* statics,
                                 const float* xw, const float* fn, const float* idx,
                                 int64_t idx_stride, int64_t B) const;
  // dxw (B, T, F): the window's rows and columns of the body input's gradient du, zero on the
  // future-known columns (their window scaling is not used).
  absl::Status BodyInputGradientToWindows(DataOps& data, float* dxw, const float* du,
                                          int64_t B) const;

  const ModelConfig config_;
  const int num_features_;
  const int num_targets_;
  const int num_quantiles_;
  const std::vector<int> target_features_;
  const std::vector<int> future_features_;  // Fk: each future-known feature's column
  const int num_series_;
  const int num_static_;
  const int64_t input_floats_;
  const int body_lookback_;
  const int body_features_;
  ParameterArena parameters_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_FORECASTER_H_
