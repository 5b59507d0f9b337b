// The hub's HEAD headers: ETag, X-Linked-Etag, X-Linked-Size, X-Repo-Commit.
#include <gtest/gtest.h>

#include "hub/file_metadata.h"

namespace tern::hub {
namespace {

HeaderMap headers_of(std::initializer_list<const char*> lines) {
  HeaderMap h;
  for (const char* line : lines) add_header_line(line, h);
  return h;
}

TEST(HeaderLines, LowerCaseNamesAndStatusLinesReset) {
  HeaderMap h = headers_of({"HTTP/1.1 302 Found\r\n", "Location: /a\r\n", "HTTP/1.1 200 OK\r\n",
                            "X-Repo-Commit:  abc \r\n", "no colon here\r\n", "\r\n"});
  EXPECT_FALSE(find_header(h, "location").has_value());
  EXPECT_EQ(find_header(h, "x-repo-commit"), "abc");
  EXPECT_EQ(h.size(), 1u);
}

TEST(FileMetadata, LfsFileRedirectedToTheCdn) {
  const std::string sha = "b94d27b9934d3e08a52e52d7da7dabfac484efe37a5380ee9088f7ace2efcde9";
  HeaderMap h = headers_of({"HTTP/1.1 302 Found", "ETag: \"0123\"", ("X-Linked-Etag: \"" + sha + "\"").c_str(),
                            "X-Linked-Size: 721000000", "Content-Length: 1234",
                            "X-Repo-Commit: 0123456789abcdef0123456789abcdef01234567",
                            "Location: https://cdn-lfs.hf.co/x/y?sig=1"});
  auto m = file_metadata_from(h, "model.safetensors");
  ASSERT_TRUE(m.is_ok()) << m.status().to_string();
  EXPECT_EQ(m->etag, sha);
  EXPECT_TRUE(m->lfs);
  EXPECT_EQ(m->size, 721000000);
  EXPECT_EQ(m->commit, "0123456789abcdef0123456789abcdef01234567");
  EXPECT_EQ(m->location, "https://cdn-lfs.hf.co/x/y?sig=1");
}

TEST(FileMetadata, RegularFile) {
  HeaderMap h = headers_of({"HTTP/1.1 200 OK", "ETag: W/\"a9f3c1\"", "Content-Length: 712"});
  auto m = file_metadata_from(h, "config.json");
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->etag, "a9f3c1");
  EXPECT_FALSE(m->lfs);
  EXPECT_EQ(m->size, 712);
  EXPECT_EQ(m->commit, "");
}

TEST(FileMetadata, BadHeadersAreErrorsNamingTheFile) {
  auto no_etag = file_metadata_from(headers_of({"Content-Length: 3"}), "config.json");
  ASSERT_FALSE(no_etag.is_ok());
  EXPECT_NE(no_etag.status().message().find("config.json"), std::string::npos);
  EXPECT_NE(no_etag.status().message().find("ETag"), std::string::npos);
  EXPECT_FALSE(file_metadata_from(headers_of({"ETag: \"a\""}), "f").is_ok());
  EXPECT_FALSE(file_metadata_from(headers_of({"ETag: \"a\"", "Content-Length: -4"}), "f").is_ok());
  EXPECT_FALSE(file_metadata_from(headers_of({"ETag: \"a\"", "Content-Length: 99999999999999999999"}), "f").is_ok());
  EXPECT_FALSE(file_metadata_from(headers_of({"ETag: \"../../x\"", "Content-Length: 1"}), "f").is_ok());
  EXPECT_FALSE(file_metadata_from(headers_of({"ETag: \"a\"", "Content-Length: 1", "X-Repo-Commit: a/b"}), "f").is_ok());
}

TEST(FileMetadata, Sizes) {
  EXPECT_EQ(parse_size("0"), 0);
  EXPECT_EQ(parse_size("1125899906842624"), int64_t{1} << 50);
  EXPECT_FALSE(parse_size("1125899906842625").has_value());
  EXPECT_FALSE(parse_size("").has_value());
  EXPECT_FALSE(parse_size("12a").has_value());
}

}  // namespace
}  // namespace tern::hub
