// A forecaster: a validated ModelConfig, its parameters in one arena, and a forward pass
// from raw input windows (B, T, F) to raw forecasts (B, P, targets), written once against
// the Backend op set. Inputs are standardised per feature with the mean and std stored in
// the weights (`normalizer.mean`, `normalizer.std`), and forecasts are de-standardised with
// the targets' statistics, so callers send and receive raw values. Forward runs on host
// memory by default; with a ForwardPlacement it reads a device copy of the arena and moves data
// with device kernels, so the whole forecast runs on a GPU backend.
// Thread-safety: Forward() is const and may run concurrently, each call with its own
// Workspace; changing parameters needs exclusive access.
#ifndef FORECASTD_ENGINE_MODELS_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_FORECASTER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/backend.h"
#include "engine/models/model_config.h"
#include "engine/models/parameters.h"

namespace forecastd {

// Scratch memory for one forward call; grows to the largest request and is then reused.
// Owned by one thread at a time. The default one owns host memory; one made over external
// memory (a GPU caller's device buffer) hands that out instead and never grows.
class Workspace {
 public:
  Workspace() = default;
  // Hands out `external` (n floats, 64-byte aligned, any memory space; borrowed, must outlive
  // the workspace) instead of memory of its own.
  Workspace(float* external, int64_t n) : external_(external), external_floats_(n) {}

  // Forgets earlier allocations (keeps the memory).
  void Reset() { used_ = 0; }
  // `n` floats, valid until the next Reset(). Growing invalidates nothing handed out since the
  // last Reset() because memory is reserved up front by Reserve().
  float* Alloc(int64_t n);
  // Makes room for `n` floats: grows owned memory; RESOURCE_EXHAUSTED when external memory
  // is smaller.
  absl::Status Reserve(int64_t n);
  int64_t capacity() const {
    return external_ != nullptr ? external_floats_ : static_cast<int64_t>(buffer_.size());
  }

 private:
  float* data() { return external_ != nullptr ? external_ : buffer_.data(); }

  float* external_ = nullptr;
  int64_t external_floats_ = 0;
  std::vector<float> buffer_;
  int64_t used_ = 0;
};

// The steps of a forward or training pass that the Backend op set leaves out: standardising the
// input, de-standardising the forecast, copying rows between buffers, and dropout. The default,
// HostDataOps(), runs them as loops on host memory; a caller whose buffers are device memory
// passes its device's version (CudaDataOps, engine/models/cuda_data_ops.h, on the backend's
// stream), whose work must be ordered with the backend's ops. Used by one pass at a time.
class DataOps {
 public:
  virtual ~DataOps() = default;
  // out (R, F) = (inp (R, F) - mean (F)) / std (F), column by column.
  virtual absl::Status Standardize(float* out, const float* inp, const float* mean,
                                   const float* std, int64_t R, int64_t F) = 0;
  // For each row r < R of the (R, C) matrices y and out, columns [c0, c0 + W):
  // out[r, c] = y[r, c] * std[0] + mean[0] (one target's statistics; other columns untouched).
  virtual absl::Status Destandardize(float* out, const float* y, const float* mean,
                                     const float* std, int64_t R, int64_t C, int64_t c0,
                                     int64_t W) = 0;
  // out (R, W) = rows of inp: out[r, :] = inp[r * stride, r * stride + W).
  virtual absl::Status GatherRows(float* out, const float* inp, int64_t R, int64_t stride,
                                  int64_t W) = 0;
  // GatherRows' inverse: out[r * stride, r * stride + W) = inp[r, :] (the rest untouched).
  virtual absl::Status ScatterRows(float* out, const float* inp, int64_t R, int64_t stride,
                                   int64_t W) = 0;
  // out[i] = inp[i] for i < n.
  virtual absl::Status Copy(float* out, const float* inp, int64_t n) = 0;
  // out[i] = 0 for i < n.
  virtual absl::Status Zero(float* out, int64_t n) = 0;
  // out[i] = inp[i] * mask[i] for i < n; out may be inp.
  virtual absl::Status Multiply(float* out, const float* inp, const float* mask, int64_t n) = 0;
  // Inverted-dropout multipliers: mask[i] = 0 when the i-th UniformFloat() of Random(seed)
  // (engine/train/random.h) is below p, else 1/(1-p). Every implementation draws the same
  // stream, so one seed gives one mask on every device. p in (0, 1).
  virtual absl::Status DropoutMask(float* mask, int64_t n, float p, uint64_t seed) = 0;
};

// The host loops; stateless, shared by every host forward call.
DataOps& HostDataOps();

// Named read access to a copy of a ParameterArena's data with the arena's layout: the arena's
// own floats, or a device copy of them (same offsets). Cheap to copy; the arena must outlive it.
class ParameterView {
 public:
  ParameterView(const ParameterArena& arena, const float* base) : arena_(&arena), base_(base) {}
  // The parameter's first float in this copy; the name must be declared.
  const float* at(absl::string_view name) const {
    return base_ + (arena_->at(name) - arena_->data());
  }

 private:
  const ParameterArena* arena_;
  const float* base_;
};

// Where one Forward call finds its weights and how it moves data; the defaults are the
// model's own (host) arena and HostDataOps().
struct ForwardPlacement {
  // A copy of parameters().data() (parameters().size() floats, same layout), e.g. uploaded to
  // the backend's device; nullptr: the arena itself.
  const float* weights = nullptr;
  // nullptr: HostDataOps().
  DataOps* data_ops = nullptr;
};

// Memory for a TrainingTape whose buffers live on a device (for host memory the tape needs
// none). Used by one tape at a time.
class TapeMemory {
 public:
  virtual ~TapeMemory() = default;
  // `n` floats, 64-byte aligned; RESOURCE_EXHAUSTED when the device has no room.
  virtual absl::StatusOr<float*> Allocate(int64_t n) = 0;
  // Gives back a buffer from Allocate; nothing queued may still use it.
  virtual void Free(float* buffer) = 0;
};

// Where a training step finds its weights, keeps its activations and moves data: by default
// (all nullptr) the model's own arena, host memory and HostDataOps(); a GPU training engine
// gives the device copy of the arena, device memory and its DataOps. All or none are set.
struct TrainingPlacement {
  const float* weights = nullptr;  // as ForwardPlacement::weights
  DataOps* data_ops = nullptr;
  TapeMemory* memory = nullptr;  // not owned; must outlive the tape
};

// The activations one training step keeps from its forward pass to its backward pass, plus the
// backward pass's scratch and dropout masks, in host memory or, with a TrainingPlacement, in
// device memory. Buffers are kept and reused by later steps of the same or smaller shapes.
// Owned by one training thread.
class TrainingTape {
 public:
  TrainingTape() = default;
  explicit TrainingTape(const TrainingPlacement& placement) : placement_(placement) {}
  ~TrainingTape();
  TrainingTape(const TrainingTape&) = delete;
  TrainingTape& operator=(const TrainingTape&) = delete;

  // Starts a new step; earlier buffers are handed out again. Keeps dropout_seed.
  void Reset() {
    next_ = 0;
    saved.clear();
  }
  // `n` floats, valid until the next Reset() (contents unspecified). RESOURCE_EXHAUSTED when
  // device memory runs out.
  absl::StatusOr<float*> Alloc(int64_t n);

  // Inverted-dropout multipliers (nn.Dropout in training) for `n` units of dropout site `site`:
  // each 0 with probability p, else 1/(1-p), drawn in order from a stream that depends on
  // dropout_seed and `site` alone (DataOps::DropoutMask), so one seed gives one mask per site
  // whatever the parameters or the device. nullptr, meaning no dropout, when dropout_seed is
  // unset or p is 0 (nothing is drawn then). Valid until the next Reset(). p in [0, 1).
  absl::StatusOr<float*> DropoutMask(int64_t n, float p, uint64_t site);

  // The weights a step reads: the placement's copy of `arena`, or the arena itself.
  ParameterView weights(const ParameterArena& arena) const {
    return ParameterView(arena, placement_.weights != nullptr ? placement_.weights : arena.data());
  }
  DataOps& data() const {
    return placement_.data_ops != nullptr ? *placement_.data_ops : HostDataOps();
  }

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
  struct Buffer {
    float* data = nullptr;
    int64_t floats = 0;
  };

  const TrainingPlacement placement_{};
  // Host buffers (no placement.memory); each slot is its own vector, so growing one never
  // moves another.
  std::vector<std::vector<float>> host_buffers_;
  std::vector<Buffer> device_buffers_;  // from placement.memory
  size_t next_ = 0;
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
  int num_features() const { return num_features_; }   // F
  int num_targets() const { return num_targets_; }
  int num_quantiles() const { return num_quantiles_; }  // Q; 1 for point forecasts
  // Values per window: P * targets * Q.
  int64_t num_outputs() const { return int64_t{horizon()} * num_targets_ * num_quantiles_; }
  // For each target, its column in the input features.
  const std::vector<int>& target_features() const { return target_features_; }

  ParameterArena& parameters() { return parameters_; }
  const ParameterArena& parameters() const { return parameters_; }

  // out (B, P, targets[, Q]) raw forecasts from inp (B, T, F) raw windows, all host memory.
  absl::Status Forward(Backend& backend, float* out, const float* inp, int64_t B,
                       Workspace& workspace) const {
    return Forward(backend, out, inp, B, workspace, ForwardPlacement{});
  }
  // The same on other memory: out, inp, the workspace's memory and placement.weights are
  // memory of the backend's device, and placement.data_ops works on it. Asynchronous when the
  // backend's ops are: out is complete once the backend's work is.
  absl::Status Forward(Backend& backend, float* out, const float* inp, int64_t B,
                       Workspace& workspace, const ForwardPlacement& placement) const;

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
  // xn, out, dout and dparams are memory of the tape's placement (host memory by default)
  // and the weights are the placement's; asynchronous when the backend's ops are.
  absl::Status ForwardTrain(Backend& backend, float* out, const float* xn, int64_t B,
                            TrainingTape& tape) const;
  absl::Status Backward(Backend& backend, float* dparams, const float* dout,
                        TrainingTape& tape) const;
  // False for the normaliser's statistics, which training fits from data, not by gradient.
  static bool IsTrainable(const ParameterSpec& spec);

  // Floats of scratch one Forward with batch B needs.
  int64_t WorkspaceFloats(int64_t B) const;
  // B raw windows (B, T, F) at the normaliser's mean (zeros for a model without one): they
  // standardise to zeros, so a forecast from them is finite whenever the weights are. For
  // warm-up and padding.
  std::vector<float> NeutralWindows(int64_t B) const;

 protected:
  explicit Forecaster(const ModelConfig& config);

  // Declares the architecture's parameters, in state_dict order.
  virtual void DeclareParameters(ParameterArena& arena) const = 0;
  // out (B, P*targets) standardised forecasts from xn (B, T, F) standardised windows, with
  // the weights of `p` and the data movement of `data`.
  virtual absl::Status ForwardStandardized(Backend& backend, const ParameterView& p, DataOps& data,
                                           float* out, const float* xn, int64_t B,
                                           Workspace& workspace) const = 0;
  virtual int64_t BodyWorkspaceFloats(int64_t B) const = 0;
  // The training pair of ForwardStandardized; see ForwardTrain / Backward.
  virtual absl::Status ForwardTrainBody(Backend& backend, float* out, const float* xn, int64_t B,
                                        TrainingTape& tape) const = 0;
  virtual absl::Status BackwardBody(Backend& backend, float* dparams, const float* dout,
                                    TrainingTape& tape) const = 0;
  // x (n) *= mask (n), in place; nothing when mask is nullptr (no dropout).
  static absl::Status ApplyDropout(DataOps& data, float* x, const float* mask, int64_t n) {
    if (mask == nullptr) return absl::OkStatus();
    return data.Multiply(x, x, mask, n);
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
