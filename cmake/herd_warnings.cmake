# herd_warnings: one interface target every herd target links, so warnings are set in one place.
add_library(herd_warnings INTERFACE)
target_compile_options(herd_warnings INTERFACE -Wall -Wextra -Wshadow -Wno-unused-parameter)
if(HERD_WERROR)
  target_compile_options(herd_warnings INTERFACE -Werror)
endif()
install(TARGETS herd_warnings EXPORT herdTargets)
