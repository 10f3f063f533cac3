// `hylo export --format hf`: a checkpoint's model as a Hugging Face model directory that
// AutoModelForCausalLM.from_pretrained and AutoTokenizer.from_pretrained load
// (checkpoint/hf_format.h says which class per model and why):
//   config.json              the class's config (plus "hylo": the step, source and hylo's own
//                            config, which `hylo import` restores)
//   model.safetensors        every parameter under transformers' names, the fused gate|up
//                            projections split in two; MoE router biases f32
//   generation_config.json   <|endoftext|> (50256) as bos, eos and pad; the embedding's padding
//                            rows (ids 50257..vocab_size-1, no tokens) suppressed, as hylo never
//                            samples them
//   vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json   GPT-2's tokenizer,
//                            derived from the tiktoken rank file (checkpoint/hf_tokenizer_files.h)
//   modeling_hylo.py         PBB and MoE models only (trust_remote_code)
//   probe.safetensors        hylo's fp32 CPU logits (T, vocab_size) on fixed token ids (metadata
//                            "ids", and "text" whose tokens begin them), with the weights as
//                            exported, for scripts/check_hf.py
// The model of `loaded` must be on the CPU; a bf16 export rounds its parameters in place. Nothing
// is written before everything is computed; each file is written to a temporary name and renamed.
#pragma once
#include <string>
#include <vector>

#include "checkpoint/hf_format.h"
#include "checkpoint/model_checkpoint.h"
#include "core/dtype.h"
#include "data/tokenizer.h"

namespace hylo {

struct HfExportOptions {
  std::string out_dir;
  std::string tokenizer = "data/tokenizer/r50k_base.tiktoken";
  DType dtype = DType::f32;  // f32 or bf16
  bool overwrite = false;    // replace the files of an earlier export in out_dir
};

HfModelClass export_hf(const LoadedModel& loaded, const HfExportOptions& options);

// The probe's token ids: the tokens of a fixed English text, repeated to `count`.
std::vector<int32_t> hf_probe_ids(const data::Tokenizer& tokenizer, int count);
extern const char* const kHfProbeText;

}  // namespace hylo
