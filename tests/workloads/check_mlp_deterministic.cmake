# Runs mlp_train with 1, 2 and 4 streams and a small footprint, and fails unless every run prints
# the same checksum. Invoked by ctest with -DMLP=<path to mlp_train>.
set(first "")
foreach(streams 1 2 4)
  execute_process(
    COMMAND ${MLP} --steps 40 --streams ${streams} --footprint 8M --quiet
    OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "mlp_train --streams ${streams} failed (${rc}):\n${out}\n${err}")
  endif()
  string(REGEX MATCH "checksum ([0-9a-f]+)" _ "${out}")
  set(sum "${CMAKE_MATCH_1}")
  if(sum STREQUAL "")
    message(FATAL_ERROR "mlp_train --streams ${streams} printed no checksum:\n${out}")
  endif()
  message(STATUS "streams ${streams}: checksum ${sum}")
  if(first STREQUAL "")
    set(first "${sum}")
  elseif(NOT sum STREQUAL first)
    message(FATAL_ERROR "checksum with ${streams} streams is ${sum}, with 1 stream ${first}")
  endif()
endforeach()
