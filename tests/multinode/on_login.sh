#!/bin/sh
# The CROSSCOMPILING_EMULATOR of the multinode tests: ctest runs every test case "on the login
# node" of the multi-node test bed, i.e. `scripts/local-slurm.sh exec login -- TEST ARGS...`.
#   on_login.sh /path/to/scripts/local-slurm.sh TEST ARGS...
# doctest_discover_tests also runs the test executable through the emulator, at build time, to
# list its test cases: that needs no cluster, so it runs here. Without a running bed a test
# exits 77 (ctest: skipped), unless HERD_REQUIRE_SLURM is set (scripts/test.sh): then it fails.
script=$1
shift
case " $* " in
    *" --list-test-cases "* | *" --list-test-suites "*) exec "$@" ;;
esac
if ! "$script" exec login -- true >/dev/null 2>&1; then
    if [ -n "${HERD_REQUIRE_SLURM:-}" ]; then
        echo "on_login.sh: the multi-node test bed is not running ($script start --nodes 3)" >&2
        exit 1
    fi
    echo "skipped: the multi-node test bed is not running ($script start --nodes 3)"
    exit 77
fi
exec "$script" exec login -- "$@"
