# herd_warnings: one interface target every herd target links, so warnings are set in one place.
add_library(herd_warnings INTERFACE)
# -Wno-restrict, -Wno-array-bounds, -Wno-stringop-overflow: GCC 12 reports false -Wrestrict,
# -Warray-bounds and -Wstringop-overflow inside libstdc++'s std::string assignment and
# operator+ once they are inlined (GCC bugs 105329, 105651); which call sites it flags moves
# with inlining (precompiled headers moved them), and -Werror would make them build failures.
target_compile_options(herd_warnings INTERFACE -Wall -Wextra -Wshadow -Wno-unused-parameter
                       "$<$<AND:$<CXX_COMPILER_ID:GNU>,$<VERSION_LESS:$<CXX_COMPILER_VERSION>,13>>:-Wno-restrict;-Wno-array-bounds;-Wno-stringop-overflow>")
# A unity build (CMAKE_UNITY_BUILD) includes each source file into a generated one, where GCC
# reads a class with a member of a type from the file's anonymous namespace as a header's class
# that uses another file's private type (-Wsubobject-linkage): true of headers, not of these.
if(CMAKE_UNITY_BUILD)
  target_compile_options(herd_warnings INTERFACE "$<$<CXX_COMPILER_ID:GNU>:-Wno-subobject-linkage>")
endif()
# HERD_WERROR: ON, OFF or AUTO. AUTO is ON where the code is known to build without a warning:
# herd built on its own (not inside another project, whose flags it does not know) with GCC 12,
# Debian 12's compiler, which CI builds with. So there the first command (scripts/setup.sh) and
# the test command build with the same flags, and the second reuses what the first built; other
# compilers' new warnings do not stop a user's build. HERD_WERROR_ACTIVE says what it came to.
if(HERD_WERROR STREQUAL "AUTO")
  set(herd_werror OFF)
  if(CMAKE_SOURCE_DIR STREQUAL PROJECT_SOURCE_DIR AND CMAKE_CXX_COMPILER_ID STREQUAL "GNU"
     AND CMAKE_CXX_COMPILER_VERSION VERSION_GREATER_EQUAL 12 AND CMAKE_CXX_COMPILER_VERSION VERSION_LESS 13)
    set(herd_werror ON)
  endif()
elseif(HERD_WERROR)
  set(herd_werror ON)
else()
  set(herd_werror OFF)
endif()
set(HERD_WERROR_ACTIVE ${herd_werror} CACHE INTERNAL "-Werror is on (HERD_WERROR resolved)")
if(HERD_WERROR_ACTIVE)
  target_compile_options(herd_warnings INTERFACE -Werror)
endif()
install(TARGETS herd_warnings EXPORT herdTargets)
