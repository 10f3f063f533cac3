#include "core/sha256.h"

#include <fmt/format.h>
#include <openssl/evp.h>

#include <fstream>
#include <vector>

#include "core/error.h"

namespace hylo {

void Sha256::FreeContext::operator()(evp_md_ctx_st* context) const { EVP_MD_CTX_free(context); }

Sha256::Sha256() : context_(EVP_MD_CTX_new()) {
  HYLO_CHECK(context_ && EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) == 1,
             "sha256: OpenSSL could not start a digest");
}

Sha256::~Sha256() = default;
Sha256::Sha256(Sha256&&) noexcept = default;
Sha256& Sha256::operator=(Sha256&&) noexcept = default;

void Sha256::update(const void* data, size_t size) {
  if (size == 0) return;  // an empty input hashes nothing (and may come with a null pointer)
  HYLO_CHECK(EVP_DigestUpdate(context_.get(), data, size) == 1, "sha256: OpenSSL digest update failed");
}

std::string Sha256::hex() {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  HYLO_CHECK(EVP_DigestFinal_ex(context_.get(), digest, &length) == 1 && length == 32,
             "sha256: OpenSSL digest final failed");
  std::string out;
  out.reserve(64);
  for (unsigned i = 0; i < length; ++i) out += fmt::format("{:02x}", digest[i]);
  return out;
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  HYLO_CHECK(in.good(), "{}: cannot open to hash", path);
  Sha256 sha;
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), std::streamsize(buffer.size()));
    sha.update(buffer.data(), size_t(in.gcount()));
  }
  HYLO_CHECK(!in.bad(), "{}: read error while hashing", path);
  return sha.hex();
}

}  // namespace hylo
