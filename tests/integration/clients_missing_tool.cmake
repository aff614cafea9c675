# A clients.* test whose tool (WHAT) was not found when the build was
# configured: skipped, except under CI=true, where scripts/setup.sh installs
# every tool and a missing one is a failure.
#   cmake -DWHAT=node -P clients_missing_tool.cmake
if("$ENV{CI}" STREQUAL "true")
  message(FATAL_ERROR "${WHAT} was not found when the build was configured (CI=true: scripts/setup.sh installs it)")
endif()
message("SKIPPED: ${WHAT} was not found when the build was configured")
