// The host optimiser's element loops on AVX2: Adam(W)'s update and the gradient's squared norm,
// four doubles at a time. The update does exactly kernels/ref/optimizer's arithmetic, operation
// for operation in double precision and without fused multiply-adds, so its results are the
// reference's bit for bit (and, with it, the CUDA kernels'); only the norm's sum runs in another
// order (four lanes, then their sum), which moves it by rounding. Used by Optimizer::Step when
// the CPU has AVX2; stateless and thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_OPTIMIZER_AVX2_H_
#define FORECASTD_ENGINE_TRAIN_OPTIMIZER_AVX2_H_

#include <cstdint>

#include "kernels/ref/optimizer.h"

namespace forecastd {

// True when this CPU runs the functions below.
bool HasAvx2();

// ref::AdamUpdate's result, bit for bit. Only where HasAvx2().
void AdamUpdateAvx2(float* param, float* m, float* v, const float* grad, int64_t n, int64_t t,
                    const ref::AdamHyper& hyper);

// sum of grad[i]^2 in double precision. Only where HasAvx2().
double GradSquaredSumAvx2(const float* grad, int64_t n);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_OPTIMIZER_AVX2_H_
