// The `hylo` commands. Each add_<name>_command adds its subcommand to the root app with its flags
// (defaults shown in --help) and what it runs (cli/options.h has the conventions); its options
// live in a shared_ptr that the command's callback holds, so they outlive the function. Errors are
// thrown as hylo::Error and printed by main as one line.
#pragma once
#include <string>
#include <vector>

namespace CLI {
class App;
}

namespace hylo {

void add_train_command(CLI::App& app);     // cli/model_commands.cpp
void add_eval_command(CLI::App& app);      // cli/model_commands.cpp
void add_params_command(CLI::App& app);    // cli/model_commands.cpp
void add_export_command(CLI::App& app);    // cli/model_commands.cpp
void add_generate_command(CLI::App& app);  // cli/generate_command.cpp
void add_data_command(CLI::App& app);      // cli/data_commands.cpp: prepare, encode, decode, inspect, bench

// Not yet on CLI11: each takes the arguments after its name and returns the exit code.
using Args = std::vector<std::string>;
int run_sweep_command(const Args& args);       // cli/sweep_commands.cpp
int run_report_command(const Args& args);      // cli/sweep_commands.cpp
int run_bench_attention(const Args& args);     // cli/bench_attention.cpp
int run_bench_train(const Args& args);         // cli/bench_train.cpp
int run_bench_decode(const Args& args);        // cli/bench_decode.cpp
int run_bench_moe(const Args& args);           // cli/bench_moe.cpp

}  // namespace hylo
