// The raw side of `hylo data prepare` (SPEC §4): which files an input names, and their documents
// read in order, a bounded batch at a time, so a corpus of any size streams through fixed memory.
//
// Inputs are files, folders (walked recursively in path order; names starting with '.' are
// skipped) and globs. Formats by extension, compression by magic bytes:
//   txt    one document per file, or documents separated by a given string (--doc-separator)
//   jsonl  one JSON object per line, the document is its `text_key` string (.jsonl, .json,
//          .ndjson), each optionally gzip (.gz) or zstd (.zst) compressed.
// Anything else is read as txt under --format auto.
//
// A batch holds whole JSON lines (parsed later, by the tokenizing workers) and txt documents;
// a txt document longer than kMaxPartBytes is cut into parts just before an ASCII whitespace byte
// that follows a printable ASCII byte. The GPT-2 pre-tokenizer always splits there (no pre-token
// holds whitespace after a non-space, and the pattern looks only ahead), so the parts' ids
// concatenated are the document's ids: one book-length file costs no more memory than a page.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace hylo::data {

enum class CorpusFormat { auto_detect, txt, jsonl };
// "auto", "txt", "jsonl"; throws naming --format otherwise.
CorpusFormat parse_corpus_format(std::string_view name);
const char* corpus_format_name(CorpusFormat format);

enum class Compression { none, gzip, zstd };
const char* compression_name(Compression compression);

struct CorpusFile {
  std::string path;
  CorpusFormat format = CorpusFormat::txt;  // txt or jsonl, never auto
  size_t input = 0;                          // which input named it
};

// The files each input names, in input order, each input's files in path order. Fails naming the
// input when it names nothing (no such path, a glob with no match, a folder with no files).
std::vector<CorpusFile> expand_inputs(const std::vector<std::string>& inputs, CorpusFormat format);

inline constexpr size_t kMaxPartBytes = size_t(4) << 20;

// One piece of a document in a batch: bytes [offset, offset + size) of Batch::bytes.
struct DocumentPart {
  size_t offset = 0, size = 0;
  uint32_t file = 0;        // index into the file list
  bool first = true;        // the document starts here (its separator goes before this part)
  bool json = false;        // a JSON line, still to be parsed
  uint64_t document = 0;    // index of the document in the corpus
  uint64_t in_input = 0;    // index of the document among its input's
  uint64_t where = 0;       // jsonl: line number (from 1); txt: byte offset of the part in the file
};

struct RawBatch {
  std::string bytes;
  std::vector<DocumentPart> parts;
};

// What was read of one file: its raw (compressed) bytes, their SHA-256, its documents.
struct FileRecord {
  uint64_t raw_bytes = 0, bytes = 0, documents = 0;
  Compression compression = Compression::none;
  std::string sha256;
};

class CorpusReader {
 public:
  // `doc_separator` empty: a txt file is one document.
  CorpusReader(std::vector<CorpusFile> files, std::string doc_separator);
  ~CorpusReader();
  CorpusReader(const CorpusReader&) = delete;
  CorpusReader& operator=(const CorpusReader&) = delete;

  // Clears `batch` and fills it with the next parts, about `target_bytes` of them (at least one
  // part unless the corpus is done). Returns false at the end of the corpus.
  bool next(RawBatch& batch, size_t target_bytes);

  const std::vector<CorpusFile>& files() const { return files_; }
  // Complete for the files already read past (all of them once next() returned false).
  const std::vector<FileRecord>& records() const { return records_; }
  uint64_t documents() const { return documents_; }

 private:
  class Source;
  bool open_next_file();
  bool refill();
  void emit(RawBatch& batch, size_t size, bool ends_document);
  void finish_file();

  std::vector<CorpusFile> files_;
  std::string separator_;
  std::vector<FileRecord> records_;
  std::vector<uint64_t> input_documents_;  // documents so far per input
  size_t current_ = 0;                     // the file being read (== files_.size() when done)
  std::unique_ptr<Source> source_;
  std::string pending_;          // bytes read; [head_, end) not yet emitted
  size_t head_ = 0;
  size_t scanned_ = 0;           // jsonl / separator: pending_[0, scanned_) already searched
  bool in_document_ = false;     // a txt document's earlier part was emitted
  uint64_t file_offset_ = 0;     // byte offset in the file of pending_[0]
  uint64_t line_ = 0;            // jsonl: lines of the file emitted or skipped so far
  bool eof_ = false;
  uint64_t documents_ = 0;
};

}  // namespace hylo::data
