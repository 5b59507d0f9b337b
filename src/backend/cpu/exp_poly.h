// The constants of the vector e^x every ISA's kernels use (attention's
// softmax, SiLU): n = round(x log2 e), r = x - n ln 2 with ln 2 in two parts
// (the high one exact in n * hi for |n| < 2^9), e^r by Taylor to r^7 (error
// below 1e-8 relative for |r| <= ln 2 / 2) in Horner's order, times 2^n.
#pragma once

namespace tern::cpu::exp_poly {

inline constexpr float kLog2e = 1.44269504088896341f;
inline constexpr float kLn2Hi = 0.693359375f;
inline constexpr float kLn2Lo = -2.12194440e-4f;
// Coefficients of r^7 down to r^0.
inline constexpr float kTaylor[8] = {1.0f / 5040, 1.0f / 720, 1.0f / 120, 1.0f / 24, 1.0f / 6, 0.5f, 1.0f, 1.0f};

}  // namespace tern::cpu::exp_poly
