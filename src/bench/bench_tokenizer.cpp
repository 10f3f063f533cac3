// `hylo data bench`: tokenizer throughput (r50k_base, encode_ordinary_batch) on the raw documents
// of the chosen sources, on one thread and then on `threads`, each the best of `repeat` runs. A
// benchmark program, not a test.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <thread>

#include "bench/bench.h"
#include "bench/bench_table.h"
#include "data/tokenizer.h"

namespace hylo {

namespace {

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("model name")) return line.substr(line.find(':') + 2);
  return "unknown CPU";
}

}  // namespace

int run_bench_tokenizer(const TokenizerBenchOptions& o) {
  const std::vector<std::string> sources = data::resolve_sources(o.sources);
  const int threads = o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  const data::Tokenizer tokenizer = data::Tokenizer::from_tiktoken(o.tokenizer);
  std::vector<data::Document> documents = data::read_documents(o.raw_dir, sources);
  std::vector<std::string> texts;
  uint64_t bytes = 0;
  for (auto& d : documents) bytes += d.text.size(), texts.push_back(std::move(d.text));

  bench::Table table({{"threads", "threads", 8},
                      {"mb", "MB", 12, 2, false},
                      {"seconds", "seconds", 10, 3},
                      {"mb_per_s", "MB/s", 14, 2},
                      {"mtokens_per_s", "Mtokens/s", 12, 3}});
  table.print_header();
  uint64_t tokens = 0;
  std::vector<int> thread_counts{1};
  if (threads > 1) thread_counts.push_back(threads);
  for (int t : thread_counts) {
    double best = 1e30;
    for (int r = 0; r < o.repeat; ++r) {
      const auto start = std::chrono::steady_clock::now();
      const auto ids = tokenizer.encode_ordinary_batch(texts, t);
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      tokens = 0;
      for (const auto& v : ids) tokens += v.size();
    }
    table.add({{"threads", t},
               {"mb", double(bytes) / 1e6},
               {"seconds", best},
               {"mb_per_s", double(bytes) / 1e6 / best},
               {"mtokens_per_s", double(tokens) / 1e6 / best}});
  }
  if (!o.json.empty())
    table.write_json(o.json, "data", fmt::format("{}, {} hardware threads", cpu_model(), std::thread::hardware_concurrency()),
                     {{"sources", sources}, {"best_of", o.repeat}},
                     {{"what", "tokenizer throughput (r50k_base, encode_ordinary_batch)"},
                      {"documents", texts.size()},
                      {"bytes", bytes},
                      {"tokens", tokens},
                      {"bytes_per_token", double(bytes) / double(std::max<uint64_t>(1, tokens))}});
  return 0;
}

}  // namespace hylo
