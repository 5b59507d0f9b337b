#pragma once
// Range checks for numeric options whose errors a person can read: CLI11's PositiveNumber and
// NonNegativeNumber print their upper bound as the largest double, 300-odd digits; these print
// "--max-num-seqs: must be at least 1, got 0" or "--block-size: must be from 1 to 1024, got 4096".

#include <CLI/CLI.hpp>

namespace tern::cli {

// The option's value is a number >= min.
CLI::Validator at_least(double min);
// The option's value is a number in [lo, hi].
CLI::Validator between(double lo, double hi);

}  // namespace tern::cli
