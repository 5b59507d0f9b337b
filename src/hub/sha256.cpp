// SHA-256 over OpenSSL's EVP interface.
#include "hub/sha256.h"

#include <openssl/evp.h>

#include <cstdio>
#include <memory>
#include <vector>

namespace tern::hub {
namespace {

struct DigestContextDeleter {
  void operator()(EVP_MD_CTX* ctx) const { EVP_MD_CTX_free(ctx); }
};
using DigestContext = std::unique_ptr<EVP_MD_CTX, DigestContextDeleter>;

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};

std::string hex(const unsigned char* digest, unsigned int size) {
  static const char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(size * 2);
  for (unsigned int i = 0; i < size; ++i) {
    out += kDigits[digest[i] >> 4];
    out += kDigits[digest[i] & 15];
  }
  return out;
}

}  // namespace

Result<std::string> sha256_file(const std::string& path) {
  std::unique_ptr<std::FILE, FileCloser> file(std::fopen(path.c_str(), "rb"));
  if (!file) return io_error("cannot open " + path + " to check its sha256");
  DigestContext ctx(EVP_MD_CTX_new());
  if (!ctx || EVP_DigestInit_ex(ctx.get(), EVP_sha256(), nullptr) != 1) {
    return internal_error("OpenSSL could not start a sha256 digest");
  }
  std::vector<unsigned char> buffer(1 << 20);
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), file.get())) > 0) {
    if (EVP_DigestUpdate(ctx.get(), buffer.data(), n) != 1) return internal_error("OpenSSL sha256 update failed");
  }
  if (std::ferror(file.get())) return io_error("cannot read " + path + " to check its sha256");
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  if (EVP_DigestFinal_ex(ctx.get(), digest, &size) != 1) return internal_error("OpenSSL sha256 final failed");
  return hex(digest, size);
}

std::string sha256_hex(std::string_view bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  EVP_Digest(bytes.data(), bytes.size(), digest, &size, EVP_sha256(), nullptr);
  return hex(digest, size);
}

}  // namespace tern::hub
