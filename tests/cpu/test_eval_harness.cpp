// Standard tasks from users' files (SPEC §5), against lm-evaluation-harness's definitions: each
// format's fixture (written here) becomes the strings lm-eval builds; acc / acc_norm / lambada's
// acc and perplexity / bits per byte equal a direct computation from the model's own forward rows;
// rolling windows cover every token once; bad files give one-line errors naming file and line.
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <numeric>

#include "error_of.h"
#include "model_checkpoint_fixture.h"
#include "peaked_model.h"
#include "run_command.h"
#include "temp_dir.h"
#include "autograd/variable.h"
#include "config/config.h"
#include "data/tokenizer.h"
#include "eval/harness.h"
#include "eval/loglikelihood.h"
#include "eval/perplexity.h"
#include "eval/python_text.h"
#include "eval/task_files.h"

using namespace hylo;
namespace fs = std::filesystem;

namespace {

const data::Tokenizer& tokenizer() {
  static const data::Tokenizer t =
      data::Tokenizer::from_tiktoken(std::string(HYLO_SOURCE_DIR) + "/data/tokenizer/r50k_base.tiktoken");
  return t;
}

// A small model over GPT-2's padded vocabulary with peaked, input-dependent predictions.
const Transformer& model() {
  static const Transformer m(test::peaked_hybrid(50304), 21);
  return m;
}

constexpr int kValid = 50257;

// The test case's folder, hylo_test_<name>_<pid>, and files written into it.
struct Scratch : test::TempDir {
  explicit Scratch(const std::string& name) : TempDir("test_" + name) {}
  std::string write(const std::string& name, const std::string& text) const {
    const std::string path = file(name);
    std::ofstream(path, std::ios::binary) << text;
    return path;
  }
};

struct Direct {
  double logprob = 0;
  bool greedy = true;
};

// The model reads `input` (one forward, batch 1); row i scores targets[i] (rows at the end of the
// input: targets.size() <= input.size()). Log-softmax in double over the valid ids.
Direct direct_score(const std::vector<int32_t>& input, const std::vector<int32_t>& targets) {
  NoGradGuard no_grad;
  const int T = int(input.size()), V = 50304;
  const std::vector<float> logits = model().forward(Tensor::from_vector(input, {1, T})).value().to_vector<float>();
  Direct d;
  for (size_t i = 0; i < targets.size(); ++i) {
    const float* row = logits.data() + size_t(T - int(targets.size()) + int(i)) * V;
    double mx = row[0];
    int best = 0;
    for (int v = 1; v < kValid; ++v)
      if (row[v] > mx) mx = row[v], best = v;
    double z = 0;
    for (int v = 0; v < kValid; ++v) z += std::exp(double(row[v]) - mx);
    d.logprob += double(row[targets[i]]) - mx - std::log(z);
    d.greedy = d.greedy && best == targets[i];
  }
  return d;
}

// lm-eval's loglikelihood of (context, continuation) computed straight from its definition.
Direct direct_request(const std::string& context, const std::string& continuation, int max_length = 1 << 20) {
  const TokenRequest r = encode_request(tokenizer(), context, continuation);
  std::vector<int32_t> all = r.context;
  all.insert(all.end(), r.continuation.begin(), r.continuation.end());
  if (all.size() > size_t(max_length) + 1) all.erase(all.begin(), all.end() - (max_length + 1));
  all.pop_back();
  return direct_score(all, r.continuation);
}

double sample_stderr(const std::vector<double>& x) {
  double mu = 0, s = 0;
  for (double v : x) mu += v / double(x.size());
  for (double v : x) s += (v - mu) * (v - mu);
  return std::sqrt(s / double(x.size() - 1)) / std::sqrt(double(x.size()));
}

}  // namespace

TEST_CASE("python text rules: whitespace, strip, len, re.split word count, capitalize, replace") {
  CHECK(pytext::is_space(U'\u00a0'));
  CHECK(pytext::is_space(U'\u3000'));
  CHECK(pytext::is_space(U'\x1f'));
  CHECK_FALSE(pytext::is_space(U'\u200b'));  // zero-width space is not whitespace to Python
  CHECK(pytext::strip(" \t a b \n\u00a0") == "a b");
  CHECK(pytext::rstrip("  x \u2003") == "  x");
  CHECK(pytext::rstrip("caf\u00e9") == "caf\u00e9");  // é's last byte is no whitespace
  CHECK(pytext::length("caf\u00e9 \U0001F600") == 6);
  CHECK(pytext::split_whitespace_count("") == 1);
  CHECK(pytext::split_whitespace_count("one") == 1);
  CHECK(pytext::split_whitespace_count("a  b\n\nc") == 3);
  CHECK(pytext::split_whitespace_count(" a b\n") == 4);
  CHECK(pytext::split_whitespace_count("a\u00a0b") == 2);
  CHECK(pytext::capitalize("the DOG runs") == "The dog runs");
  CHECK(pytext::replace("a  b   c", "  ", " ") == "a b  c");  // one left-to-right pass, as str.replace
}

TEST_CASE("rolling windows: lm-eval's disjoint windows, every token once, the first with no context") {
  std::vector<int32_t> ten(10);
  for (int i = 0; i < 10; ++i) ten[size_t(i)] = 100 + i;
  // get_rolling_token_windows(range(10), prefix=P, max_seq_len=4, context_len=1) + make_disjoint_window
  const std::vector<TokenRequest> w = rolling_windows(ten, 7, 4, 1);
  REQUIRE(w.size() == 3);
  CHECK(w[0].context == std::vector<int32_t>{7});
  CHECK(w[0].continuation == std::vector<int32_t>{100, 101, 102, 103});
  CHECK(w[1].context == std::vector<int32_t>{103});
  CHECK(w[1].continuation == std::vector<int32_t>{104, 105, 106, 107});
  CHECK(w[2].context == std::vector<int32_t>{105, 106, 107});
  CHECK(w[2].continuation == std::vector<int32_t>{108, 109});

  for (int n : {0, 1, 15, 16, 17, 50}) {
    for (int context_len : {1, 2, 5}) {
      CAPTURE(n);
      CAPTURE(context_len);
      std::vector<int32_t> tokens(static_cast<size_t>(n));
      for (int i = 0; i < n; ++i) tokens[size_t(i)] = 1000 + i;
      const std::vector<TokenRequest> windows = rolling_windows(tokens, 50256, 16, context_len);
      std::vector<int32_t> covered;
      for (size_t k = 0; k < windows.size(); ++k) {
        const TokenRequest& r = windows[k];
        CHECK(r.continuation.size() <= 16);
        if (k == 0) {
          CHECK(r.context == std::vector<int32_t>{50256});  // no text before the first window
        } else {
          CHECK(r.context.size() + r.continuation.size() == 17);  // the model reads 16 tokens each time
          CHECK(int(r.context.size()) >= context_len);
          // The context is exactly the text before the window.
          CHECK(std::equal(r.context.begin(), r.context.end(), covered.end() - ptrdiff_t(r.context.size())));
        }
        covered.insert(covered.end(), r.continuation.begin(), r.continuation.end());
      }
      CHECK(covered == tokens);
    }
  }
  CHECK(test::error_of([] { rolling_windows(std::vector<int32_t>{1, 2}, 0, 4, 5); }).find("context_len 5") !=
        std::string::npos);
}

TEST_CASE("encode_request: lm-eval's pair encoding -- score_requests equals the forward's own rows, truncated left") {
  const data::Tokenizer& tok = tokenizer();
  // Trailing whitespace of the context moves into the continuation.
  const TokenRequest moved = encode_request(tok, "The cat sat ", "on the mat");
  CHECK(moved.context == tok.encode("The cat sat"));
  CHECK(moved.continuation == tok.encode(" on the mat"));
  // The continuation is the whole text's tokens after the context's.
  const TokenRequest split = encode_request(tok, "Question: why\nAnswer:", " because");
  std::vector<int32_t> whole = split.context;
  whole.insert(whole.end(), split.continuation.begin(), split.continuation.end());
  CHECK(whole == tok.encode("Question: why\nAnswer: because"));
  // An empty context is the prefix (end-of-text) token.
  const TokenRequest empty = encode_request(tok, "", " hello world");
  CHECK(empty.context == std::vector<int32_t>{50256});
  CHECK(empty.continuation == tok.encode(" hello world"));

  const std::vector<std::pair<std::string, std::string>> pairs = {
      {"The cat sat", " on the mat"},
      {"A much longer context that goes on and on about the garden and the river", " and"},
      {"", " hello world"},
      {"Question: what is two plus two?\nAnswer:", " four"}};
  std::vector<TokenRequest> requests;
  for (const auto& [c, x] : pairs) requests.push_back(encode_request(tok, c, x));
  for (int max_length : {64, 6}) {  // 6: the long contexts are cut from the left
    CAPTURE(max_length);
    const std::vector<SpanScore> scores = score_requests(model(), requests, max_length, kValid, Device::cpu, 3);
    REQUIRE(scores.size() == pairs.size());
    for (size_t i = 0; i < pairs.size(); ++i) {
      const Direct d = direct_request(pairs[i].first, pairs[i].second, max_length);
      CHECK(scores[i].tokens == int(requests[i].continuation.size()));
      CHECK(scores[i].logprob == doctest::Approx(d.logprob).epsilon(1e-5));
      CHECK(scores[i].exact() == d.greedy);
    }
  }
  CHECK(test::error_of([&] { score_requests(model(), requests, 1, kValid, Device::cpu, 2); })
            .find("longer than max_length 1") != std::string::npos);
}

TEST_CASE("task files: each public format becomes lm-eval's requests -- acc and acc_norm match a direct computation") {
  Scratch s("eval_harness_tasks");
  const std::string hellaswag = s.write(
      "hellaswag.jsonl",
      R"({"ind": 4, "activity_label": "Removing ice from car", "ctx_a": "Then, the man writes over the snow covering the window of a car, and a woman wearing winter clothes smiles.", "ctx_b": "then", "ctx": "ignored", "endings": [", the man adds wax to the windshield and cuts it.", ", a person board a ski lift, while two men supporting the head of the person wearing winter clothes snow as the we girls sled.", ", the man puts on a christmas coat, knitted with netting.", ", the man continues removing the snow on his car."], "label": "3"}
{"activity_label": "Home and Garden", "ctx_a": "[header] How to grow tomatoes [title] Pick a sunny spot.", "ctx_b": "WATER them daily", "endings": ["[step] Use a  hose.", " And wait."], "label": 0}

{"activity_label": "Cooking", "ctx": "A chef chops onions", "endings": ["quickly.", "into the river.", "with a spoon."], "label": "1"}
)");
  const std::string piqa = s.write("piqa.jsonl",
                                   R"({"goal": "How do I ready a guinea pig cage for it's new occupants?", "sol1": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped paper strips.", "sol2": "Provide the guinea pig with a cage full of a few inches of bedding made of ripped jeans material.", "label": 0}
{"goal": "To open a jar", "sol1": "twist the lid.", "sol2": "sing to the lid.", "label": 0}
{"goal": "dry wet hair", "sol1": "use a towel", "sol2": "use a bucket of water", "label": 1}
)");
  const std::string arc = s.write("arc.jsonl",
                                  R"({"id": "Mercury_1", "question": "Which gas do plants take in?", "choices": {"text": ["oxygen", "carbon dioxide", "helium", "neon"], "label": ["A", "B", "C", "D"]}, "answerKey": "B"}
{"id": "NYSEDREGENTS_2", "question": "What melts ice?", "choices": {"text": ["heat", "cold", "dark"], "label": ["1", "2", "3"]}, "answerKey": "1"}
{"id": "AI2_3", "question": {"stem": "Which is a planet?", "choices": [{"text": "Mars", "label": "A"}, {"text": "the Moon", "label": "B"}]}, "answerKey": "A"}
)");
  const std::string winogrande = s.write("winogrande.jsonl",
                                         R"({"sentence": "Sarah was a much better surgeon than Maria so _ always got the harder cases.", "option1": "Sarah", "option2": "Maria", "answer": "1"}
{"sentence": "The trophy does not fit in the suitcase because the _ is too big.", "option1": "trophy", "option2": "suitcase", "answer": "1"}
{"sentence": "The cup broke the vase when _ fell.", "option1": "the cup", "option2": "the vase", "answer": 2}
)");

  const TaskData h = read_task("hellaswag", hellaswag);
  REQUIRE(h.docs.size() == 3);
  CHECK(h.docs[0].requests[0].first ==
        "Removing ice from car: Then, the man writes over the snow covering the window of a car, and a woman wearing "
        "winter clothes smiles. Then");
  CHECK(h.docs[0].requests[3].second == " , the man continues removing the snow on his car.");
  CHECK(h.docs[0].gold == 3);
  // preprocess: " [title]" -> ". ", [bracketed] runs dropped, "  " -> " "; ctx_b capitalised.
  CHECK(h.docs[1].requests[0].first == "Home and Garden: How to grow tomatoes. Pick a sunny spot. Water them daily");
  CHECK(h.docs[1].requests[0].second == "  Use a hose.");
  CHECK(h.docs[1].requests[1].second == " And wait.");
  CHECK(h.docs[1].choice_chars == std::vector<int64_t>{12, 9});  // len(" Use a hose."): strip comes before the brackets go
  CHECK(h.docs[2].requests[0].first == "Cooking: A chef chops onions");  // "ctx" without ctx_a

  const TaskData p = read_task("piqa", piqa);
  CHECK(p.docs[1].requests[0].first == "Question: To open a jar\nAnswer:");
  CHECK(p.docs[1].requests[1].second == " sing to the lid.");
  CHECK(p.docs[2].gold == 1);
  const TaskData a = read_task("arc_challenge", arc);
  CHECK(a.docs[0].requests[1] == std::pair<std::string, std::string>{"Question: Which gas do plants take in?\nAnswer:",
                                                                      " carbon dioxide"});
  CHECK(a.docs[0].gold == 1);
  CHECK(a.docs[1].gold == 0);
  CHECK(a.docs[2].requests[0].first == "Question: Which is a planet?\nAnswer:");
  CHECK(a.docs[2].requests.size() == 2);
  const TaskData w = read_task("winogrande", winogrande);
  CHECK(w.docs[0].requests[1].first == "Sarah was a much better surgeon than Maria so Maria");
  CHECK(w.docs[0].requests[1].second == " always got the harder cases.");
  CHECK(w.docs[2].gold == 1);
  CHECK_FALSE(w.acc_norm);

  for (const TaskData* task : {&h, &p, &a, &w}) {
    CAPTURE(task->name);
    HarnessOptions o;
    o.max_length = 64;
    o.batch = 3;
    const TaskScores scores = evaluate_task(model(), tokenizer(), *task, o, Device::cpu);
    std::vector<double> acc, acc_norm;
    for (const TaskDoc& doc : task->docs) {
      std::vector<double> ll;
      for (const auto& [context, continuation] : doc.requests) ll.push_back(direct_request(context, continuation).logprob);
      size_t best = 0, best_norm = 0;
      for (size_t i = 1; i < ll.size(); ++i) {
        if (ll[i] > ll[best]) best = i;
        if (ll[i] / double(doc.choice_chars[i]) > ll[best_norm] / double(doc.choice_chars[best_norm])) best_norm = i;
      }
      acc.push_back(int(best) == doc.gold);
      acc_norm.push_back(int(best_norm) == doc.gold);
    }
    auto mean = [](const std::vector<double>& v) { return std::accumulate(v.begin(), v.end(), 0.0) / double(v.size()); };
    CHECK(scores.output_type == "multiple_choice");
    CHECK(scores.effective == 3);
    CHECK(scores.metric("acc").value == doctest::Approx(mean(acc)));
    CHECK(*scores.metric("acc").stderr_value == doctest::Approx(sample_stderr(acc)));
    if (task->acc_norm) {
      CHECK(scores.metric("acc_norm").value == doctest::Approx(mean(acc_norm)));
      CHECK(*scores.metric("acc_norm").stderr_value == doctest::Approx(sample_stderr(acc_norm)));
    } else {
      CHECK(scores.metrics.size() == 1);
    }
  }
  // --limit: the first documents only, all of the file counted.
  const TaskData two = read_task("piqa", piqa, 2);
  CHECK(two.docs.size() == 2);
  CHECK(two.original == 3);
}

TEST_CASE("pick_choices: acc by summed log-likelihood, acc_norm by log-likelihood per character, ties to the first") {
  TaskData task;
  task.name = "piqa";
  task.acc_norm = true;
  TaskDoc doc;
  doc.requests = {{"q", " a"}, {"q", " bbbb"}, {"q", " cc"}};
  doc.choice_chars = {1, 4, 2};
  doc.gold = 1;
  task.docs = {doc, doc};
  auto score = [](double ll) {
    SpanScore s;
    s.tokens = 1;
    s.logprob = ll;
    return s;
  };
  // doc 0: ll -2, -4, -3 -> acc picks 0; per char -2, -1, -1.5 -> acc_norm picks 1.
  // doc 1: ll -1, -1, -5 -> tie, the first; per char -1, -0.25, -2.5 -> 1.
  const std::vector<SpanScore> scores = {score(-2), score(-4), score(-3), score(-1), score(-1), score(-5)};
  const std::vector<ChoicePick> picks = pick_choices(task, scores);
  CHECK(picks[0].pred == 0);
  CHECK(picks[0].pred_norm == 1);
  CHECK(picks[1].pred == 0);
  CHECK(picks[1].pred_norm == 1);
  const TaskScores t = tally_task(task, scores, 0);
  CHECK(t.metric("acc").value == 0.0);
  CHECK(t.metric("acc_norm").value == 1.0);
  CHECK(*t.metric("acc_norm").stderr_value == 0.0);
}

TEST_CASE("lambada: context up to the last space, continuation ' ' + last word -- greedy acc and per-word perplexity") {
  Scratch s("eval_harness_lambada");
  const std::string path = s.write("lambada.jsonl",
                                   R"({"text": "In my palm is a clear stone, and inside it is a small ivory statuette. A guardian angel. \"Figured if you're going to be out at night getting hit by cars, you might as well have some backup.\" I look at him, feeling stunned. Like this is some sort of sign. But as I stare at Harlin, his mouth curved in a confident grin, I don't care about signs"}
{"text": "the the the the the the the the"}
{"text": "He opened the door and walked into the garden"}
{"text": "single"}
)");
  const TaskData task = read_task("lambada_openai", path);
  REQUIRE(task.docs.size() == 4);
  CHECK(task.output == TaskOutput::loglikelihood);
  CHECK(task.docs[2].requests[0] ==
        std::pair<std::string, std::string>{"He opened the door and walked into the", " garden"});
  CHECK(task.docs[3].requests[0] == std::pair<std::string, std::string>{"", " single"});
  HarnessOptions o;
  o.max_length = 32;  // the first passage is cut from the left
  o.bootstrap_iters = 500;
  const TaskScores scores = evaluate_task(model(), tokenizer(), task, o, Device::cpu);
  std::vector<double> ll, acc;
  for (const TaskDoc& doc : task.docs) {
    const Direct d = direct_request(doc.requests[0].first, doc.requests[0].second, 32);
    ll.push_back(d.logprob);
    acc.push_back(d.greedy);
  }
  const double mean_ll = std::accumulate(ll.begin(), ll.end(), 0.0) / 4;
  CHECK(scores.output_type == "loglikelihood");
  CHECK(scores.metric("perplexity").value == doctest::Approx(std::exp(-mean_ll)).epsilon(1e-6));
  CHECK(scores.metric("acc").value == doctest::Approx(std::accumulate(acc.begin(), acc.end(), 0.0) / 4));
  CHECK_FALSE(scores.metric("perplexity").higher_is_better);
  REQUIRE(scores.metric("perplexity").stderr_value);
  CHECK(*scores.metric("perplexity").stderr_value > 0);
}

TEST_CASE("bootstrap stderr of perplexity: deterministic, near the delta-method value") {
  std::vector<double> ll;
  for (int i = 0; i < 400; ++i) ll.push_back(-1.0 - 0.5 * std::sin(0.37 * i) - 0.01 * (i % 7));
  const double a = bootstrap_perplexity_stderr(ll, 4000), b = bootstrap_perplexity_stderr(ll, 4000);
  CHECK(a == b);
  double mu = 0;
  for (double x : ll) mu += x / 400;
  const double delta = std::exp(-mu) * sample_stderr(ll);  // d exp(-m) = exp(-m) dm
  CHECK(a == doctest::Approx(delta).epsilon(0.1));
  CHECK(mean_stderr({1, 0, 1, 1}) == doctest::Approx(0.25));  // stdev 0.5 (n - 1), / sqrt(4)
}

TEST_CASE("ppl: bits per byte, byte/word/token perplexity equal the sums over lm-eval's windows computed directly") {
  Scratch s("eval_harness_ppl");
  const std::string text =
      "The Devil's Dictionary was begun in a weekly paper in 1881, and was continued in a desultory way at long "
      "intervals until 1906.\n\nABASEMENT, n. A decent and customary mental attitude in the presence of wealth or "
      "power. \u00a0Caf\u00e9!\n";
  const std::string txt = s.write("heldout.txt", text);
  const std::string jsonl = s.write("docs.jsonl", "{\"text\": \"one two  three\"}\n\n{\"text\": \"four\\nfive\"}\n");
  const std::vector<TextDocument> docs = read_text_documents({txt, jsonl});
  REQUIRE(docs.size() == 3);
  CHECK(docs[0].text == text);
  CHECK(docs[2].name == jsonl + ":3");
  CHECK(docs[2].text == "four\nfive");

  PerplexityOptions o;
  o.max_length = 12;
  o.batch = 3;
  const PerplexityResult r = evaluate_perplexity(model(), tokenizer(), docs, o, Device::cpu);
  REQUIRE(r.documents.size() == 3);
  // Independently: token t[i] of a document is predicted in the window ending at e = the next
  // multiple of 12 (or the document's end), which reads [50256] + t[0, e-1) when e <= 12, else t[e-13, e-1).
  double ll_total = 0;
  int64_t bytes = 0, words = 0, tokens = 0;
  for (size_t d = 0; d < docs.size(); ++d) {
    const std::vector<int32_t> t = tokenizer().encode(docs[d].text);
    double ll = 0;
    for (size_t start = 0; start < t.size(); start += 12) {
      const size_t end = std::min(t.size(), start + 12);
      std::vector<int32_t> input;
      if (end <= 12) {
        input.push_back(50256);
        input.insert(input.end(), t.begin(), t.begin() + ptrdiff_t(end) - 1);
      } else {
        input.assign(t.begin() + ptrdiff_t(end) - 13, t.begin() + ptrdiff_t(end) - 1);
      }
      ll += direct_score(input, std::vector<int32_t>(t.begin() + ptrdiff_t(start), t.begin() + ptrdiff_t(end))).logprob;
    }
    CHECK(r.documents[d].logprob == doctest::Approx(ll).epsilon(1e-6));
    CHECK(r.documents[d].tokens == int64_t(t.size()));
    ll_total += ll;
    bytes += int64_t(docs[d].text.size());
    tokens += int64_t(t.size());
  }
  CHECK(r.documents[0].windows == int((r.documents[0].tokens + 11) / 12));
  // re.split(r"\s+"): the text's 33 words plus the empty piece after its final "\n"; "one two  three"
  // is 3, "four\nfive" 2.
  CHECK(r.documents[1].words == 3);
  CHECK(r.documents[2].words == 2);
  words = r.documents[0].words + 5;
  CHECK(r.documents[0].words == pytext::split_whitespace_count(text));
  CHECK(r.bits_per_byte() == doctest::Approx(-ll_total / double(bytes) / std::numbers::ln2).epsilon(1e-6));
  CHECK(r.byte_perplexity() == doctest::Approx(std::exp(-ll_total / double(bytes))).epsilon(1e-6));
  CHECK(r.word_perplexity() == doctest::Approx(std::exp(-ll_total / double(words))).epsilon(1e-6));
  CHECK(r.token_perplexity() == doctest::Approx(std::exp(-ll_total / double(tokens))).epsilon(1e-6));

  const TaskScores t = tally_perplexity(r, txt);
  HarnessRun run;
  run.checkpoint = "runs/x/checkpoints/step_3.h5";
  run.step = 3;
  run.device = "cpu";
  run.options.max_length = 12;
  const nlohmann::ordered_json j = harness_json({t}, run);
  CHECK(j["results"]["ppl"]["bits_per_byte,none"].get<double>() == doctest::Approx(r.bits_per_byte()));
  CHECK(j["results"]["ppl"]["word_perplexity_stderr,none"] == "N/A");
  CHECK(j["n-samples"]["ppl"]["effective"] == 3);
  CHECK(j["config"]["model_args"] == "checkpoint=runs/x/checkpoints/step_3.h5");
  CHECK(j["config"]["limit"].is_null());
  CHECK(j["higher_is_better"]["ppl"]["bits_per_byte"] == false);
  for (const char* key : {"results", "group_subtasks", "configs", "versions", "n-shot", "higher_is_better", "n-samples",
                          "config", "git_hash"})
    CHECK_MESSAGE(j.contains(key), key);
  CHECK(harness_table({t}).find("|ppl  |      1|none  |     0|word_perplexity") != std::string::npos);
}

TEST_CASE("score_sequences: sequences of different lengths in one padded batch score as each alone") {
  std::vector<ScoredSequence> seqs;
  for (int n : {5, 12, 7, 12, 3}) {
    ScoredSequence q;
    for (int i = 0; i < n; ++i) q.ids.push_back(int32_t((i * 7919 + n * 131) % kValid));
    q.first = n / 2;
    q.count = n - n / 2;
    seqs.push_back(q);
  }
  const std::vector<SpanScore> batched = score_sequences(model(), seqs, kValid, Device::cpu, 4);
  for (size_t i = 0; i < seqs.size(); ++i) {
    const ScoredSequence& q = seqs[i];
    const std::vector<int32_t> input(q.ids.begin(), q.ids.begin() + q.first + q.count - 1);
    const Direct d = direct_score(input, std::vector<int32_t>(q.ids.begin() + q.first, q.ids.end()));
    CHECK(batched[i].logprob == doctest::Approx(d.logprob).epsilon(1e-5));
    CHECK(batched[i].exact() == d.greedy);
  }
}

TEST_CASE("bad task and text files: one-line errors naming the file, the line and the key") {
  Scratch s("eval_harness_bad");
  auto error = [&](const std::string& task, const std::string& content) {
    const std::string path = s.write(task + ".jsonl", content);
    return test::error_of([&] { read_task(task, path); });
  };
  const std::string dir = s.path.string() + "/";
  CHECK(error("hellaswag", "{\"activity_label\": \"x\", \"ctx\": \"y\", \"label\": 0}\n") ==
        dir + "hellaswag.jsonl:1: missing key 'endings'");
  CHECK(error("piqa", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 0}\n{\"goal\": \"g\", \"sol1\": \n") ==
        dir + "piqa.jsonl:2: not a JSON line (parse error at line 1, column 23: syntax error while parsing value - "
              "unexpected end of input; expected '[', '{', or a literal)");
  CHECK(error("piqa", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 2}\n") ==
        dir + "piqa.jsonl:1: 'label' is 2, not a choice (0 to 1)");
  CHECK(error("arc_easy", "\n{\"question\": \"q\", \"choices\": {\"text\": [\"a\"], \"label\": [\"A\"]}, \"answerKey\": \"C\"}\n") ==
        dir + "arc_easy.jsonl:2: answerKey 'C' is none of the choice labels");
  CHECK(error("winogrande", "{\"sentence\": \"no blank\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"1\"}\n") ==
        dir + "winogrande.jsonl:1: 'sentence' has no '_' to fill");
  CHECK(error("winogrande", "{\"sentence\": \"a _ b\", \"option1\": \"a\", \"option2\": \"b\", \"answer\": \"\"}\n") ==
        dir + "winogrande.jsonl:1: 'answer' is \"\", not a choice (1 to 2)");
  CHECK(error("lambada", "{\"text\": 5}\n") == dir + "lambada.jsonl:1: 'text' must be a string, not number");
  CHECK(error("lambada", "[1, 2]\n") == dir + "lambada.jsonl:1: expected a JSON object, got array");
  CHECK(error("lambada", "\n\n") == dir + "lambada.jsonl: no documents in the lambada file");
  CHECK(test::error_of([&] { read_task("lambada", dir + "none.jsonl"); }) ==
        dir + "none.jsonl: cannot open the lambada file");
  CHECK(test::error_of([&] { read_task("mmlu", dir + "none.jsonl"); }) == "eval: 'mmlu' is no standard task");

  // PIQA's original release: labels in valid-labels.lst beside valid.jsonl.
  const std::string valid = s.write("valid.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\"}\n"
                                                   "{\"goal\": \"h\", \"sol1\": \"a\", \"sol2\": \"b\"}\n");
  CHECK(test::error_of([&] { read_task("piqa", valid); }) == valid + ":1: missing key 'label'");
  s.write("valid-labels.lst", "1\n0\n");
  const TaskData piqa = read_task("piqa", valid);
  CHECK(piqa.docs[0].gold == 1);
  CHECK(piqa.docs[1].gold == 0);

  const std::string bad_text = s.write("latin1.txt", "caf\xe9\n");
  CHECK(test::error_of([&] { read_text_documents({bad_text}); }) == bad_text + ": not UTF-8 text (byte 3)");
  const std::string bad_jsonl = s.write("texts.jsonl", "{\"text\": \"ok\"}\n{\"page\": \"wikitext\"}\n");
  CHECK(test::error_of([&] { read_text_documents({bad_jsonl}); }) == bad_jsonl + ":2: missing key 'text'");
  CHECK(test::error_of([&] { read_text_documents({dir + "none.txt"}); }) == dir + "none.txt: cannot open the text file");
}

TEST_CASE("hylo eval --tasks ppl,NAME=FILE: lm-eval's results JSON with the library's numbers -- bad input fails first") {
  Scratch s("eval_harness_cli");
  Config config;
  config.model = model().config();
  config.train.seq_len = 24;
  config.train.batch_size = 2;
  config.data.train = config.data.val = (s.path / "unused.bin").string();
  config.device = "cpu";
  validate(config);
  Transformer m(config.model, 21);  // the same weights as model()
  test::write_model_checkpoint((s.path / "run").string(), config, m, 7);
  const std::string text = s.write("t.txt", "It was the best of times, it was the worst of times, it was the age of "
                                            "wisdom, it was the age of foolishness.\n");
  const std::string piqa = s.write("piqa.jsonl",
                                   "{\"goal\": \"To open a jar\", \"sol1\": \"twist the lid.\", \"sol2\": \"sing.\", \"label\": 0}\n"
                                   "{\"goal\": \"dry hair\", \"sol1\": \"use a towel\", \"sol2\": \"use water\", \"label\": 1}\n"
                                   "{\"goal\": \"cut bread\", \"sol1\": \"use a knife\", \"sol2\": \"use a cloud\", \"label\": 0}\n");
  const std::string lambada = s.write("lambada.jsonl", "{\"text\": \"the cat sat on the mat\"}\n{\"text\": \"a b c d\"}\n");
  const std::string tokenizer_path = std::string(HYLO_SOURCE_DIR) + "/data/tokenizer/r50k_base.tiktoken";
  const std::string base = std::string(HYLO_BINARY_DIR) + "/hylo eval " + (s.path / "run").string() +
                           " --tokenizer " + tokenizer_path + " --batch-size 2";
  const std::string json_path = (s.path / "results.json").string();
  const test::CommandResult ok = test::run_command(base + " --tasks ppl,piqa=" + piqa + ",lambada_openai=" + lambada +
                                                   " --text " + text + " --bootstrap-iters 50 --json " + json_path);
  REQUIRE_MESSAGE(ok.exit_code == 0, ok.output);
  CHECK(ok.output.find("|piqa ") != std::string::npos);
  CHECK(ok.output.find("acc_norm") != std::string::npos);
  std::ifstream in(json_path);
  const nlohmann::json j = nlohmann::json::parse(in);
  PerplexityOptions po;
  po.max_length = 24;
  const PerplexityResult ppl = evaluate_perplexity(model(), tokenizer(), read_text_documents({text}), po, Device::cpu);
  CHECK(j["results"]["ppl"]["bits_per_byte,none"].get<double>() == doctest::Approx(ppl.bits_per_byte()).epsilon(1e-9));
  HarnessOptions ho;
  ho.max_length = 24;
  const TaskScores piqa_scores = evaluate_task(model(), tokenizer(), read_task("piqa", piqa), ho, Device::cpu);
  CHECK(j["results"]["piqa"]["acc,none"].get<double>() == doctest::Approx(piqa_scores.metric("acc").value));
  CHECK(j["results"]["piqa"]["acc_norm_stderr,none"].get<double>() ==
        doctest::Approx(*piqa_scores.metric("acc_norm").stderr_value));
  CHECK(j["results"]["lambada_openai"].contains("perplexity_stderr,none"));
  CHECK(j["n-samples"]["piqa"]["original"] == 3);
  CHECK(j["config"]["step"] == 7);
  CHECK(j["config"]["max_length"] == 24);
  CHECK(j["config"]["bootstrap_iters"] == 50);
  CHECK(j["step"] == 7);  // hylo's own keys stay beside lm-eval's

  const test::CommandResult limited = test::run_command(base + " --tasks piqa=" + piqa + " --limit 2 --json " + json_path);
  REQUIRE_MESSAGE(limited.exit_code == 0, limited.output);
  std::ifstream in2(json_path);
  CHECK(nlohmann::json::parse(in2)["n-samples"]["piqa"]["effective"] == 2);

  // Usage errors (exit 2) and bad files (exit 1) before any model work; no JSON written.
  const std::string none = (s.path / "none.json").string();
  const test::CommandResult no_file = test::run_command(base + " --tasks val,hellaswag --json " + none);
  CHECK(no_file.exit_code == 2);
  CHECK(no_file.output.find("hellaswag needs its file: hellaswag=PATH") != std::string::npos);
  const test::CommandResult unknown = test::run_command(base + " --tasks mmlu=x.jsonl");
  CHECK(unknown.exit_code == 2);
  CHECK(unknown.output.find("unknown task 'mmlu'") != std::string::npos);
  const test::CommandResult text_alone = test::run_command(base + " --tasks val --text " + text);
  CHECK(text_alone.exit_code == 2);
  const std::string bad = s.write("bad.jsonl", "{\"goal\": \"g\", \"sol1\": \"a\", \"sol2\": \"b\", \"label\": 0}\n{\"goal\": \"g\", \"sol1\": \"a\", \"label\": 0}\n");
  const test::CommandResult bad_line = test::run_command(base + " --tasks ppl,piqa=" + bad + " --text " + text + " --json " + none);
  CHECK(bad_line.exit_code == 1);
  CHECK(bad_line.output.find(bad + ":2: missing key 'sol2'") != std::string::npos);
  CHECK(bad_line.output.find("bits/byte") == std::string::npos);  // ppl did not run first
  const test::CommandResult no_heldout = test::run_command("cd " + s.path.string() + " && " + base + " --tasks ppl");
  CHECK(no_heldout.exit_code == 1);
  CHECK(no_heldout.output.find("data/raw/heldout/devil.txt is missing (scripts/fetch_data.sh --heldout") !=
        std::string::npos);
  CHECK_FALSE(fs::exists(none));
}
