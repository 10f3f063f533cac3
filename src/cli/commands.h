// Subcommands of the `hylo` executable; each takes the arguments after its name and returns the
// process exit code. Errors are thrown as hylo::Error and printed by main as one line.
#pragma once
#include <string>
#include <vector>

namespace hylo {

using Args = std::vector<std::string>;

int run_train_command(const Args& args);
int run_eval_command(const Args& args);
int run_params_command(const Args& args);
int run_export_command(const Args& args);
int run_generate_command(const Args& args);    // cli/generate_command.cpp
int run_data_command(const Args& args);        // cli/data_commands.cpp
int run_sweep_command(const Args& args);       // cli/sweep_commands.cpp
int run_report_command(const Args& args);      // cli/sweep_commands.cpp
int run_bench_attention(const Args& args);     // cli/bench_attention.cpp
int run_bench_train(const Args& args);         // cli/bench_train.cpp
int run_bench_decode(const Args& args);        // cli/bench_decode.cpp
int run_bench_moe(const Args& args);           // cli/bench_moe.cpp

}  // namespace hylo
