# The stages of preload/ and analyzer/ call each other only in the
# pipeline's direction (preload/README.md, analyzer/README.md): a check of
# the stage libraries' symbols, since the link does not catch a call against
# the flow. The allowed uses, a stage's direct ones (the rest follows):
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(layout_allow
  # preload: hooks -> record -> stacks, pool -> trace; config and common below
  common=  config=common,pool  trace=common  stacks=trace  markers=
  record=config,trace,stacks,pool  pool=
  # analyzer: render, export, commands -> analyze -> read -> analyzer_common
  analyzer_common=  read=analyzer_common  analyze=read  render=analyze
  export=analyze  commands=analyze,pool  torch=analyzer_common)
set(layout_args)
foreach(allow IN LISTS layout_allow)
  list(APPEND layout_args --allow ${allow})
endforeach()
foreach(stage common config trace stacks markers record pool
              analyzer_common read analyze render export commands torch)
  list(APPEND layout_args ${stage}=$<TARGET_FILE:cumemtrace_${stage}>)
endforeach()
add_test(NAME layout.StagesCallEachOtherOnlyInThePipelinesDirection
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/stage_dependencies.py
    --nm ${CMAKE_NM} ${layout_args})
