#!/usr/bin/env bash
# herd as a cluster admin installs it: `cpack -G DEB` makes herd_<version>_<arch>.deb with its
# declared dependencies; `apt-get install ./herd_*.deb` installs it; the installed herd prints
# its version, runs a scheduler with a local worker, scales its pool from the shell and runs a
# one-command job there (`herd sweep` of one trial: `herd submit` is another change's); the
# package's files are all there (binary, library, headers, CMake package, modulefile); then it
# is removed and nothing of it stays. Needs root or sudo (apt-get), as a package install does.
set -euo pipefail
src=$1 build=$2 work=$3
rm -rf "$work"; mkdir -p "$work"
SUDO=; [ "$(id -u)" -eq 0 ] || SUDO=sudo
fail() { echo "deb check: $*" >&2; exit 1; }

version=$(sed -n 's/^CMAKE_PROJECT_VERSION:STATIC=//p' "$build/CMakeCache.txt")
(cd "$work" && cpack -G DEB --config "$build/CPackConfig.cmake" -B "$work" >"$work/cpack.log" 2>&1) ||
  { cat "$work/cpack.log" >&2; fail "cpack -G DEB failed"; }
shopt -s nullglob
debs=("$work"/herd_"$version"_*.deb)
((${#debs[@]} == 1)) || fail "expected one herd_${version}_*.deb in $work, found: $(ls "$work")"
deb=${debs[0]}

# Declared dependencies: the shared libraries herd links (found by dpkg-shlibdeps) and msgpack's
# headers for find_package(herd).
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
for d in libc6 libstdc++6 libzmq5 libsodium23 libssl3 libmsgpack-cxx-dev; do
  [[ ", $depends," == *", $d"[\ ,]* ]] || fail "Depends lacks $d: $depends"
done
contents=$(dpkg-deb -c "$deb" | awk '{print $NF}')
for f in ./usr/bin/herd ./usr/include/herd/herd.hpp ./usr/lib/cmake/herd/herdConfig.cmake \
         "./usr/share/modulefiles/herd/$version.lua"; do
  grep -qx -- "$f" <<<"$contents" || fail "the package lacks $f"
done
grep -q '^\./usr/lib/libherd\.so' <<<"$contents" || fail "the package lacks libherd.so"

# One package install at a time on this machine (another checkout's test may be at it).
exec 9>/tmp/herd-deb-install.lock
flock 9
if dpkg-query -W -f='${Status}' herd 2>/dev/null | grep -q "install ok installed"; then
  fail "a herd package is installed already (dpkg -r herd first); this test installs and removes its own"
fi
cleanup() { DEBIAN_FRONTEND=noninteractive $SUDO apt-get purge -y -qq herd >/dev/null 2>&1 || true; }
trap 'kill "${sched:-}" 2>/dev/null || true; cleanup' EXIT
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "$deb" >"$work/apt.log" 2>&1 ||
  { cat "$work/apt.log" >&2; fail "apt-get install $deb failed"; }

herd=/usr/bin/herd
out=$(env -i PATH=/usr/bin:/bin HOME="$HOME" "$herd" version)
[[ "$out" =~ ^herd\ $version\ \(wire\ protocol\ [0-9]+\)$ ]] || fail "installed herd version printed '$out'"
lib=$(ldd "$herd" | awk '/libherd/ {print $3}')
[ "$(readlink -f "$lib")" = "/usr/lib/libherd.so.$version" ] || fail "installed herd does not load /usr/lib/libherd.so: $(ldd "$herd")"

# A scheduler of the installed herd, one local worker; the pool scaled to 2 from the shell; a
# one-command job run on its workers.
cd "$work"
env -i PATH=/usr/bin:/bin HOME="$HOME" "$herd" scheduler --local-workers 1 --no-dashboard \
  --log-dir "$work/logs/nested" >"$work/scheduler.out" 2>&1 &
sched=$!
address=
for _ in $(seq 1 100); do
  address=$(grep -o 'tcp://127\.0\.0\.1:[0-9]*' "$work/scheduler.out" | head -1 || true)
  [ -n "$address" ] && break
  sleep 0.2
done
[ -n "$address" ] || { cat "$work/scheduler.out" >&2; fail "the installed scheduler printed no address"; }
[ -d "$work/logs/nested" ] || fail "--log-dir $work/logs/nested was not made"
scale=$(env -i PATH=/usr/bin:/bin HOME="$HOME" "$herd" scale local 2 --scheduler "$address")
echo "$scale"
grep -q '^pool local: 1 → 2 workers' <<<"$scale" || fail "herd scale printed: $scale"
env -i PATH=/usr/bin:/bin HOME="$HOME" "$herd" sweep --scheduler "$address" --grid x=7 --progress none -q \
  --results "$work/sweep" -- sh -c "echo ran {x} > '$work/job.out'" >"$work/sweep.log" 2>&1 ||
  { cat "$work/sweep.log" >&2; fail "the installed herd's job failed"; }
[ "$(cat "$work/job.out")" = "ran 7" ] || fail "the job wrote '$(cat "$work/job.out" 2>/dev/null)'"
kill "$sched"; wait "$sched" 2>/dev/null || true
sched=

# Removed: nothing of it stays.
DEBIAN_FRONTEND=noninteractive $SUDO apt-get purge -y -qq herd >"$work/remove.log" 2>&1 ||
  { cat "$work/remove.log" >&2; fail "apt-get remove herd failed"; }
[ ! -e /usr/bin/herd ] && [ ! -e /usr/lib/libherd.so ] && [ ! -e /usr/include/herd ] || fail "files of herd stayed after removal"
trap - EXIT
echo "deb check: $(basename "$deb") installed, ran a job, removed"
