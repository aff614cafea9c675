# Runs graph_capture under the preload (POOL), then checks the trace's graph
# events against what the program did (issue 31): two graphs, each with one
# 1 MiB memory node captured by cudaMallocAsync, instantiated once, launched
# (2 and 3 times), destroyed; graph memory reserved at the launches and none
# after the trim; no misuse reported for the captured frees.
# -DAPP= -DCUMEMTRACE= -DPRELOAD= -DSIM_DIR= -DPOOL= -DOUT=
file(REMOVE ${OUT})
execute_process(COMMAND ${CMAKE_COMMAND} -E env LD_LIBRARY_PATH=${SIM_DIR} LD_PRELOAD=${PRELOAD}
                  CUMEMTRACE_POOL=${POOL} CUMEMTRACE_OUTPUT=${OUT} ${APP}
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "graph_capture failed (${rc}): ${out}${err}")
endif()
execute_process(COMMAND ${CUMEMTRACE} report --format json ${OUT} RESULT_VARIABLE rc OUTPUT_VARIABLE json)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "report failed (${rc})")
endif()
function(expect path wanted)
  string(JSON got ERROR_VARIABLE e GET "${json}" ${path})
  if(NOT "${got}" STREQUAL "${wanted}")
    message(FATAL_ERROR "${path}: got '${got}' (${e}), want '${wanted}'")
  endif()
endfunction()
expect("graphs;launches" 5)
string(JSON n LENGTH "${json}" graphs graphs)
# stream_cache_relaunch: the capture whose request a pool would have served
# from the stream's cache, launched twice; then main's, launched 3 times.
set(i 0)
foreach(site_launches stream_cache_relaunch:2 main:3)
  string(REPLACE ":" ";" pair ${site_launches})
  list(GET pair 0 site)
  list(GET pair 1 launches)
  expect("graphs;graphs;${i};memory_nodes" 1)
  expect("graphs;graphs;${i};node_bytes" 1048576)
  expect("graphs;graphs;${i};api" cudaMallocAsync)
  expect("graphs;graphs;${i};site" ${site})
  expect("graphs;graphs;${i};instantiations" 1)
  expect("graphs;graphs;${i};launches" ${launches})
  expect("graphs;graphs;${i};destroyed" ON)
  math(EXPR i "${i} + 1")
endforeach()
expect("graphs;memory;0;peak_reserved" 2097152)
expect("graphs;memory;0;reserved" 0)
expect("events;graph_alloc" 2)
expect("events;error" 0)
if(NOT n EQUAL 2)
  message(FATAL_ERROR "${n} graphs described, want 2 (the relaxed capture's graph has no memory node)")
endif()
