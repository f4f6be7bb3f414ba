// Owns the tests' precompiled header (tests/CMakeLists.txt: herd_test_pch); compiles nothing.
