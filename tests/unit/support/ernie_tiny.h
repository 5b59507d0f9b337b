// The HF-made tiny ERNIE 4.5 of tests/data/ernie-tiny, loaded once per test
// binary by whoever holds one: its model (2 threads) and tokenizer.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "model/ernie4_5/ernie4_5_model.h"
#include "tokenizer/tokenizer.h"

namespace tern::testing {

inline const std::string kErnieTinyDir = std::string(TERN_TEST_DATA_DIR) + "/ernie-tiny";

struct ErnieTiny {
  std::unique_ptr<Ernie45Model> model;
  std::unique_ptr<Tokenizer> tokenizer;

  ErnieTiny() {
    auto m = Ernie45Model::load(kErnieTinyDir, 2);
    EXPECT_TRUE(m.is_ok()) << m.status().to_string();
    model = std::move(m).value();
    auto t = Tokenizer::load(kErnieTinyDir);
    EXPECT_TRUE(t.is_ok()) << t.status().to_string();
    tokenizer = std::make_unique<Tokenizer>(std::move(t).value());
  }
};

}  // namespace tern::testing
