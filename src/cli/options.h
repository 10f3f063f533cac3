// How the `hylo` commands declare their flags (CLI11), so that every command reads the same way:
// - a command is a subcommand made by add_command, and run_with sets what it does; a non-zero
//   return of that is hylo's exit code;
// - every option shows its default in --help, and `--flag value` and `--flag=value` both work;
// - a value that does not parse is a usage error (exit 2) naming the flag and the text, e.g.
//   "--steps needs a positive integer, got '0'"; main puts the command's name before it.
#pragma once
#include <CLI/CLI.hpp>

#include <charconv>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

namespace hylo::cli {

// The subcommand `name` of `parent` (the root app or a group such as `data`).
CLI::App* add_command(CLI::App& parent, const std::string& name, const std::string& description);

// What the command does once its flags are parsed; a non-zero return ends hylo with that code.
void run_with(CLI::App* command, std::function<int()> run);

// A group of commands (`data`, `bench`): given none, its usage goes to stderr and hylo exits 2.
void require_command(CLI::App* group);

// A flag combination or value refused after parsing: a usage error, exit 2, like CLI11's own.
[[noreturn]] void usage_error(const std::string& message);

// A value refused while parsing (what a validator throws: CLI11 passes it through unchanged).
[[noreturn]] void bad_value(const std::string& message);

// True when all of `text` is a T (an integer or floating-point type), stored in `value`.
template <class T>
bool parses_as(const std::string& text, T& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// A number flag: "--temperature needs a number, got 'warm'".
template <class T>
CLI::Option* add_number(CLI::App* app, const std::string& flag, T& value, const std::string& help) {
  static_assert(std::is_arithmetic_v<T>);
  return app->add_option(flag, value, help)->each([flag](const std::string& text) {
    T parsed{};
    if (!parses_as(text, parsed)) bad_value(flag + " needs a number, got '" + text + "'");
  });
}

// An integer flag that must be >= 1: "--steps needs a positive integer, got '0'".
template <class T>
CLI::Option* add_positive(CLI::App* app, const std::string& flag, T& value, const std::string& help) {
  static_assert(std::is_integral_v<T>);
  return add_number(app, flag, value, help)->each([flag](const std::string& text) {
    T parsed{};
    if (parses_as(text, parsed) && parsed < 1) bad_value(flag + " needs a positive integer, got '" + text + "'");
  });
}

// Comma-separated positive integers ("--batch 16,64"); the flag may also repeat.
CLI::Option* add_positive_list(CLI::App* app, const std::string& flag, std::vector<int>& values,
                               const std::string& help);

// One of `choices`: "--kind must be pbb, swa or full, got 'dense'".
CLI::Option* add_choice(CLI::App* app, const std::string& flag, std::string& value,
                        const std::vector<std::string>& choices, const std::string& help);
// Comma-separated choices ("--kind pbb,swa").
CLI::Option* add_choice_list(CLI::App* app, const std::string& flag, std::vector<std::string>& values,
                             const std::vector<std::string>& choices, const std::string& help);

// --set KEY=VALUE, repeatable: config overrides in the order given.
CLI::Option* add_overrides(CLI::App* app, std::vector<std::string>& overrides,
                           const std::string& help = "override a config key (train.lr=3e-4), repeatable");

// The one line hylo prints for a parse error of `root`'s command line, after "hylo: error: ":
// the command's name, then what was wrong, with a did-you-mean for an unknown flag or command.
std::string describe_parse_error(const CLI::App& root, const CLI::ParseError& error);

// "0.9.0 (git <revision>)".
std::string version_text();

}  // namespace hylo::cli
