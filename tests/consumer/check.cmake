# cmake -P check.cmake: installs the build tree this test runs in, then
# configures, builds and runs tests/consumer twice: against the installed
# package (find_package) and through add_subdirectory of the source tree.
# Variables: SOURCE_DIR, BUILD_DIR, GENERATOR, CXX.
function(run)
  execute_process(COMMAND ${ARGV} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "failed (${rc}): ${ARGV}")
  endif()
endfunction()

file(REMOVE_RECURSE ${BUILD_DIR})
get_filename_component(tree ${BUILD_DIR} DIRECTORY)
run(${CMAKE_COMMAND} --install ${tree} --prefix ${BUILD_DIR}/prefix)
if(EXISTS ${BUILD_DIR}/prefix/include/shardkit/packing/internal)
  message(FATAL_ERROR "internal/ headers were installed")
endif()

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${BUILD_DIR}/installed -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${BUILD_DIR}/prefix)
run(${CMAKE_COMMAND} --build ${BUILD_DIR}/installed)
run(${BUILD_DIR}/installed/consumer)

run(${CMAKE_COMMAND} -S ${SOURCE_DIR}/tests/consumer -B ${BUILD_DIR}/subdir -G ${GENERATOR}
    -DCMAKE_CXX_COMPILER=${CXX} -DSHARDKIT_SOURCE_DIR=${SOURCE_DIR})
run(${CMAKE_COMMAND} --build ${BUILD_DIR}/subdir)
run(${BUILD_DIR}/subdir/consumer)
