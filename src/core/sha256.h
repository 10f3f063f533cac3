// SHA-256 (FIPS 180-4), incremental: what `hylo data prepare` records for every input file so a
// manifest names its corpus exactly. OpenSSL's libcrypto computes it: its SHA-NI/AVX2 code hashes
// ~1.4 GB/s on one core against ~230 MB/s for a portable C++ loop, and the hash runs on the
// corpus reader's thread, which feeds every tokenizing worker (data/prepare_pipeline.h).
#pragma once
#include <memory>
#include <string>
#include <string_view>

struct evp_md_ctx_st;  // OpenSSL's EVP_MD_CTX

namespace hylo {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(Sha256&&) noexcept;
  Sha256& operator=(Sha256&&) noexcept;
  void update(const void* data, size_t size);
  void update(std::string_view text) { update(text.data(), text.size()); }
  // The digest as 64 lowercase hex digits; the object must not be updated afterwards.
  std::string hex();

 private:
  struct FreeContext {
    void operator()(evp_md_ctx_st* context) const;
  };
  std::unique_ptr<evp_md_ctx_st, FreeContext> context_;
};

// Digest of a whole file, read in pieces; throws naming the file when it cannot be read.
std::string sha256_file(const std::string& path);

}  // namespace hylo
