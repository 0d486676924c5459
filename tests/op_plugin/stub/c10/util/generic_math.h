// Stand-in for c10/util/generic_math.h: c10::div_floor_integer as torch (2.6 and later) defines it, Python's
// floor division for operands of any sign (0 for a zero divisor, where the kernels check the divisor first).
#pragma once
#include <cstdint>
#include <limits>
#include <type_traits>

namespace c10 {
template <typename scalar_t>
inline scalar_t div_floor_integer(scalar_t a, scalar_t b) {
    if (b == 0) {
        return scalar_t(0);
    }
    if (std::is_signed<scalar_t>::value && a == std::numeric_limits<scalar_t>::min() && b == scalar_t(-1)) {
        return a;
    }
    if ((a < 0) != (b < 0)) {
        const auto quot = a / b;
        const auto rem = a % b;
        return rem ? quot - 1 : quot;
    }
    return a / b;
}
}  // namespace c10
