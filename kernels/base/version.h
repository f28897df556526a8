// The build's version, filled in at configure time from the project version and
// `git describe`. Constant; thread-safe.
#ifndef FORECASTD_KERNELS_BASE_VERSION_H_
#define FORECASTD_KERNELS_BASE_VERSION_H_

namespace forecastd {

extern const char kForecastdVersion[];

}  // namespace forecastd

#endif  // FORECASTD_KERNELS_BASE_VERSION_H_
