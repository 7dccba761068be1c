# tests/mpi/expect_abort.cmake — run EXE under MPIEXEC with NP ranks and pass only when the job
# ends by itself (within 50 s), with a non-zero exit, and its output holds exactly one line
# "shardalg: rank R: ..." equal to EXPECT and no std::terminate report.
#   cmake -DMPIEXEC=... -DNPFLAG=-n -DNP=2 -DEXE=... "-DEXPECT=shardalg: rank 1: ..." -P expect_abort.cmake
execute_process(COMMAND ${MPIEXEC} ${NPFLAG} ${NP} ${EXE} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err
                TIMEOUT 50)
message("exit: ${rc}\n--- stdout\n${out}--- stderr\n${err}---")
if(NOT rc MATCHES "^[0-9]+$")
  message(FATAL_ERROR "the job did not end by itself: ${rc}")
endif()
if(rc EQUAL 0)
  message(FATAL_ERROR "the job exited 0; expected a non-zero exit")
endif()
# A ';' would split CMake's lists: compare with it written as <sc> (EXPECT's too).
string(REPLACE ";" "<sc>" text "${out}\n${err}")
string(REPLACE ";" "<sc>" EXPECT "${EXPECT}")
string(REGEX MATCHALL "shardalg: rank [0-9]+: [^\n]*" lines "${text}")
list(LENGTH lines n)
if(NOT n EQUAL 1)
  message(FATAL_ERROR "expected exactly one 'shardalg: rank R: ...' line, got ${n}")
endif()
list(GET lines 0 line)
if(NOT line STREQUAL EXPECT)
  message(FATAL_ERROR "the line is\n  ${line}\nexpected\n  ${EXPECT}")
endif()
if("${out}${err}" MATCHES "terminate called")
  message(FATAL_ERROR "an exception escaped to std::terminate")
endif()
message("ok: ended with exit ${rc} and the one line")
