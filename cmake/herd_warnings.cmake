# herd_warnings: one interface target every herd target links, so warnings are set in one place.
add_library(herd_warnings INTERFACE)
# -Wno-restrict: GCC 12 reports a false -Wrestrict inside libstdc++'s std::string assignment
# (GCC bug 105329), which -Werror would turn into a build failure.
target_compile_options(herd_warnings INTERFACE -Wall -Wextra -Wshadow -Wno-unused-parameter
                       $<$<CXX_COMPILER_ID:GNU>:-Wno-restrict>)
if(HERD_WERROR)
  target_compile_options(herd_warnings INTERFACE -Werror)
endif()
install(TARGETS herd_warnings EXPORT herdTargets)
