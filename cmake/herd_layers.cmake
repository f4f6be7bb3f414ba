# One OBJECT library per source folder of src/ ("layer"), linked together into libherd.
#
#   herd_layer(NAME [DEPS layer...] SOURCES file... [LIBS target...])
#     NAME      the folder src/NAME; the target is herd_layer_NAME
#     DEPS      the other layers whose headers NAME may include ("protocol/...", "common/...")
#     LIBS      third-party targets it needs beyond the common set
#   herd_check_layers()
#     reads every .hpp/.cpp of every layer and fails the configure step when one includes
#     "X/..." for a layer X that is neither itself nor in its DEPS. Public headers
#     (include/herd/...) are open to every layer: they are the API.
#
# HERD_LAYER_OBJECTS collects $<TARGET_OBJECTS:...> of every layer, for add_library(herd ...).
set(HERD_LAYER_OBJECTS "")
set(HERD_LAYERS "")

function(herd_layer name)
  cmake_parse_arguments(L "" "" "DEPS;SOURCES;LIBS" ${ARGN})
  add_library(herd_layer_${name} OBJECT ${L_SOURCES})
  set_target_properties(herd_layer_${name} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  # Nothing interposes libherd's own functions, so its calls to them may be inlined and bound
  # at link time (with -Bsymbolic-functions on the library): ~5 % of a round trip's CPU time.
  target_compile_options(herd_layer_${name} PRIVATE $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-fno-semantic-interposition>)
  target_include_directories(herd_layer_${name} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
  target_link_libraries(herd_layer_${name} PRIVATE msgpackc-cxx Threads::Threads cppzmq Boost::boost
                        CLI11::CLI11 herd_warnings ${L_LIBS})
  set(HERD_LAYER_DEPS_${name} "${L_DEPS}" PARENT_SCOPE)
  list(APPEND HERD_LAYERS ${name})
  set(HERD_LAYERS "${HERD_LAYERS}" PARENT_SCOPE)
  list(APPEND HERD_LAYER_OBJECTS $<TARGET_OBJECTS:herd_layer_${name}>)
  set(HERD_LAYER_OBJECTS "${HERD_LAYER_OBJECTS}" PARENT_SCOPE)
endfunction()

function(herd_check_layers)
  set(errors "")
  foreach(layer ${HERD_LAYERS})
    set(allowed ${layer} ${HERD_LAYER_DEPS_${layer}})
    file(GLOB files ${PROJECT_SOURCE_DIR}/src/${layer}/*.hpp ${PROJECT_SOURCE_DIR}/src/${layer}/*.cpp)
    # Re-run the check when a file of the layer changes.
    set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS ${files})
    foreach(file ${files})
      file(STRINGS ${file} includes REGEX "^[ \t]*#[ \t]*include[ \t]+\"[a-z_]+/")
      foreach(line ${includes})
        string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([a-z_]+)/.*" "\\1" target "${line}")
        if(target STREQUAL "herd")
          continue()
        endif()
        if(NOT target IN_LIST allowed)
          file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
          string(APPEND errors "\n  ${rel} includes \"${target}/...\", but layer '${layer}' may include only: ${allowed}")
        endif()
      endforeach()
    endforeach()
  endforeach()
  if(errors)
    message(FATAL_ERROR "herd: a layer includes one it does not depend on (see docs/architecture.md):${errors}")
  endif()
endfunction()
