// TensorBoard's event files, written by hylo itself (no TensorFlow, no protobuf library).
//
// A file is a sequence of TFRecords: uint64 length (little-endian), masked CRC32C of those 8
// bytes, the data, masked CRC32C of the data; mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8.
// Each record's data is an `Event` protobuf, encoded here by hand:
//   Event      { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5;
//                SessionLog session_log = 7; }
//   Summary    { repeated Value value = 1; }   Value { string tag = 1; float simple_value = 2; }
//   SessionLog { enum status = 1 (START = 1); }
// The first record names the format ("brain.Event:2"); the second is a SessionLog START at the
// first step the file covers: TensorBoard drops the events of an earlier file at that step and
// later (a resumed run redoing steps), as metrics.jsonl's truncate_after does, so both keep one
// curve.
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hylo {

// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78), chainable like data::crc32; zlib has
// only the other polynomial.
uint32_t crc32c(const void* data, size_t size, uint32_t previous = 0);

// dir/events.out.tfevents.<unix time>.<hostname> (".1", ".2", ... appended if that name is
// taken: a file is never appended to), created at construction. Writes are buffered: flush()
// at every log step, and the destructor flushes.
class EventFile {
 public:
  EventFile(const std::string& dir, int64_t first_step);
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;

  // One Event at `step` holding every (tag, value) as a float scalar.
  void scalars(int64_t step, const std::vector<std::pair<std::string, double>>& values);
  void flush();
  const std::string& path() const { return path_; }

 private:
  void write_record(std::string_view data);
  std::FILE* file_ = nullptr;
  std::string path_;
};

}  // namespace hylo
