// Standard tasks read from users' own files in their public JSON-lines formats (SPEC §5), turned
// into the (context, continuation) requests lm-evaluation-harness builds for them: zero-shot, target
// delimiter " " (lm_eval/tasks/<task>/ in lm-evaluation-harness):
//
//   lambada, lambada_openai, lambada_standard (lambada/lambada_openai.yaml): {"text"}. Context: the
//     text up to its last space; continuation: " " + the last word. Output: loglikelihood.
//   hellaswag (hellaswag/hellaswag.yaml, utils.py): {"activity_label", "ctx_a", "ctx_b", "endings",
//     "label"}. Context: preprocess(activity_label + ": " + ctx_a + " " + ctx_b.capitalize()), or
//     with "ctx" for ctx_a/ctx_b when a line has no ctx_a; choices: preprocess(ending), where
//     preprocess strips, turns " [title]" into ". ", drops [bracketed] runs and then "  " -> " ".
//   piqa (piqa/piqa.yaml): {"goal", "sol1", "sol2", "label"}. Context: "Question: " + goal +
//     "\nAnswer:"; choices: sol1, sol2. The original release keeps labels in a file beside the
//     questions (valid.jsonl + valid-labels.lst, one 0/1 a line): read when the lines have no label.
//   arc_easy, arc_challenge (arc/arc_easy.yaml): {"question", "choices": {"text": [...],
//     "label": [...]}, "answerKey"}, or AI2's original {"question": {"stem", "choices": [{"text",
//     "label"}]}, "answerKey"}. Context: "Question: " + question + "\nAnswer:"; choices: the texts.
//   winogrande (winogrande/default.yaml, preprocess_winogrande.py): {"sentence", "option1",
//     "option2", "answer"}. One context per option: the sentence up to its "_" + the option;
//     continuation: " " + the rest of the sentence after "_", stripped. Reports acc only.
//
// Multiple-choice requests are (context, " " + choice). The gold index is "label" / answerKey's
// place / answer - 1; labels may be numbers or numeric strings, as the various releases write them.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace hylo {

enum class TaskOutput { loglikelihood, multiple_choice };

struct TaskDoc {
  std::vector<std::pair<std::string, std::string>> requests;  // (context, continuation), one per choice
  std::vector<int64_t> choice_chars;  // multiple choice: len(choice) in characters, acc_norm's divisor
  int gold = 0;                       // multiple choice: the right request
};

struct TaskData {
  std::string name, path;
  std::string format;  // lambada, hellaswag, piqa, arc, winogrande
  TaskOutput output = TaskOutput::multiple_choice;
  bool acc_norm = false;  // lm-eval reports acc_norm for the task
  int64_t original = 0;   // documents in the file; docs holds the first `limit` of them
  std::vector<TaskDoc> docs;
};

// The task names read_task knows, in the order the error message lists them.
const std::vector<std::string>& standard_task_names();
bool is_standard_task(const std::string& name);

// Reads `path` (one JSON object a line; blank lines skipped) as task `name`'s format. Bad input is a
// one-line error naming the file and line: not JSON, a missing key, a wrong type, a label that is no
// choice. limit > 0 keeps the first `limit` documents (lm-eval's --limit); every line is still checked.
TaskData read_task(const std::string& name, const std::string& path, int64_t limit = 0);

}  // namespace hylo
