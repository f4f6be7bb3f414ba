#!/usr/bin/env bash
# HERD_PGO, the profile-guided build's option: a wrong value and a missing profile stop the
# configure step with a message that names them; GENERATE instruments herd's objects and links,
# writing to HERD_PGO_DIR; USE reads that directory. (`HERD_PGO=1 scripts/setup.sh` runs the whole
# cycle; it takes twice a build, so the suite checks the configuration only.)
set -uo pipefail
src=$1 work=$2
rm -rf "$work"; mkdir -p "$work"
fast=(-G Ninja -DHERD_BUILD_TESTS=OFF -DHERD_BUILD_EXAMPLES=OFF -DHERD_BUILD_BENCHMARKS=OFF -DHERD_WITH_CUDA=OFF)
fail() { echo "pgo options: $*" >&2; exit 1; }

# expect_error NAME TEXT cmake-args...: the configure step fails and says TEXT
expect_error() {
  local name=$1 text=$2; shift 2
  local out
  if out=$(cmake -S "$src" -B "$work/$name" "${fast[@]}" "$@" 2>&1); then fail "$name: the configure step passed"; fi
  # CMake wraps long messages; compare with the line breaks and indentation folded away.
  local flat; flat=$(printf '%s' "$out" | tr -s ' \n' '  ')
  [[ $flat == *"$text"* ]] || fail "$name: no '$text' in: $out"
}
expect_error bogus "HERD_PGO is OFF, GENERATE or USE, not 'fast'" -DHERD_PGO=fast
expect_error no_profile "HERD_PGO=USE: no profile at $work/none;" -DHERD_PGO=USE -DHERD_PGO_DIR="$work/none"

profile=$work/profile
cmake -S "$src" -B "$work/generate" "${fast[@]}" -DHERD_PGO=GENERATE -DHERD_PGO_DIR="$profile" >/dev/null ||
  fail "GENERATE: the configure step failed"
n=$(grep -c -- "-fprofile-generate=$profile -fprofile-update=atomic" "$work/generate/build.ninja")
[ "$n" -gt 20 ] || fail "GENERATE: $n compile or link lines instrumented (want every layer's sources and the library)"
grep -q -- "-fprofile-generate=$profile" <(grep -A3 "^build libherd" "$work/generate/build.ninja") ||
  fail "GENERATE: libherd is not linked with -fprofile-generate"

mkdir -p "$profile"
cmake -S "$src" -B "$work/use" "${fast[@]}" -DHERD_PGO=USE -DHERD_PGO_DIR="$profile" >/dev/null || fail "USE: the configure step failed"
grep -q -- "-fprofile-use=$profile -fprofile-partial-training" "$work/use/build.ninja" || fail "USE: the sources do not read $profile"
# A source edited after the training: a warning naming it, not GCC's default error.
grep -q -- "-fprofile-use=$profile -fprofile-partial-training -Wno-missing-profile -Wno-error=coverage-mismatch" "$work/use/build.ninja" ||
  fail "USE: a source edited since the training would stop the build (no -Wno-error=coverage-mismatch)"
if grep -q -- "-fprofile-generate" "$work/use/build.ninja"; then fail "USE: still instrumented"; fi
rm -rf "$work"
echo "pgo options: ok"
