# Runs PROGRAM with ARGS (a ;-list) and passes when it exits 2 with EXPECT (a regular expression)
# on stderr: an example's answer to a flag it does not know or a size that does not fit.
#   cmake -DPROGRAM=… "-DARGS=--x;1" "-DEXPECT=…" -P expect_flag_error.cmake
execute_process(COMMAND ${PROGRAM} ${ARGS} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2)
  message(FATAL_ERROR "expected exit status 2, got '${rc}'\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT err MATCHES "${EXPECT}")
  message(FATAL_ERROR "stderr does not match '${EXPECT}':\n${err}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "expected nothing on stdout, got:\n${out}")
endif()
message(STATUS "exit 2: ${err}")
