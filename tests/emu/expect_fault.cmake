# tests/emu/expect_fault.cmake — run PROG ARG; pass only when it dies of SIGSEGV having written the emu
# fault handler's line (a host read of emulated device memory, naming the address and the
# allocation) and never reached its own output. cmake -DPROG=… -DARG=… -DBYTES=… -P expect_fault.cmake
execute_process(COMMAND ${PROG} ${ARG} RESULT_VARIABLE rv OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "exit: ${rv}\nstdout: ${out}\nstderr: ${err}")
set(line "^shardalg emu: host (read|access) of emulated device memory at 0x[0-9a-f]+ \\(allocation of ${BYTES} bytes at 0x[0-9a-f]+, offset [0-9]+\\): only the backend's entry points open device memory; copy it to the host with EmuBackend::to_host\n")
if(NOT rv STREQUAL "Segmentation fault")
  message(FATAL_ERROR "expected death by SIGSEGV, got: ${rv}")
endif()
if(NOT err MATCHES "${line}")
  message(FATAL_ERROR "the fault handler's line is missing from stderr")
endif()
if(out MATCHES "returned")
  message(FATAL_ERROR "the program went on after the host read")
endif()
