#include "cli/options.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>

#include "core/revision.h"
#include "core/suggest.h"

namespace hylo::cli {

namespace {

// "pbb, swa or full".
std::string either(const std::vector<std::string>& choices) {
  if (choices.size() < 2) return fmt::format("{}", fmt::join(choices, ""));
  return fmt::format("{} or {}", fmt::join(choices.begin(), choices.end() - 1, ", "), choices.back());
}

std::function<void(const std::string&)> choice_check(const std::string& flag, const std::vector<std::string>& choices) {
  return [flag, choices](const std::string& text) {
    if (std::find(choices.begin(), choices.end(), text) == choices.end())
      bad_value(fmt::format("{} must be {}, got '{}'", flag, either(choices), text));
  };
}

// "bench train" for that subcommand, "" for the root.
std::string command_path(const CLI::App& app) {
  std::string path;
  for (const CLI::App* a = &app; a->get_parent() != nullptr; a = a->get_parent())
    path = path.empty() ? a->get_name() : a->get_name() + " " + path;
  return path;
}

// The last command named on the command line (the root when none is).
const CLI::App* chosen_command(const CLI::App& root) {
  const CLI::App* app = &root;
  while (!app->get_subcommands().empty()) app = app->get_subcommands().front();
  return app;
}

// What CLI11 found no place for, told about where it was found.
std::string describe_extras(const CLI::App& app) {
  const std::vector<std::string> extras = app.remaining();
  const std::string& arg = extras.front();
  if (arg.starts_with("-")) {
    const std::string flag = arg.substr(0, arg.find('='));
    std::vector<std::string> flags;
    for (const CLI::Option* option : app.get_options())
      for (const std::string& name : option->get_lnames()) flags.push_back("--" + name);
    return fmt::format("unknown flag '{}'{}", flag, did_you_mean(flag, flags));
  }
  const std::vector<const CLI::App*> subcommands = app.get_subcommands({});
  if (subcommands.empty()) return fmt::format("unexpected argument '{}'", arg);
  std::vector<std::string> names;
  for (const CLI::App* sub : subcommands) names.push_back(sub->get_name());
  const std::string near = did_you_mean(arg, names);
  return fmt::format("unknown command '{}'{}", arg,
                     near.empty() ? fmt::format(" (commands: {})", fmt::join(names, ", ")) : near);
}

}  // namespace

CLI::App* add_command(CLI::App& parent, const std::string& name, const std::string& description) {
  CLI::App* command = parent.add_subcommand(name, description);
  command->option_defaults()->always_capture_default();
  return command;
}

void run_with(CLI::App* command, std::function<int()> run) {
  command->callback([run = std::move(run)] {
    if (const int rc = run(); rc != 0) throw CLI::RuntimeError(rc);  // main returns it as it is
  });
}

void require_command(CLI::App* group) {
  group->callback([group] {
    if (!group->get_subcommands().empty()) return;
    std::string parents;  // "hylo": the usage line names the whole command
    for (const CLI::App* a = group->get_parent(); a != nullptr; a = a->get_parent())
      parents = parents.empty() ? a->get_name() : a->get_name() + " " + parents;
    std::fputs(group->help(parents).c_str(), stderr);
    throw CLI::RuntimeError(2);
  });
}

void usage_error(const std::string& message) { throw CLI::ValidationError(message, CLI::ExitCodes::ValidationError); }

void bad_value(const std::string& message) { throw CLI::ConversionError(message); }

CLI::Option* add_positive_list(CLI::App* app, const std::string& flag, std::vector<int>& values,
                               const std::string& help) {
  return app->add_option(flag, values, help)->delimiter(',')->allow_extra_args(false)->each([flag](const std::string& text) {
    int parsed = 0;
    if (!parses_as(text, parsed)) bad_value(flag + " needs a number, got '" + text + "'");
    if (parsed < 1) bad_value(flag + " needs a positive integer, got '" + text + "'");
  });
}

CLI::Option* add_choice(CLI::App* app, const std::string& flag, std::string& value,
                        const std::vector<std::string>& choices, const std::string& help) {
  return app->add_option(flag, value, fmt::format("{} ({})", help, fmt::join(choices, "|")))
      ->each(choice_check(flag, choices));
}

CLI::Option* add_choice_list(CLI::App* app, const std::string& flag, std::vector<std::string>& values,
                             const std::vector<std::string>& choices, const std::string& help) {
  return app->add_option(flag, values, fmt::format("{} (comma-separated: {})", help, fmt::join(choices, ",")))
      ->delimiter(',')
      ->allow_extra_args(false)
      ->each(choice_check(flag, choices));
}

CLI::Option* add_overrides(CLI::App* app, std::vector<std::string>& overrides, const std::string& help) {
  // One value per --set: a config path after it stays a positional.
  return app->add_option("--set", overrides, help)->allow_extra_args(false)->type_name("KEY=VALUE")->default_str("");
}

std::string describe_parse_error(const CLI::App& root, const CLI::ParseError& error) {
  const CLI::App* app = chosen_command(root);
  std::string what = error.what();
  if (dynamic_cast<const CLI::ExtrasError*>(&error)) {
    // The extras are kept by the command that met them: the deepest one that has any.
    for (const CLI::App* a = app; a != nullptr; a = a->get_parent())
      if (!a->remaining().empty()) {
        app = a;
        what = describe_extras(*a);
        break;
      }
  }
  const std::string path = command_path(*app);
  return path.empty() ? what : path + ": " + what;
}

std::string version_text() { return fmt::format("{} (git {})", hylo_version(), git_revision()); }

}  // namespace hylo::cli
