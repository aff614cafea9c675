# Runs graph_capture under the preload (POOL), then checks the trace's graph
# events against what the program did (issue 31): four graphs, each with one
# 1 MiB memory node (three captured by cudaMallocAsync, one of them by
# cudaStreamBeginCaptureToGraph; one added by cudaGraphAddNode), instantiated
# once, launched (2, 2, 1 and 3 times), destroyed; graph memory reserved at
# the launches and none after the trim; no misuse reported for the captured
# frees. Before them a graph without memory nodes, launched 10 times: the
# first described.
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
# (and 10 of a graph without memory nodes, launches_before_any_memory_node)
expect("graphs;launches" 18)
string(JSON n LENGTH "${json}" graphs graphs)
# stream_cache_relaunch and capture_to_graph_relaunch: the captures whose
# request a pool would have served from the stream's cache, launched twice;
# generic_memory_node's graph (the runtime's cudaGraphAddNode reaches the
# driver's cuGraphAddNode; its site is the program's call), launched once;
# then main's, launched 3 times.
expect("graphs;graphs;0;memory_nodes" 0)
expect("graphs;graphs;0;launches" 10)
set(i 1)
foreach(site_api_launches stream_cache_relaunch:cudaMallocAsync:2 capture_to_graph_relaunch:cudaMallocAsync:2
        generic_memory_node:cuGraphAddNode:1 main:cudaMallocAsync:3)
  string(REPLACE ":" ";" triple ${site_api_launches})
  list(GET triple 0 site)
  list(GET triple 1 api)
  list(GET triple 2 launches)
  expect("graphs;graphs;${i};memory_nodes" 1)
  expect("graphs;graphs;${i};node_bytes" 1048576)
  expect("graphs;graphs;${i};api" ${api})
  expect("graphs;graphs;${i};site" ${site})
  expect("graphs;graphs;${i};instantiations" 1)
  expect("graphs;graphs;${i};launches" ${launches})
  expect("graphs;graphs;${i};destroyed" ON)
  math(EXPR i "${i} + 1")
endforeach()
expect("graphs;memory;0;peak_reserved" 2097152)
expect("graphs;memory;0;reserved" 0)
expect("events;graph_alloc" 4)
expect("events;error" 0)
if(NOT n EQUAL 5)
  message(FATAL_ERROR "${n} graphs described, want 5 (the relaxed capture's graph has no memory node nor launch)")
endif()
