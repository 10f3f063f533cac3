// hylo: pretraining hybrid local/global attention language models. One CLI::App whose subcommands
// are the commands (cli/commands.h). Exit codes: 0 done (and --help, --version); 1 a runtime error
// (a bad config, a missing file, a failed run), printed as one line "hylo: error: ..."; 2 a usage
// error (an unknown command or flag, a bad flag value, no command at all).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "cli/commands.h"
#include "cli/options.h"
#include "parallel/communicator.h"

int main(int argc, char** argv) {
  CLI::App app{"hylo: pretraining hybrid local/global attention language models", "hylo"};
  app.set_version_flag("--version", "hylo " + hylo::cli::version_text());
  app.require_subcommand(0, 1);
  hylo::add_train_command(app);
  hylo::add_eval_command(app);
  hylo::add_params_command(app);
  hylo::add_generate_command(app);
  hylo::add_export_command(app);
  hylo::add_import_command(app);
  hylo::add_data_command(app);
  hylo::add_sweep_command(app);
  hylo::add_report_command(app);
  hylo::add_bench_command(app);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) {  // no command: what there is to run
      std::fputs(app.help().c_str(), stderr);
      return 2;
    }
    return 0;
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit code, already explained
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "hylo: error: %s\n", hylo::cli::describe_parse_error(app, e).c_str());
    std::fflush(stderr);
    hylo::dist::abort_job(2);
    return 2;
  } catch (const std::exception& e) {  // hylo::Error and the rest
    std::fprintf(stderr, "hylo: error: %s\n", e.what());
    std::fflush(stderr);
    hylo::dist::abort_job(1);  // the other ranks of a parallel job would wait for this one forever
    return 1;
  }
}
