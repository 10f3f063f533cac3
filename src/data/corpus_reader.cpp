#include "data/corpus_reader.h"

#include <fcntl.h>
#include <glob.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <cstring>
#include <filesystem>

#include "core/error.h"
#include "core/parallel_for.h"
#include "core/sha256.h"

namespace hylo::data {
namespace {

namespace fs = std::filesystem;

constexpr size_t kReadBytes = size_t(1) << 20;

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The format a file's name implies (its compression suffix set aside).
CorpusFormat format_of_name(std::string name) {
  std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  for (std::string_view z : {".gz", ".zst", ".zstd"})
    if (ends_with(name, z)) name.resize(name.size() - z.size());
  for (std::string_view j : {".jsonl", ".json", ".ndjson"})
    if (ends_with(name, j)) return CorpusFormat::jsonl;
  return CorpusFormat::txt;
}

bool hidden(const fs::path& p) { return p.filename().string().starts_with("."); }

bool has_glob_characters(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

void add_folder(const fs::path& folder, std::vector<fs::path>& out) {
  std::vector<fs::path> found;
  std::error_code ec;
  auto it = fs::recursive_directory_iterator(folder, fs::directory_options::follow_directory_symlink, ec);
  HYLO_CHECK(!ec, "{}: cannot read folder: {}", folder.string(), ec.message());
  for (; it != fs::recursive_directory_iterator(); it.increment(ec)) {
    HYLO_CHECK(!ec, "{}: cannot read folder: {}", folder.string(), ec.message());
    if (hidden(it->path())) {
      if (it->is_directory()) it.disable_recursion_pending();
      continue;
    }
    if (it->is_regular_file()) found.push_back(it->path());
  }
  std::sort(found.begin(), found.end());
  out.insert(out.end(), found.begin(), found.end());
}

}  // namespace

CorpusFormat parse_corpus_format(std::string_view name) {
  if (name == "auto") return CorpusFormat::auto_detect;
  if (name == "txt") return CorpusFormat::txt;
  if (name == "jsonl") return CorpusFormat::jsonl;
  HYLO_FAIL("--format: unknown corpus format '{}' (expected auto, txt or jsonl)", name);
}

const char* corpus_format_name(CorpusFormat format) {
  return format == CorpusFormat::jsonl ? "jsonl" : format == CorpusFormat::txt ? "txt" : "auto";
}

const char* compression_name(Compression compression) {
  return compression == Compression::gzip ? "gzip" : compression == Compression::zstd ? "zstd" : "none";
}

std::vector<CorpusFile> expand_inputs(const std::vector<std::string>& inputs, CorpusFormat format) {
  HYLO_CHECK(!inputs.empty(), "--input: no corpus given (files, folders or globs)");
  std::vector<CorpusFile> files;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const std::string& input = inputs[i];
    std::vector<fs::path> matches;
    if (has_glob_characters(input) && !fs::exists(input)) {
      glob_t g{};
      const int rc = ::glob(input.c_str(), 0, nullptr, &g);  // sorted
      for (size_t k = 0; rc == 0 && k < g.gl_pathc; ++k) matches.emplace_back(g.gl_pathv[k]);
      ::globfree(&g);
      HYLO_CHECK(!matches.empty(), "--input {}: the pattern matches no file", input);
    } else {
      HYLO_CHECK(fs::exists(input), "--input {}: no such file or folder", input);
      matches.emplace_back(input);
    }
    std::vector<fs::path> paths;
    for (const fs::path& m : matches) {
      if (fs::is_directory(m)) add_folder(m, paths);
      else paths.push_back(m);
    }
    HYLO_CHECK(!paths.empty(), "--input {}: holds no files", input);
    for (const fs::path& p : paths) {
      HYLO_CHECK(fs::is_regular_file(p), "{}: not a regular file", p.string());
      files.push_back({p.string(), format == CorpusFormat::auto_detect ? format_of_name(p.filename()) : format, i});
    }
  }
  return files;
}

// ---------------------------------------------------------------------------------------------
// SHA-256 of a file's raw bytes on a thread of its own once the file is more than one read: at
// ~300 MB/s it would otherwise take the reader's time, which is the whole pipeline's at 16 workers.

class FileHash {
 public:
  ~FileHash() {
    if (thread_.joinable()) {
      close();
      thread_.join();
    }
  }
  void add(const char* data, size_t size) {
    if (!started_ && first_.empty()) {  // most files are one read: hash them without a thread
      first_.assign(data, data + size);
      return;
    }
    if (!started_) {
      started_ = true;
      thread_ = std::thread([this] {
        name_this_thread("prepare-hash");
        loop();
      });
      push(std::move(first_));
    }
    push(std::vector<char>(data, data + size));
  }
  std::string hex() {
    if (!started_) {
      sha_.update(first_.data(), first_.size());
      return sha_.hex();
    }
    close();
    thread_.join();
    return sha_.hex();
  }

 private:
  void push(std::vector<char> piece) {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return queue_.size() < 8; });
    queue_.push_back(std::move(piece));
    changed_.notify_all();
  }
  void close() {
    std::lock_guard lock(mutex_);
    closed_ = true;
    changed_.notify_all();
  }
  void loop() {
    while (true) {
      std::vector<char> piece;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] { return closed_ || !queue_.empty(); });
        if (queue_.empty()) return;
        piece = std::move(queue_.front());
        queue_.pop_front();
        changed_.notify_all();
      }
      sha_.update(piece.data(), piece.size());
    }
  }
  Sha256 sha_;
  std::vector<char> first_;
  bool started_ = false, closed_ = false;
  std::thread thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::vector<char>> queue_;
};

// ---------------------------------------------------------------------------------------------
// One file's bytes, decompressed as they stream, with the SHA-256 of the bytes on disk.

class CorpusReader::Source {
 public:
  explicit Source(const std::string& path) : path_(path) {
    fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    HYLO_CHECK(fd_ >= 0, "{}: cannot open: {}", path, std::strerror(errno));
    raw_.resize(kReadBytes);
    fill_raw();
    const auto* b = reinterpret_cast<const unsigned char*>(raw_.data());
    if (raw_have_ >= 2 && b[0] == 0x1f && b[1] == 0x8b) {
      compression = Compression::gzip;
      HYLO_CHECK(inflateInit2(&z_, 15 + 32) == Z_OK, "{}: cannot start gzip decompression", path);
    } else if (raw_have_ >= 4 && b[0] == 0x28 && b[1] == 0xb5 && b[2] == 0x2f && b[3] == 0xfd) {
      compression = Compression::zstd;
      zstd_ = ZSTD_createDStream();
      HYLO_CHECK(zstd_ && !ZSTD_isError(ZSTD_initDStream(zstd_)), "{}: cannot start zstd decompression", path);
    }
    if (compression != Compression::none)
      inflate_thread_ = std::thread([this] {
        name_this_thread("prepare-inflate");
        inflate_loop();
      });
  }
  ~Source() {
    stop_inflating();
    if (fd_ >= 0) ::close(fd_);
    if (compression == Compression::gzip) inflateEnd(&z_);
    if (zstd_) ZSTD_freeDStream(zstd_);
  }
  Source(const Source&) = delete;
  Source& operator=(const Source&) = delete;

  // Appends up to kReadBytes of the file's content to `out`; false once the file is done.
  bool read(std::string& out) {
    if (compression == Compression::none) {
      if (raw_pos_ == raw_have_ && !raw_eof_) fill_raw();
      out.append(raw_.data() + raw_pos_, raw_have_ - raw_pos_);
      bytes += raw_have_ - raw_pos_;
      raw_pos_ = raw_have_;
      return !(raw_eof_ && raw_pos_ == raw_have_);
    }
    Inflated piece;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return !inflated_.empty(); });
      piece = std::move(inflated_.front());
      inflated_.pop_front();
      changed_.notify_all();
    }
    if (piece.error) std::rethrow_exception(piece.error);
    out.append(piece.text);
    if (!piece.more) inflate_thread_.join();  // its counts and the hash are final from here on
    return piece.more;
  }

  std::string sha256() { return hash_.hex(); }

  Compression compression = Compression::none;
  uint64_t raw_bytes = 0, bytes = 0;

 private:
  // Decompression runs on a thread of its own, a few pieces ahead: it is most of the reader's
  // time (zstd ~550-780 MB/s of text on one core), and the reader alone feeds every worker.
  struct Inflated {
    std::string text;
    bool more = true;
    std::exception_ptr error;
  };
  static constexpr size_t kInflatedAhead = 4;

  void inflate_loop() {
    while (true) {
      Inflated piece;
      try {
        piece.more = decompress(piece.text);
      } catch (...) {
        piece.error = std::current_exception();
        piece.more = false;
      }
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return stop_ || inflated_.size() < kInflatedAhead; });
      if (stop_) return;
      const bool last = !piece.more;
      inflated_.push_back(std::move(piece));
      changed_.notify_all();
      if (last) return;
    }
  }
  void stop_inflating() {
    if (!inflate_thread_.joinable()) return;
    {
      std::lock_guard lock(mutex_);
      stop_ = true;
      changed_.notify_all();
    }
    inflate_thread_.join();
  }

  // Appends up to kReadBytes of decompressed content to `out`; false once the file is done.
  bool decompress(std::string& out) {
    const size_t at = out.size();
    out.resize(at + kReadBytes);
    size_t produced = 0;
    while (produced == 0) {
      if (raw_pos_ == raw_have_ && !raw_eof_) fill_raw();
      const bool no_input = raw_pos_ == raw_have_ && raw_eof_;
      if (compression == Compression::gzip) {
        if (no_input && stream_ended_) break;
        if (stream_ended_) {  // another member follows (pigz, bgzip and `cat a.gz b.gz` write several)
          HYLO_CHECK(inflateReset(&z_) == Z_OK, "{}: cannot restart gzip decompression", path_);
          stream_ended_ = false;
        }
        z_.next_in = reinterpret_cast<Bytef*>(raw_.data() + raw_pos_);
        z_.avail_in = uInt(raw_have_ - raw_pos_);
        z_.next_out = reinterpret_cast<Bytef*>(out.data() + at);
        z_.avail_out = uInt(kReadBytes);
        const int rc = inflate(&z_, Z_NO_FLUSH);
        HYLO_CHECK(rc == Z_OK || rc == Z_STREAM_END || rc == Z_BUF_ERROR, "{}: corrupt gzip data ({})", path_,
                   z_.msg ? z_.msg : "inflate failed");
        raw_pos_ = raw_have_ - z_.avail_in;
        produced = kReadBytes - z_.avail_out;
        stream_ended_ = rc == Z_STREAM_END;
        HYLO_CHECK(!(no_input && produced == 0 && !stream_ended_), "{}: truncated gzip stream (the file ends inside it)",
                   path_);
      } else {
        if (no_input && frame_done_) break;
        // With no input left the call still flushes what the decoder holds back.
        ZSTD_inBuffer in{raw_.data() + raw_pos_, raw_have_ - raw_pos_, 0};
        ZSTD_outBuffer o{out.data() + at, kReadBytes, 0};
        const size_t rc = ZSTD_decompressStream(zstd_, &o, &in);
        HYLO_CHECK(!ZSTD_isError(rc), "{}: corrupt zstd data ({})", path_, ZSTD_getErrorName(rc));
        raw_pos_ += in.pos;
        produced = o.pos;
        frame_done_ = rc == 0;
        HYLO_CHECK(!(no_input && produced == 0 && !frame_done_),
                   "{}: truncated zstd stream (the file ends inside a frame)", path_);
      }
    }
    out.resize(at + produced);
    bytes += produced;
    return produced > 0;
  }

  void fill_raw() {
    raw_pos_ = raw_have_ = 0;
    while (raw_have_ == 0) {
      const ssize_t n = ::read(fd_, raw_.data(), raw_.size());
      if (n < 0 && errno == EINTR) continue;
      HYLO_CHECK(n >= 0, "{}: read failed: {}", path_, std::strerror(errno));
      if (n == 0) {
        raw_eof_ = true;
        return;
      }
      raw_have_ = size_t(n);
    }
    raw_bytes += raw_have_;
    hash_.add(raw_.data(), raw_have_);
  }

  std::string path_;
  int fd_ = -1;
  std::vector<char> raw_;
  size_t raw_have_ = 0, raw_pos_ = 0;
  bool raw_eof_ = false;
  z_stream z_{};
  bool stream_ended_ = false;
  ZSTD_DStream* zstd_ = nullptr;
  bool frame_done_ = true;
  FileHash hash_;
  std::thread inflate_thread_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Inflated> inflated_;
  bool stop_ = false;
};

// ---------------------------------------------------------------------------------------------

CorpusReader::CorpusReader(std::vector<CorpusFile> files, std::string doc_separator)
    : files_(std::move(files)), separator_(std::move(doc_separator)), records_(files_.size()) {
  size_t inputs = 0;
  for (const CorpusFile& f : files_) inputs = std::max(inputs, f.input + 1);
  input_documents_.assign(inputs, 0);
}

CorpusReader::~CorpusReader() = default;

bool CorpusReader::open_next_file() {
  if (current_ >= files_.size()) return false;
  source_ = std::make_unique<Source>(files_[current_].path);
  pending_.clear();
  head_ = scanned_ = 0;
  file_offset_ = line_ = 0;
  in_document_ = eof_ = false;
  records_[current_].documents = 0;
  return true;
}

bool CorpusReader::refill() {
  if (head_ > 0) {  // drop what was emitted; what is left is at most one part's worth
    pending_.erase(0, head_);
    scanned_ -= head_;
    file_offset_ += head_;
    head_ = 0;
  }
  eof_ = !source_->read(pending_);
  return !eof_;
}

void CorpusReader::finish_file() {
  FileRecord& r = records_[current_];
  r.raw_bytes = source_->raw_bytes;
  r.bytes = source_->bytes;
  r.compression = source_->compression;
  r.sha256 = source_->sha256();
  source_.reset();
  ++current_;
}

// Moves pending_[head_, head_ + size) into the batch as one part.
void CorpusReader::emit(RawBatch& batch, size_t size, bool ends_document) {
  const CorpusFile& file = files_[current_];
  DocumentPart part;
  part.offset = batch.bytes.size();
  part.size = size;
  part.file = uint32_t(current_);
  part.json = file.format == CorpusFormat::jsonl;
  part.first = !in_document_;
  part.where = part.json ? line_ : file_offset_ + head_;
  if (part.first) {
    part.document = documents_++;
    part.in_input = input_documents_[file.input]++;
    ++records_[current_].documents;
  } else {
    part.document = documents_ - 1;
    part.in_input = input_documents_[file.input] - 1;
  }
  batch.bytes.append(pending_, head_, size);
  batch.parts.push_back(part);
  in_document_ = !ends_document;
}

namespace {

// A cut in text[begin, limit) where the pre-tokenizer splits anyway (see the header): before an
// ASCII whitespace byte that follows a printable one. npos when there is none.
size_t safe_cut(const std::string& text, size_t begin, size_t limit) {
  auto ok = [&](size_t p) {
    const char c = text[p], before = text[p - 1];
    return (c == ' ' || c == '\n' || c == '\t' || c == '\r') && before > ' ' && before < 0x7F;
  };
  for (size_t p = limit; p > begin + 1; --p)
    if (ok(p - 1)) return p - 1;
  return std::string::npos;
}

}  // namespace

bool CorpusReader::next(RawBatch& batch, size_t target_bytes) {
  batch.bytes.clear();
  batch.parts.clear();
  while (batch.bytes.size() < target_bytes) {
    if (!source_ && !open_next_file()) break;
    const CorpusFile& file = files_[current_];
    const size_t held = pending_.size() - head_;
    if (file.format == CorpusFormat::jsonl) {
      const size_t nl = pending_.find('\n', std::max(scanned_, head_));
      if (nl != std::string::npos || (eof_ && held > 0)) {
        const size_t end = nl == std::string::npos ? pending_.size() : nl;
        ++line_;
        size_t size = end - head_;
        if (size > 0 && pending_[head_ + size - 1] == '\r') --size;
        const size_t content = pending_.find_first_not_of(" \t\r", head_);
        const bool blank = content == std::string::npos || content >= head_ + size;
        if (!blank) emit(batch, size, true);
        head_ = scanned_ = nl == std::string::npos ? pending_.size() : nl + 1;
        continue;
      }
      scanned_ = pending_.size();
    } else if (!separator_.empty()) {
      const size_t from = std::max(head_, scanned_ >= separator_.size() ? scanned_ - separator_.size() + 1 : 0);
      const size_t at = pending_.find(separator_, from);
      if (at != std::string::npos) {
        if (at > head_) emit(batch, at - head_, true);
        in_document_ = false;
        head_ = scanned_ = at + separator_.size();
        continue;
      }
      scanned_ = pending_.size();
      if (eof_ && held > 0) {
        emit(batch, held, true);
        head_ = scanned_ = pending_.size();
        continue;
      }
      // Keep a separator's length back: it may be cut in two by the end of what was read.
      if (held > kMaxPartBytes + separator_.size()) {
        const size_t cut = safe_cut(pending_, head_, pending_.size() - separator_.size());
        if (cut != std::string::npos) {
          emit(batch, cut - head_, false);
          head_ = cut;
          continue;
        }
      }
    } else {
      if (eof_ && held > 0) {
        emit(batch, held, true);
        head_ = scanned_ = pending_.size();
        continue;
      }
      if (held > kMaxPartBytes) {
        const size_t cut = safe_cut(pending_, head_, pending_.size());
        if (cut != std::string::npos) {
          emit(batch, cut - head_, false);
          head_ = cut;
          continue;
        }
      }
    }
    if (eof_) {
      finish_file();
      continue;
    }
    refill();
  }
  return !batch.parts.empty();
}

}  // namespace hylo::data
