// The `hylo` commands. Each add_<name>_command adds its subcommand to the root app with its flags
// (defaults shown in --help) and what it runs (cli/options.h has the conventions); its options
// live in a shared_ptr that the command's callback holds, so they outlive the function. Errors are
// thrown as hylo::Error and printed by main as one line.
#pragma once

namespace CLI {
class App;
}

namespace hylo {

void add_train_command(CLI::App& app);     // cli/model_commands.cpp
void add_eval_command(CLI::App& app);      // cli/eval_command.cpp
void add_params_command(CLI::App& app);    // cli/model_commands.cpp
void add_export_command(CLI::App& app);    // cli/export_commands.cpp: --format hylo | hf
void add_import_command(CLI::App& app);    // cli/export_commands.cpp: a Hugging Face model as a run
void add_generate_command(CLI::App& app);  // cli/generate_command.cpp
void add_data_command(CLI::App& app);      // cli/data_commands.cpp: prepare, encode, decode, inspect, bench
void add_sweep_command(CLI::App& app);     // cli/sweep_commands.cpp
void add_report_command(CLI::App& app);    // cli/sweep_commands.cpp
void add_bench_command(CLI::App& app);     // cli/bench_commands.cpp: attention, decode, train, moe

}  // namespace hylo
