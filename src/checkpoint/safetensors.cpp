#include "checkpoint/safetensors.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/file.h"

namespace hylo {

namespace {

// IEEE half -> float, exact (every half is a float).
float half_to_float(uint16_t h) {
  const int sign = h >> 15, exponent = (h >> 10) & 0x1f, mantissa = h & 0x3ff;
  float magnitude;
  if (exponent == 0) magnitude = std::ldexp(float(mantissa), -24);  // zero and subnormals
  else if (exponent == 31) magnitude = mantissa ? NAN : INFINITY;
  else magnitude = std::ldexp(float(mantissa | 0x400), exponent - 25);
  return sign ? -magnitude : magnitude;
}

Tensor decode_tensor(const std::string& path, const std::string& name, const nlohmann::json& entry,
                     const char* data, size_t data_size) {
  HYLO_CHECK(entry.is_object() && entry.contains("dtype") && entry.contains("shape") && entry.contains("data_offsets"),
             "{}: tensor {} lacks dtype, shape or data_offsets", path, name);
  const std::string dtype = entry["dtype"].is_string() ? entry["dtype"].get<std::string>() : "";
  const size_t element = dtype == "F32" ? 4 : dtype == "BF16" || dtype == "F16" ? 2 : 0;
  HYLO_CHECK(element > 0, "{}: tensor {} is {}; hylo reads F32, BF16 and F16", path, name, entry["dtype"].dump());
  Shape shape;
  for (const nlohmann::json& d : entry["shape"]) {
    HYLO_CHECK(d.is_number_integer() && d.get<int64_t>() >= 0, "{}: tensor {} has shape {}", path, name,
               entry["shape"].dump());
    shape.push_back(d.get<int64_t>());
  }
  const nlohmann::json& offsets = entry["data_offsets"];
  HYLO_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                 offsets[1].is_number_unsigned(),
             "{}: tensor {} has data_offsets {}", path, name, offsets.dump());
  const size_t begin = offsets[0].get<size_t>(), end = offsets[1].get<size_t>();
  const size_t count = size_t(shape_numel(shape));
  HYLO_CHECK(begin <= end && end <= data_size && end - begin == count * element,
             "{}: tensor {} ({} {}) has data_offsets [{}, {}] for {} data bytes", path, name, dtype, shape_str(shape),
             begin, end, data_size);
  Tensor t = Tensor::empty(shape, DType::f32, Device::cpu, "safetensors tensor");
  float* out = t.data<float>();
  const char* in = data + begin;
  for (size_t i = 0; i < count; ++i) {
    if (element == 4) {
      std::memcpy(&out[i], in + 4 * i, 4);
      continue;
    }
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    if (dtype == "BF16") {
      const uint32_t bits = uint32_t(h) << 16;
      std::memcpy(&out[i], &bits, 4);
    } else {
      out[i] = half_to_float(h);
    }
  }
  return t;
}

}  // namespace

SafetensorsContents read_safetensors(const std::string& path) {
  const std::optional<std::string> file = read_file(path);
  HYLO_CHECK(file.has_value(), "{}: cannot read the file", path);
  const std::string& bytes = *file;
  HYLO_CHECK(bytes.size() >= 8, "{}: {} bytes, too short for a safetensors file", path, bytes.size());
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes[size_t(i)]);
  HYLO_CHECK(n <= bytes.size() - 8, "{}: header of {} bytes in a file of {}", path, n, bytes.size());
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.substr(8, n));
  } catch (const nlohmann::json::exception& e) {
    HYLO_FAIL("{}: the safetensors header is not valid JSON: {}", path, e.what());
  }
  HYLO_CHECK(header.is_object(), "{}: the safetensors header is not a JSON object", path);
  SafetensorsContents contents;
  const char* data = bytes.data() + 8 + n;
  const size_t data_size = bytes.size() - 8 - n;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      HYLO_CHECK(entry.is_object(), "{}: __metadata__ is not an object", path);
      for (const auto& [k, v] : entry.items()) {
        HYLO_CHECK(v.is_string(), "{}: __metadata__ value of {} is not a string", path, k);
        contents.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    contents.tensors.emplace(name, decode_tensor(path, name, entry, data, data_size));
  }
  return contents;
}

std::map<std::string, Tensor> read_hf_weights(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path single = fs::path(dir) / "model.safetensors", index = fs::path(dir) / "model.safetensors.index.json";
  if (fs::exists(single)) return read_safetensors(single.string()).tensors;
  HYLO_CHECK(fs::exists(index), "{}: neither model.safetensors nor model.safetensors.index.json is there", dir);
  const std::optional<std::string> text = read_file(index.string());
  HYLO_CHECK(text.has_value(), "{}: cannot read the file", index.string());
  nlohmann::json map;
  try {
    map = nlohmann::json::parse(*text).at("weight_map");
  } catch (const nlohmann::json::exception& e) {
    HYLO_FAIL("{}: expected JSON with a weight_map object: {}", index.string(), e.what());
  }
  HYLO_CHECK(map.is_object(), "{}: weight_map is not an object", index.string());
  std::map<std::string, std::string> shard_of;
  for (const auto& [name, shard] : map.items()) {
    HYLO_CHECK(shard.is_string(), "{}: the shard of {} is not a file name", index.string(), name);
    shard_of[name] = shard.get<std::string>();
  }
  std::map<std::string, Tensor> tensors;
  std::map<std::string, bool> read;
  for (const auto& [name, shard] : shard_of) {
    if (read[shard]) continue;
    read[shard] = true;
    for (auto& [t, value] : read_safetensors((fs::path(dir) / shard).string()).tensors) {
      auto it = shard_of.find(t);
      HYLO_CHECK(it != shard_of.end() && it->second == shard, "{}: {} holds {}, which {} does not place there", dir,
                 shard, t, index.filename().string());
      tensors.emplace(t, std::move(value));
    }
  }
  for (const auto& [name, shard] : shard_of)
    HYLO_CHECK(tensors.count(name), "{}: {} places {} in {}, which does not hold it", dir, index.filename().string(),
               name, shard);
  return tensors;
}

}  // namespace hylo
