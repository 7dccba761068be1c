# Install the build tree to a fresh prefix, then configure, build and run the consumer project
# against it. Variables: BUILD_DIR, CONSUMER_DIR, WORK_DIR, GENERATOR, CXX; CONSUMER_ARGS (a
# list of -D… for the consumer's configure); EXPECT (a regex its configure output must match, white space runs as one space);
# EXPECT_CONFIGURE_FAIL (the configure must fail, with EXPECT in its output).
file(REMOVE_RECURSE ${WORK_DIR})
execute_process(COMMAND ${CMAKE_COMMAND} --install ${BUILD_DIR} --prefix ${WORK_DIR}/prefix
                RESULT_VARIABLE rc OUTPUT_QUIET)
if(rc)
  message(FATAL_ERROR "install failed: ${rc}")
endif()
string(REPLACE "|" ";" args "${CONSUMER_ARGS}")
# The build's compiler launcher (ccache), so that a warm run does not compile the consumer again.
if(LAUNCHER)
  list(APPEND args -DCMAKE_CXX_COMPILER_LAUNCHER=${LAUNCHER})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S ${CONSUMER_DIR} -B ${WORK_DIR}/build -G ${GENERATOR}
                        -DCMAKE_CXX_COMPILER=${CXX} -DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix
                        -DCMAKE_BUILD_TYPE=Release ${args}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "consumer configure:\n${out}${err}")
# CMake wraps a message's lines at its own width: match with runs of white space made one space.
string(REGEX REPLACE "[ \t\r\n]+" " " flat "${out}${err}")
if(EXPECT AND NOT flat MATCHES "${EXPECT}")
  message(FATAL_ERROR "the consumer's configure output does not match '${EXPECT}'")
endif()
if(EXPECT_CONFIGURE_FAIL)
  if(NOT rc)
    message(FATAL_ERROR "configuring the consumer should have failed")
  endif()
  message(STATUS "package test: configure failed as expected")
  return()
endif()
if(rc)
  message(FATAL_ERROR "configuring the consumer failed: ${rc}")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${WORK_DIR}/build RESULT_VARIABLE rc)
if(rc)
  message(FATAL_ERROR "building the consumer failed: ${rc}")
endif()
foreach(exe consumer consumer_blas consumer_compiled)
  if(EXISTS ${WORK_DIR}/build/${exe})
    execute_process(COMMAND ${WORK_DIR}/build/${exe} RESULT_VARIABLE rc)
    if(rc)
      message(FATAL_ERROR "${exe} failed: ${rc}")
    endif()
  endif()
endforeach()
message(STATUS "package test: the installed shardalg builds and runs a downstream project")
