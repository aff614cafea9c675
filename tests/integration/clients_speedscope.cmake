# clients.speedscope_folded: speedscope (tests/js/node_modules) reads
# `export --format folded` in headless Chromium, and its Sandwich table shows
# our frames with the report's totals (tests/js/speedscope_check.mjs). Exit
# 77 is a skip (Chromium or node_modules missing; a failure under CI=true).
find_program(CUMEMTRACE_NODE NAMES node nodejs DOC "Node.js for the clients.* tests (optional)")
if(CUMEMTRACE_NODE)
  add_test(NAME clients.speedscope_folded
    COMMAND ${CUMEMTRACE_NODE} ${CMAKE_SOURCE_DIR}/tests/js/speedscope_check.mjs
      $<TARGET_FILE:cumemtrace> ${CMAKE_CURRENT_SOURCE_DIR}/golden/traces/python_frames.jsonl
      "${CUMEMTRACE_CHROMIUM}")
  set_tests_properties(clients.speedscope_folded PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 60)
else()
  message(STATUS "node not found: clients.speedscope_folded will skip")
  add_test(NAME clients.speedscope_folded
    COMMAND ${CMAKE_COMMAND} -DWHAT=node -P ${CMAKE_CURRENT_SOURCE_DIR}/clients_missing_tool.cmake)
  set_tests_properties(clients.speedscope_folded PROPERTIES SKIP_REGULAR_EXPRESSION "SKIPPED:")
endif()
