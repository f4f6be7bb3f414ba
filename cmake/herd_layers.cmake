# One OBJECT library per source folder of src/ ("layer"), linked together into libherd.
#
#   herd_layer(NAME [DEPS layer...] SOURCES file... [LIBS target...])
#     NAME      the folder src/NAME; the target is herd_layer_NAME
#     DEPS      the other layers whose headers NAME may include ("protocol/...", "common/...")
#     LIBS      third-party targets it needs beyond the common set
#   herd_check_layers()
#     reads every .hpp/.cpp of every layer and fails the configure step when one includes
#     "X/..." for a layer X that is neither itself nor in its DEPS, or "herd/detail/H" for a
#     header H whose owning layer (HERD_DETAIL_OWNERS below) it may not include. The other public
#     headers (include/herd/*.hpp) are open to every layer: they are the API.
#
# HERD_LAYER_OBJECTS collects $<TARGET_OBJECTS:...> of every layer, for add_library(herd ...).
set(HERD_LAYER_OBJECTS "")
set(HERD_LAYERS "")

# herd_includes(FILE HEADER OUT): OUT is ON when FILE includes "HEADER" (as written, e.g.
# "protocol/messages.hpp"), itself or through the headers of src/ and include/ it includes.
function(herd_includes file header out)
  string(MD5 key "${file}|${header}")
  get_property(known GLOBAL PROPERTY HERD_INCLUDES_${key} SET)
  if(known)
    get_property(value GLOBAL PROPERTY HERD_INCLUDES_${key})
    set(${out} ${value} PARENT_SCOPE)
    return()
  endif()
  set_property(GLOBAL PROPERTY HERD_INCLUDES_${key} OFF)  # an include cycle ends here
  set(value OFF)
  file(STRINGS ${file} lines REGEX "^[ \t]*#[ \t]*include[ \t]+[\"<][a-z_]+/[a-z_0-9/]+\\.hpp[\">]")
  foreach(line ${lines})
    string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+[\"<]([^\">]+)[\">].*" "\\1" included "${line}")
    if(included STREQUAL header)
      set(value ON)
      break()
    endif()
    foreach(root ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/include)
      if(EXISTS ${root}/${included})
        herd_includes(${root}/${included} ${header} through)
        if(through)
          set(value ON)
          break()
        endif()
      endif()
    endforeach()
    if(value)
      break()
    endif()
  endforeach()
  set_property(GLOBAL PROPERTY HERD_INCLUDES_${key} ${value})
  set(${out} ${value} PARENT_SCOPE)
endfunction()

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
  # The wire protocol's header (msgpack and ~150 message types) is ~8 s of parsing in every
  # file that includes it: compiled once, in the protocol layer, and reused by the files of the
  # other layers that include it (directly or through a header of src/). The others do without:
  # a precompiled header forced into a file that does not need it makes that file slower (the
  # header's pending template instantiations are done again in every file). GCC takes a
  # precompiled header whenever no macro it uses is defined differently (cpp-httplib's and
  # CUDA's definitions in some layers are not), and otherwise parses the header as usual.
  set(any_user OFF)
  foreach(source ${L_SOURCES})
    if(source MATCHES "\\.cpp$")
      herd_includes(${PROJECT_SOURCE_DIR}/${source} "protocol/messages.hpp" uses)
      if(uses)
        set(any_user ON)
      else()
        set_source_files_properties(${source} PROPERTIES SKIP_PRECOMPILE_HEADERS ON)
      endif()
    endif()
  endforeach()
  if(name STREQUAL "protocol")
    target_precompile_headers(herd_layer_${name} PRIVATE
                              "$<$<COMPILE_LANGUAGE:CXX>:${PROJECT_SOURCE_DIR}/src/protocol/messages.hpp>")
  elseif(any_user)  # herd_check_layers() fails a layer that includes protocol/ without the DEPS
    target_precompile_headers(herd_layer_${name} REUSE_FROM herd_layer_protocol)
  endif()
  set(HERD_LAYER_DEPS_${name} "${L_DEPS}" PARENT_SCOPE)
  list(APPEND HERD_LAYERS ${name})
  set(HERD_LAYERS "${HERD_LAYERS}" PARENT_SCOPE)
  list(APPEND HERD_LAYER_OBJECTS $<TARGET_OBJECTS:herd_layer_${name}>)
  set(HERD_LAYER_OBJECTS "${HERD_LAYER_OBJECTS}" PARENT_SCOPE)
endfunction()

# Who owns each header of include/herd/detail/ (internals the public templates need): a layer
# may include one only when it may include its owner. A new detail header must be listed here.
set(HERD_DETAIL_OWNERS
  "client_core.hpp=client"      # the client's non-template half
  "payload.hpp=net"             # the bytes of a result, below the worker and the client
  "scratch_zone.hpp=protocol")  # msgpack zones lent per thread, for decoding

function(herd_check_layers)
  set(errors "")
  file(GLOB detail_headers RELATIVE ${PROJECT_SOURCE_DIR}/include/herd/detail ${PROJECT_SOURCE_DIR}/include/herd/detail/*.hpp)
  foreach(header ${detail_headers})
    set(owner "")
    foreach(entry ${HERD_DETAIL_OWNERS})
      if(entry MATCHES "^${header}=(.*)$")
        set(owner ${CMAKE_MATCH_1})
      endif()
    endforeach()
    if(owner STREQUAL "")
      string(APPEND errors "\n  include/herd/detail/${header} has no owning layer: list it in HERD_DETAIL_OWNERS (cmake/herd_layers.cmake)")
    endif()
    set(HERD_DETAIL_OWNER_${header} ${owner})
  endforeach()
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
          if(line MATCHES "\"herd/detail/([a-z_]+\\.hpp)\"")
            set(header ${CMAKE_MATCH_1})
            set(owner "${HERD_DETAIL_OWNER_${header}}")
            if(owner STREQUAL "")
              file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
              string(APPEND errors "\n  ${rel} includes \"herd/detail/${header}\", which no layer owns")
            elseif(NOT owner IN_LIST allowed)
              file(RELATIVE_PATH rel ${PROJECT_SOURCE_DIR} ${file})
              string(APPEND errors "\n  ${rel} includes \"herd/detail/${header}\", owned by layer '${owner}', but layer '${layer}' may include only: ${allowed}")
            endif()
          endif()
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
