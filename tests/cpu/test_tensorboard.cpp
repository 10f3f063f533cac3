// TensorBoard event files (train/tensorboard.h): CRC32C against published check values, and an
// EventFile read back by a decoder of this test's own (bitwise CRC32C, protobuf fields by wire
// type): the framing and both CRCs of every record, the version and START records, the scalars.
// (scripts/check_tensorboard.py reads a run's files with TensorBoard itself, on the GPU host.)
#include <doctest/doctest.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>

#include "core/file.h"
#include "error_of.h"
#include "train/tensorboard.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

uint32_t crc32c_bitwise(std::string_view bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
  }
  return ~c;
}
uint32_t masked(uint32_t c) { return ((c >> 15) | (c << 17)) + 0xa282ead8u; }

template <typename T>
T load(std::string_view bytes, size_t at) {
  REQUIRE(at + sizeof(T) <= bytes.size());
  T v;
  std::memcpy(&v, bytes.data() + at, sizeof(T));
  return v;
}

// The data of each record, after checking its length and both masked CRCs.
std::vector<std::string> read_records(const std::string& file) {
  std::vector<std::string> records;
  for (size_t at = 0; at < file.size();) {
    const auto length = load<uint64_t>(file, at);
    CHECK(load<uint32_t>(file, at + 8) == masked(crc32c_bitwise(std::string_view(file).substr(at, 8))));
    REQUIRE(at + 12 + length + 4 <= file.size());
    const std::string data = file.substr(at + 12, length);
    CHECK(load<uint32_t>(file, at + 12 + length) == masked(crc32c_bitwise(data)));
    records.push_back(data);
    at += 12 + length + 4;
  }
  return records;
}

struct Field {
  int wire = 0;
  uint64_t varint = 0;  // wire type 0
  std::string bytes;    // wire types 1, 2, 5 (fixed-width values as their bytes)
};

uint64_t read_varint(std::string_view m, size_t& at) {
  uint64_t v = 0;
  for (int shift = 0;; shift += 7) {
    REQUIRE(at < m.size());
    REQUIRE(shift < 64);
    const auto b = uint8_t(m[at++]);
    v |= uint64_t(b & 0x7F) << shift;
    if (!(b & 0x80)) return v;
  }
}

// Field number -> its occurrences, in order.
std::multimap<int, Field> parse_message(std::string_view m) {
  std::multimap<int, Field> fields;
  for (size_t at = 0; at < m.size();) {
    const uint64_t key = read_varint(m, at);
    Field f;
    f.wire = int(key & 7);
    size_t n = 0;
    if (f.wire == 0) f.varint = read_varint(m, at);
    else if (f.wire == 1) n = 8;
    else if (f.wire == 5) n = 4;
    else if (f.wire == 2) n = read_varint(m, at);
    else FAIL("unexpected wire type " << f.wire);
    REQUIRE(at + n <= m.size());
    f.bytes = std::string(m.substr(at, n));
    at += n;
    fields.emplace(int(key >> 3), f);
  }
  return fields;
}

const Field& only(const std::multimap<int, Field>& fields, int number, int wire) {
  REQUIRE(fields.count(number) == 1);
  const Field& f = fields.find(number)->second;
  REQUIRE(f.wire == wire);
  return f;
}

// The (wall_time, step) of an Event and its other fields.
struct Event {
  double wall_time;
  int64_t step;
  std::multimap<int, Field> fields;
};
Event parse_event(const std::string& data) {
  Event e{0, 0, parse_message(data)};
  e.wall_time = load<double>(only(e.fields, 1, 1).bytes, 0);
  e.step = int64_t(only(e.fields, 2, 0).varint);
  return e;
}

// Summary.value as (tag, simple_value) pairs.
std::vector<std::pair<std::string, float>> summary_values(const Event& e) {
  std::vector<std::pair<std::string, float>> values;
  for (const auto& [number, value] : parse_message(only(e.fields, 5, 2).bytes)) {
    REQUIRE(number == 1);
    REQUIRE(value.wire == 2);
    const auto v = parse_message(value.bytes);
    values.emplace_back(only(v, 1, 2).bytes, load<float>(only(v, 2, 5).bytes, 0));
  }
  return values;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / ("hylo_tensorboard_" + std::to_string(::getpid()));
  TempDir() { fs::create_directories(path); }
  ~TempDir() { fs::remove_all(path); }
};

}  // namespace

TEST_CASE("tensorboard: crc32c matches the published check values and chains") {
  CHECK(crc32c("123456789", 9) == 0xE3069283u);
  CHECK(crc32c("", 0) == 0u);
  const std::string zeros(32, '\0'), ones(32, '\xff');  // RFC 3720 B.4
  CHECK(crc32c(zeros.data(), zeros.size()) == 0x8A9136AAu);
  CHECK(crc32c(ones.data(), ones.size()) == 0x62A8AB43u);
  std::string text;
  for (int i = 0; i < 1000; ++i) text += char(i * 7 + 3);
  CHECK(crc32c(text.data(), text.size()) == crc32c_bitwise(text));
  CHECK(crc32c(text.data() + 5, 995, crc32c(text.data(), 5)) == crc32c(text.data(), text.size()));
}

TEST_CASE("tensorboard: an EventFile reads back record by record: version, START, scalars as floats") {
  TempDir dir;
  const double before = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string path;
  {
    EventFile events(dir.path.string(), 11);
    path = events.path();
    events.scalars(11, {{"train/loss", 2.5}, {"train/lr", 3e-4}});
    events.scalars(12, {{"val/loss", std::nan("")}, {"train/tokens_per_s", 1e300}});
    events.flush();
    CHECK(read_records(read_file(path).value()).size() == 4);  // flushed: all there while still open
  }
  const std::string name = fs::path(path).filename().string();
  const std::string prefix = "events.out.tfevents.";
  REQUIRE(name.starts_with(prefix));
  const size_t dot = name.find('.', prefix.size());
  REQUIRE(dot != std::string::npos);
  const int64_t stamp = std::stoll(name.substr(prefix.size(), dot - prefix.size()));
  CHECK(std::abs(double(stamp) - before) < 60);
  char host[256] = {};
  REQUIRE(gethostname(host, sizeof host - 1) == 0);
  CHECK(name.substr(dot + 1) == std::string(host));
  CHECK(fs::path(path).parent_path() == dir.path);

  const std::vector<std::string> records = read_records(read_file(path).value());
  REQUIRE(records.size() == 4);
  const Event version = parse_event(records[0]);
  CHECK(std::abs(version.wall_time - before) < 60);
  CHECK(version.step == 11);
  CHECK(only(version.fields, 3, 2).bytes == "brain.Event:2");
  const Event start = parse_event(records[1]);
  CHECK(start.step == 11);
  CHECK(only(parse_message(only(start.fields, 7, 2).bytes), 1, 0).varint == 1);  // SessionLog.START

  const Event first = parse_event(records[2]), second = parse_event(records[3]);
  CHECK(first.step == 11);
  CHECK(second.step == 12);
  CHECK(second.wall_time >= first.wall_time);
  const auto a = summary_values(first), b = summary_values(second);
  REQUIRE(a.size() == 2);
  CHECK(a[0] == std::pair<std::string, float>("train/loss", 2.5f));
  CHECK(a[1] == std::pair<std::string, float>("train/lr", float(3e-4)));
  REQUIRE(b.size() == 2);
  CHECK(b[0].first == "val/loss");
  CHECK(std::isnan(b[0].second));
  CHECK(b[1].second == std::numeric_limits<float>::infinity());  // beyond float: TensorBoard shows inf

  // A second file in the same second gets a name of its own; the first is left as it was.
  const std::string first_file = read_file(path).value();
  {
    EventFile again(dir.path.string(), 13);
    CHECK(again.path() != path);
    again.scalars(13, {{"train/loss", 1.0}});
  }
  CHECK(read_file(path).value() == first_file);
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir.path)) files += entry.path().filename().string().starts_with(prefix);
  CHECK(files == 2);
}

TEST_CASE("tensorboard: an EventFile that cannot be created names its path") {
  const std::string missing = (fs::temp_directory_path() / "hylo_no_such_dir" / "run").string();
  const std::string message = test::error_of([&] { EventFile events(missing, 1); });
  CHECK(message.starts_with(missing + "/events.out.tfevents."));
  CHECK(message.find(": cannot create: No such file or directory") != std::string::npos);
}
