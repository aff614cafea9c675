# Golden tests of `cumemtrace check` and `cumemtrace diff` on the traces in
# traces/ (see README.md): each case is a command line and the exact stdout,
# stderr and exit code it must give (compare_command.cmake), in
# expected/<case>.out. Arguments are separated by '|'; an optional third
# argument names a file the command writes (@OUTPUT@ in the arguments),
# compared too. Regenerate with regenerate_check_diff.sh.
function(cumemtrace_golden_command case args)
  set(output_file_arg "")
  if(ARGC GREATER 2)
    set(output_file_arg -DOUTPUT_FILE=${ARGV2})
  endif()
  add_test(NAME golden_${case}
    COMMAND ${CMAKE_COMMAND}
      -DCUMEMTRACE=$<TARGET_FILE:cumemtrace>
      "-DARGS=${args}"
      -DTRACES_DIR=${CUMEMTRACE_GOLDEN_DIR}/traces
      -DEXPECTED=${CUMEMTRACE_GOLDEN_DIR}/expected/${case}.out
      -DACTUAL_DIR=${CMAKE_CURRENT_BINARY_DIR}/golden_actual
      ${output_file_arg}
      -P ${CUMEMTRACE_GOLDEN_DIR}/compare_command.cmake)
endfunction()

cumemtrace_golden_command(check_pass
  "check|normal_leak.jsonl|--max-peak-allocated|4MiB|--max-peak-reserved|20MiB|--max-leaked-count|3|--max-ooms|0")
cumemtrace_golden_command(check_fail
  "check|normal_leak.jsonl|two_devices.jsonl|truncated.jsonl|--max-peak-allocated|1GiB|--max-leaked-bytes|4KiB|--max-ooms|0|--suppressions|known_leaks.supp|--allow-incomplete")
cumemtrace_golden_command(check_junit
  "check|normal_leak.jsonl|two_devices.jsonl|--max-peak-reserved|3GiB|--max-leaked-count|1|--junit|@OUTPUT@" junit.xml)
cumemtrace_golden_command(check_growth
  "check|training_loop.jsonl|--max-growth|1KiB|--max-fragmentation|50%|--max-leaked-bytes|16MiB")
cumemtrace_golden_command(check_growth_suppressed
  "check|training_loop.jsonl|--max-growth|1KiB|--max-leaked-bytes|16MiB|--suppressions|known_leaks.supp")
cumemtrace_golden_command(check_bad_size "check|normal_leak.jsonl|--max-peak-allocated|2 gigabytes")
cumemtrace_golden_command(diff_text "diff|normal_leak.jsonl|normal_leak_v2.jsonl")
cumemtrace_golden_command(diff_json "diff|--format|json|normal_leak.jsonl|normal_leak_v2.jsonl")
cumemtrace_golden_command(diff_regression
  "diff|normal_leak.jsonl|normal_leak_v2.jsonl|--max-peak-increase|10|--max-reserved-increase|0|--max-leak-increase|32KiB")
cumemtrace_golden_command(diff_devices "diff|truncated.jsonl|two_devices.jsonl")
# Python frames (python_frames.jsonl): globs on Python names and files, a
# diff whose Python lines moved, and every frame with --full-stacks.
cumemtrace_golden_command(check_python_pass
  "check|python_frames.jsonl|--max-leaked-bytes|0|--suppressions|python_frames.supp")
cumemtrace_golden_command(check_python_fail
  "check|python_frames.jsonl|--max-leaked-bytes|0|--suppressions|python_frames_model.supp")
cumemtrace_golden_command(diff_python "diff|python_frames.jsonl|python_frames_v2.jsonl")
cumemtrace_golden_command(report_python_full_stacks "report|python_frames.jsonl|--full-stacks")
# No verdict from a partial trace (issue 21): a header alone, an end written
# after a kill, a cut trace with unreadable lines; and diff with a limit.
cumemtrace_golden_command(check_incomplete
  "check|header_only.jsonl|killed.jsonl|truncated.jsonl|--max-leaked-bytes|0")
cumemtrace_golden_command(diff_incomplete "diff|truncated.jsonl|normal_leak.jsonl|--max-peak-increase|10")
# Suppressions match what the label shows: the name a failure line prints,
# not an outer caller (main), each line's share printed, an unused line warned.
cumemtrace_golden_command(check_suppress_shown_name
  "check|shared_helper.jsonl|--max-leaked-bytes|0|--max-growth|0|--suppressions|shared_helper.supp")
cumemtrace_golden_command(check_suppress_outer_frame
  "check|shared_helper.jsonl|--max-leaked-bytes|0|--max-growth|0|--suppressions|outer_frame.supp")
