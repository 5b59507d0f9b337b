// PagedKvPool: sizing, the mapping from (layer, block table, position) to
// storage (every slot distinct, row tables agreeing with key_row), block
// table checks, and copy_block copying exactly one block of every layer.
#include "model/paged_kv_pool.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>
#include <vector>

#include "base/bf16.h"
#include "base/fp8_e4m3.h"

namespace tern {
namespace {

TEST(PagedKvPool, BytesPerBlock) {
  // ERNIE-4.5-0.3B in fp32: 18 layers x K,V x 256 floats x 16 positions.
  EXPECT_EQ(PagedKvPool::bytes_per_block(18, 256, 16), 18 * 2 * 256 * 16 * 4);
  EXPECT_EQ(PagedKvPool::bytes_per_block(0, 256, 16), 0);
  EXPECT_EQ(PagedKvPool::bytes_per_block(18, -1, 16), 0);
  const int64_t huge = int64_t{1} << 40;
  EXPECT_EQ(PagedKvPool::bytes_per_block(huge, huge, 16), std::numeric_limits<int64_t>::max());
  PagedKvPool pool(3, 8, 5, 4);
  EXPECT_EQ(static_cast<int64_t>(pool.storage().size() * sizeof(float)),
            5 * PagedKvPool::bytes_per_block(3, 8, 4));
}

TEST(PagedKvPool, EverySlotHasItsOwnRowAndRowTablesAgree) {
  const int64_t layers = 3, kv_dim = 6, blocks = 5, block_size = 4;
  PagedKvPool pool(layers, kv_dim, blocks, block_size);
  const std::vector<int32_t> table = {3, 0, 4, 1, 2};  // every block, out of order
  std::set<const float*> rows;
  float tag = 1.0f;
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t pos = 0; pos < blocks * block_size; ++pos) {
      float* k = pool.key_row(l, table, pos);
      float* v = pool.value_row(l, table, pos);
      ASSERT_TRUE(rows.insert(k).second) << "layer " << l << " pos " << pos;
      ASSERT_TRUE(rows.insert(v).second) << "layer " << l << " pos " << pos;
      std::fill_n(k, kv_dim, tag++);
      std::fill_n(v, kv_dim, tag++);
    }
  }
  // K and V rows of all layers tile the storage exactly, without overlap.
  EXPECT_EQ(static_cast<int64_t>(rows.size()) * kv_dim, static_cast<int64_t>(pool.storage().size()));
  std::set<float> tags(pool.storage().begin(), pool.storage().end());
  EXPECT_EQ(static_cast<int64_t>(tags.size()), layers * 2 * blocks * block_size);

  std::vector<const float*> kptrs(table.size()), vptrs(table.size());
  for (int64_t l = 0; l < layers; ++l) {
    cpu::KvRowTable kt = pool.key_rows(l, table, kptrs);
    cpu::KvRowTable vt = pool.value_rows(l, table, vptrs);
    EXPECT_EQ(kt.block_size, block_size);
    EXPECT_EQ(kt.row_stride, kv_dim);
    for (int64_t pos = 0; pos < blocks * block_size; ++pos) {
      EXPECT_EQ(kt.row(pos), pool.key_row(l, table, pos));
      EXPECT_EQ(vt.row(pos), pool.value_row(l, table, pos));
    }
  }
  // Position p of a table lives in block table[p / block_size], slot p % block_size.
  const std::vector<int32_t> other = {2, 3};
  EXPECT_EQ(pool.key_row(1, other, 5), pool.key_row(1, table, 1));  // block 3 is table[0]
}

TEST(PagedKvPool, CheckBlockTable) {
  PagedKvPool pool(2, 4, 6, 4);
  const std::vector<int32_t> table = {5, 0, 3};
  EXPECT_TRUE(pool.check_block_table(table, 12).is_ok());
  EXPECT_TRUE(pool.check_block_table(table, 9).is_ok());
  EXPECT_TRUE(pool.check_block_table({}, 0).is_ok());
  Status st = pool.check_block_table(table, 13);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("13 positions need 4"), std::string::npos) << st.to_string();
  const std::vector<int32_t> past = {5, 6}, negative = {-1};
  st = pool.check_block_table(past, 5);
  EXPECT_EQ(st.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(st.message().find("entry 1 is block 6"), std::string::npos) << st.to_string();
  EXPECT_EQ(pool.check_block_table(negative, 1).code(), ErrorCode::kInvalidArgument);
  // Entries past the positions asked about are not read.
  EXPECT_TRUE(pool.check_block_table(past, 4).is_ok());
  EXPECT_EQ(pool.check_block_table(table, -1).code(), ErrorCode::kInvalidArgument);
  // A default pool has no blocks at all.
  EXPECT_EQ(PagedKvPool().check_block_table(table, 1).code(), ErrorCode::kInvalidArgument);
}

TEST(PagedKvPool, CopyBlockCopiesEveryLayerOfOneBlockOnly) {
  const int64_t layers = 3, kv_dim = 5, blocks = 4, block_size = 3;
  PagedKvPool pool(layers, kv_dim, blocks, block_size);
  std::vector<int32_t> all(blocks);
  std::iota(all.begin(), all.end(), 0);
  float value = 1.0f;
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t pos = 0; pos < blocks * block_size; ++pos) {
      for (int64_t j = 0; j < kv_dim; ++j) {
        pool.key_row(l, all, pos)[j] = value++;
        pool.value_row(l, all, pos)[j] = -(value++);
      }
    }
  }
  const std::vector<float> before(pool.storage().begin(), pool.storage().end());
  pool.copy_block(2, 0);
  const std::vector<int32_t> src = {2}, dst = {0};
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t pos = 0; pos < block_size; ++pos) {
      for (int64_t j = 0; j < kv_dim; ++j) {
        EXPECT_EQ(pool.key_row(l, dst, pos)[j], pool.key_row(l, src, pos)[j]);
        EXPECT_EQ(pool.value_row(l, dst, pos)[j], pool.value_row(l, src, pos)[j]);
      }
    }
  }
  // Everything but block 0 is as before; block 0 changed.
  size_t changed = 0;
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t pos = 0; pos < blocks * block_size; ++pos) {
      for (bool key : {true, false}) {
        const float* row = key ? pool.key_row(l, all, pos) : pool.value_row(l, all, pos);
        const size_t offset = static_cast<size_t>(row - pool.storage().data());
        for (int64_t j = 0; j < kv_dim; ++j) {
          const bool same = row[j] == before[offset + size_t(j)];
          EXPECT_EQ(same, pos >= block_size) << "layer " << l << " pos " << pos;
          changed += same ? 0 : 1;
        }
      }
    }
  }
  EXPECT_EQ(changed, size_t(layers * 2 * block_size * kv_dim));
  pool.copy_block(1, 1);  // a no-op
  EXPECT_EQ(pool.key_row(0, all, block_size)[0], before[static_cast<size_t>(block_size * kv_dim)]);
}

// --kv-cache-dtype fp8: a quarter of fp32's bytes per block, so the same
// budget holds four times the blocks (twice bf16's on CUDA).
TEST(PagedKvPool, Fp8BlocksTakeOneByteAnElement) {
  EXPECT_EQ(PagedKvPool::bytes_per_block(18, 256, 16, KvCacheDType::kFp8E4m3), 18 * 2 * 256 * 16);
  EXPECT_EQ(4 * PagedKvPool::bytes_per_block(18, 256, 16, KvCacheDType::kFp8E4m3),
            PagedKvPool::bytes_per_block(18, 256, 16, KvCacheDType::kAuto));
  PagedKvPool pool(3, 8, 5, 4, KvCacheDType::kFp8E4m3);
  EXPECT_TRUE(pool.is_fp8());
  EXPECT_TRUE(pool.storage().empty());
  EXPECT_EQ(static_cast<int64_t>(pool.storage_bytes().size()),
            5 * PagedKvPool::bytes_per_block(3, 8, 4, KvCacheDType::kFp8E4m3));
  const int64_t budget = 7 * PagedKvPool::bytes_per_block(3, 8, 4);
  EXPECT_EQ(budget / PagedKvPool::bytes_per_block(3, 8, 4, KvCacheDType::kFp8E4m3), 28);
}

// A bf16 pool: two bytes an element; rows read back through the row tables
// as the nearest-even bf16 of what was stored; copy_block copies them.
TEST(PagedKvPool, Bf16StoresRowsRoundedToNearestEven) {
  EXPECT_EQ(2 * PagedKvPool::bytes_per_block(18, 256, 16, KvCacheDType::kBf16),
            PagedKvPool::bytes_per_block(18, 256, 16, KvCacheDType::kAuto));
  const int64_t layers = 2, kv_dim = 12, blocks = 4, block_size = 3;
  PagedKvPool pool(layers, kv_dim, blocks, block_size, KvCacheDType::kBf16);
  EXPECT_TRUE(pool.is_bf16());
  EXPECT_FALSE(pool.is_fp8());
  EXPECT_TRUE(pool.storage().empty());
  EXPECT_EQ(static_cast<int64_t>(pool.storage_bytes().size()),
            blocks * PagedKvPool::bytes_per_block(layers, kv_dim, block_size, KvCacheDType::kBf16));
  const std::vector<int32_t> table = {2, 0, 3};
  std::vector<std::vector<float>> k(8), v(8);
  for (int64_t pos = 0; pos < 8; ++pos) {
    for (int64_t i = 0; i < kv_dim; ++i) {
      k[pos].push_back(0.3701f * static_cast<float>(pos * kv_dim + i) - 5.0f);
      v[pos].push_back(1.0f + 0x1.8p-8f * static_cast<float>(i % 3));  // ties: 1 + 2^-8 rounds to 1, 1 + 3 * 2^-9 up
    }
    for (int64_t l = 0; l < layers; ++l) pool.store(l, table, pos, k[pos].data(), v[pos].data());
  }
  std::vector<const uint16_t*> kptrs(table.size()), vptrs(table.size());
  for (int64_t l = 0; l < layers; ++l) {
    const cpu::KvRowTable kt = pool.key_rows(l, table, kptrs);
    const cpu::KvRowTable vt = pool.value_rows(l, table, vptrs);
    ASSERT_TRUE(kt.is_bf16() && vt.is_bf16());
    EXPECT_TRUE(kt.is_coded());
    for (int64_t pos = 0; pos < 8; ++pos) {
      for (int64_t i = 0; i < kv_dim; ++i) {
        EXPECT_EQ(kt.row_bf16(pos)[i], f32_to_bf16(k[pos][i])) << l << " " << pos << " " << i;
        EXPECT_EQ(vt.row_bf16(pos)[i], f32_to_bf16(v[pos][i])) << l << " " << pos << " " << i;
      }
    }
  }
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.0f + 0x1p-8f)), 1.0f);  // a tie goes to the even code
  pool.copy_block(0, 1);
  const std::vector<int32_t> moved = {1};
  std::vector<const uint16_t*> one(1);
  const cpu::KvRowTable from = pool.value_rows(1, table, vptrs);
  const cpu::KvRowTable to = pool.value_rows(1, moved, one);
  for (int64_t pos = 0; pos < block_size; ++pos) {
    EXPECT_EQ(0, std::memcmp(from.row_bf16(3 + pos), to.row_bf16(pos), kv_dim * 2));  // table[1] is block 0
  }
}

// Rows stored in an fp8 pool read back through the row tables as
// e4m3(x / scale), each layer and kind with its own scale; copy_block copies
// the bytes; out-of-range values saturate instead of becoming NaN.
TEST(PagedKvPool, Fp8StoresRoundedRowsUnderPerLayerScales) {
  const int64_t layers = 2, kv_dim = 6, blocks = 4, block_size = 3;
  PagedKvPool pool(layers, kv_dim, blocks, block_size, KvCacheDType::kFp8E4m3);
  EXPECT_EQ(pool.k_scale(1), 1.0f);
  const std::vector<float> ks = {0.5f, 2.0f}, vs = {1.0f, 0.25f};
  ASSERT_TRUE(pool.set_scales(ks, vs).is_ok());
  const std::vector<float> bad = {1.0f, 0.0f}, nan = {NAN, 1.0f}, short_list = {1.0f};
  EXPECT_FALSE(pool.set_scales(bad, vs).is_ok());
  EXPECT_FALSE(pool.set_scales(ks, nan).is_ok());
  EXPECT_FALSE(pool.set_scales(short_list, vs).is_ok());
  PagedKvPool fp32(layers, kv_dim, blocks, block_size);
  EXPECT_FALSE(fp32.set_scales(ks, vs).is_ok());

  const std::vector<int32_t> table = {2, 0, 3};
  std::vector<std::vector<float>> k(9), v(9);
  for (int64_t pos = 0; pos < 9; ++pos) {
    for (int64_t i = 0; i < kv_dim; ++i) {
      k[pos].push_back(0.37f * static_cast<float>(pos * kv_dim + i) - 5.0f);
      v[pos].push_back(static_cast<float>(pos % 2 == 0 ? 1000 : -3) + 0.1f * static_cast<float>(i));
    }
    for (int64_t l = 0; l < layers; ++l) pool.store(l, table, pos, k[pos].data(), v[pos].data());
  }
  std::vector<const uint8_t*> kptrs(table.size()), vptrs(table.size());
  for (int64_t l = 0; l < layers; ++l) {
    cpu::KvRowTable kt = pool.key_rows(l, table, kptrs);
    cpu::KvRowTable vt = pool.value_rows(l, table, vptrs);
    ASSERT_TRUE(kt.is_fp8());
    EXPECT_EQ(kt.scale, ks[l]);
    EXPECT_EQ(vt.scale, vs[l]);
    for (int64_t pos = 0; pos < 9; ++pos) {
      for (int64_t i = 0; i < kv_dim; ++i) {
        EXPECT_EQ(kt.row_fp8(pos)[i], f32_to_fp8_e4m3(k[pos][i] / ks[l])) << l << " " << pos << " " << i;
        const float back = fp8_e4m3_to_f32(vt.row_fp8(pos)[i]) * vt.scale;
        EXPECT_FALSE(std::isnan(back));
        if (pos % 2 == 0) {
          EXPECT_EQ(back, 448.0f * vs[l]);  // 1000 / scale saturates
        }
      }
    }
  }
  pool.copy_block(0, 1);
  std::vector<int32_t> moved = {1};
  for (int64_t pos = 0; pos < block_size; ++pos) {
    cpu::KvRowTable from = pool.key_rows(1, table, kptrs);
    std::vector<const uint8_t*> one(1);
    cpu::KvRowTable to = pool.key_rows(1, moved, one);
    EXPECT_EQ(0, std::memcmp(from.row_fp8(3 + pos), to.row_fp8(pos), kv_dim));  // table[1] is block 0
  }
}

}  // namespace
}  // namespace tern
