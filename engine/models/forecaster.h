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

  ParameterArena& parameters() { return parameters_; }
  const ParameterArena& parameters() const { return parameters_; }

  // out (B, P, targets) raw forecasts from inp (B, T, F) raw windows.
  absl::Status Forward(Backend& backend, float* out, const float* inp, int64_t B,
                       Workspace& workspace) const;

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

  bool standardized() const;

 private:
  const ModelConfig config_;
  const int num_features_;
  const int num_targets_;
  const std::vector<int> target_features_;
  ParameterArena parameters_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_FORECASTER_H_
