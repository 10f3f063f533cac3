#include "core/suggest.h"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

namespace hylo {

size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::string nearest_choice(std::string_view word, std::span<const std::string> choices, size_t max_distance) {
  std::string best;
  size_t best_d = max_distance + 1;
  for (const std::string& choice : choices)
    if (const size_t d = edit_distance(word, choice); d < best_d) best_d = d, best = choice;
  return best;
}

std::string did_you_mean(const std::string& word, std::span<const std::string> choices) {
  for (const auto& choice : choices)  // an abbreviation: --val-frac for --val-fraction
    if (word.size() >= 3 && choice.starts_with(word)) return fmt::format(" (did you mean '{}'?)", choice);
  const std::string near = nearest_choice(word, choices, std::max<size_t>(2, word.size() / 3));
  return near.empty() ? "" : fmt::format(" (did you mean '{}'?)", near);
}

}  // namespace hylo
