// "Did you mean" help for mistyped keys, options and names.
#pragma once
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace hylo {

// Levenshtein distance: each inserted, deleted or replaced character costs 1.
size_t edit_distance(std::string_view a, std::string_view b);

// The choice nearest to `word` by edit distance (the first of equals), or "" when even that one
// is more than `max_distance` away.
std::string nearest_choice(std::string_view word, std::span<const std::string> choices, size_t max_distance);

// " (did you mean 'CHOICE'?)" for a choice that `word` abbreviates (3 characters or more) or is
// near by edit distance (within a third of its length, at least 2), else "": an error's suffix.
std::string did_you_mean(const std::string& word, std::span<const std::string> choices);

}  // namespace hylo
