// A forecaster: a validated ModelConfig, its parameters in one arena, and a forward pass
// from raw input windows (B, T, F) to raw forecasts (B, P, targets), written once against
// the Backend op set. Inputs are standardised per feature with the mean and std stored in
// the weights (`normalizer.mean`, `normalizer.std`), and forecasts are de-standardised with
// the targets' statistics, so callers send and receive raw values.
// Thread-safety: Forward() is const and may run concurrently, each call with its own
// Workspace; changing parameters needs exclusive access.
#ifndef FORECASTD_ENGINE_MODELS_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_FORECASTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "engine/models/model_config.h"
#include "engine/models/parameters.h"

namespace forecastd {

// Scratch memory for one forward call; grows to the largest request and is then reused.
// Owned by one thread at a time.
class Workspace {
 public:
  // Forgets earlier allocations (keeps the memory).
  void Reset() { used_ = 0; }
  // `n` floats, valid until the next Reset(). Growing invalidates nothing handed out since the
  // last Reset() because memory is reserved up front by Reserve().
  float* Alloc(int64_t n);
  void Reserve(int64_t n);

 private:
  std::vector<float> buffer_;
  int64_t used_ = 0;
};

// The activations one training step keeps from its forward pass to its backward pass, plus the
// backward pass's scratch and dropout masks. Buffers are kept and reused by later steps of the
// same shapes. Owned by one training thread.
class TrainingTape {
 public:
  // Starts a new step; earlier buffers are handed out again. Keeps dropout_seed.
  void Reset() {
    next_ = 0;
    saved.clear();
  }
  // `n` floats, valid until the next Reset() (contents unspecified).
  float* Alloc(int64_t n);

  // Inverted-dropout multipliers (nn.Dropout in training) for `n` units of dropout site `site`:
  // each 0 with probability p, else 1/(1-p), drawn in order from a stream that depends on
  // dropout_seed and `site` alone, so one seed gives one mask per site whatever the
  // parameters. nullptr, meaning no dropout, when dropout_seed is unset or p is 0 (nothing is
  // drawn then). Valid until the next Reset(). p in [0, 1).
  float* DropoutMask(int64_t n, float p, uint64_t site);

  // Set by the caller before ForwardTrain: with a seed, the forward pass applies the model's
  // dropout (config's `dropout`) with masks from DropoutMask; unset (the default), it runs
  // without dropout, as evaluation does. TrainJob sets DeriveSeed(job seed,
  // SeedPurpose::kDropout, optimiser step) (engine/train/random.h) before every step, so a
  // resumed job draws the same masks.
  std::optional<uint64_t> dropout_seed;
  // What the forward pass left for the backward pass, in an order only the model knows.
  std::vector<float*> saved;
  int64_t batch = 0;

 private:
  std::vector<std::vector<float>> buffers_;
  size_t next_ = 0;
};

class Forecaster {
 public:
  // Validates `config` and lays out the parameters (zero until loaded or initialised).
  static absl::StatusOr<std::unique_ptr<Forecaster>> Create(const ModelConfig& config);
  virtual ~Forecaster() = default;

  const ModelConfig& config() const { return config_; }
  int lookback() const { return config_.lookback(); }  // T
  int horizon() const { return config_.horizon(); }    // P
  int num_features() const { return num_features_; }   // F
  int num_targets() const { return num_targets_; }
  int num_quantiles() const { return num_quantiles_; }  // Q; 1 for point forecasts
  // Values per window: P * targets * Q.
  int64_t num_outputs() const { return int64_t{horizon()} * num_targets_ * num_quantiles_; }
  // For each target, its column in the input features.
  const std::vector<int>& target_features() const { return target_features_; }

  ParameterArena& parameters() { return parameters_; }
  const ParameterArena& parameters() const { return parameters_; }

  // out (B, P, targets[, Q]) raw forecasts from inp (B, T, F) raw windows.
  absl::Status Forward(Backend& backend, float* out, const float* inp, int64_t B,
                       Workspace& workspace) const;

  // Training. The training step works in standardised units: xn (B, T, F) are standardised
  // windows and out (B, num_outputs()) the standardised forecasts, before de-standardisation.
  // ForwardTrain keeps in `tape` what Backward needs (xn must stay valid until then);
  // Backward then writes dparams (parameters().size() floats, the arena's layout) with
  // d(loss)/d(parameter) given dout = d(loss)/d(out). Entries of parameters that are not
  // trained (the normaliser's) are set to 0. Dropout is applied as PyTorch's training mode
  // applies it (between recurrent layers; in the transformer on the attention weights, after
  // the attention's projection, after the feed-forward activation and after its second
  // linear) when tape.dropout_seed is set, and Backward goes through the same masks; Forward
  // never applies it.
  absl::Status ForwardTrain(Backend& backend, float* out, const float* xn, int64_t B,
                            TrainingTape& tape) const;
  absl::Status Backward(Backend& backend, float* dparams, const float* dout,
                        TrainingTape& tape) const;
  // False for the normaliser's statistics, which training fits from data, not by gradient.
  static bool IsTrainable(const ParameterSpec& spec);

  // Floats of scratch one Forward with batch B needs.
  int64_t WorkspaceFloats(int64_t B) const;

 protected:
  explicit Forecaster(const ModelConfig& config);

  // Declares the architecture's parameters, in state_dict order.
  virtual void DeclareParameters(ParameterArena& arena) const = 0;
  // out (B, P*targets) standardised forecasts from xn (B, T, F) standardised windows.
  virtual absl::Status ForwardStandardized(Backend& backend, float* out, const float* xn, int64_t B,
                                           Workspace& workspace) const = 0;
  virtual int64_t BodyWorkspaceFloats(int64_t B) const = 0;
  // The training pair of ForwardStandardized; see ForwardTrain / Backward.
  virtual absl::Status ForwardTrainBody(Backend& backend, float* out, const float* xn, int64_t B,
                                        TrainingTape& tape) const = 0;
  virtual absl::Status BackwardBody(Backend& backend, float* dparams, const float* dout,
                                    TrainingTape& tape) const = 0;
  // x (n) *= mask (n), in place; nothing when mask is nullptr (no dropout).
  static void ApplyDropout(float* x, const float* mask, int64_t n) {
    if (mask == nullptr) return;
    for (int64_t i = 0; i < n; ++i) x[i] *= mask[i];
  }
  // The gradient slot of a named parameter in a dparams array.
  float* grad(float* dparams, absl::string_view name) const {
    return dparams + (parameters_.at(name) - parameters_.data());
  }

 public:
  bool standardized() const;

 protected:
 private:
  const ModelConfig config_;
  const int num_features_;
  const int num_targets_;
  const int num_quantiles_;
  const std::vector<int> target_features_;
  ParameterArena parameters_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_FORECASTER_H_
