# cmake -P check.cmake: installs the build tree this test runs in (the library
# it already built: no second build of the core), then configures, builds and
# runs tests/consumer against the installed package (find_package), and
# configures it through add_subdirectory of the source tree, checking that the
# build would make the consumer (a dry run: building it there would compile
# the whole core again, minutes on a loaded machine).
# Variables: SOURCE_DIR, BUILD_DIR, GENERATOR, CXX.
function(run)
  message(STATUS "consumer check: ${ARGV}")
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()

# docs/cpp.md shows tests/consumer/main.cc verbatim: the page's program is the
# one this test builds and runs.
file(READ ${SOURCE_DIR}/docs/cpp.md page)
file(READ ${SOURCE_DIR}/tests/consumer/main.cc program)
string(FIND "${page}" "```cpp\n${program}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "docs/cpp.md does not show tests/consumer/main.cc as it is")
endif()

file(REMOVE_RECURSE ${BUILD_DIR})
get_filename_component(tree ${BUILD_DIR} DIRECTORY)
run(${CMAKE_COMMAND} --install ${tree} --prefix ${BUILD_DIR}/prefix)
file(GLOB_RECURSE internal_headers ${BUILD_DIR}/prefix/include/shardkit/*/internal/*)
if(internal_headers OR NOT EXISTS ${BUILD_DIR}/prefix/include/shardkit/loader/loader_state.h)
  message(FATAL_ERROR "internal/ headers were installed, or public ones were not")
endif()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${BUILD_DIR}/installed -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${BUILD_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${BUILD_DIR}/installed)
execute_process(COMMAND ${BUILD_DIR}/installed/consumer WORKING_DIRECTORY ${BUILD_DIR}
                RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "the installed-package consumer failed (${rc})")
endif()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${BUILD_DIR}/subdir -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DSHARDKIT_SOURCE_DIR=${SOURCE_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR}/subdir --target consumer -- -n
                RESULT_VARIABLE rc OUTPUT_VARIABLE plan ERROR_VARIABLE plan)
if(NOT rc EQUAL 0 OR NOT plan MATCHES "shardkit_core" OR NOT plan MATCHES "consumer")
  message(FATAL_ERROR "the add_subdirectory build would not make the consumer (${rc}):\n${plan}")
endif()
