# The stages of preload/, contract/ and analyzer/ call each other only in the
# pipeline's direction (preload/README.md, analyzer/README.md,
# contract/README.md): a check of the stage libraries' symbols, since the
# link does not catch a call against the flow. The allowed uses, a stage's
# direct ones (the rest follows):
find_package(Python3 COMPONENTS Interpreter REQUIRED)
set(layout_allow
  # what both sides agree on (the option table parses CUMEMTRACE_POOL_CONF
  # with the pool's parser)
  contract=pool
  # preload: hooks -> record -> stacks, pool -> trace; contract and common below
  common=  trace=contract  stacks=trace,common  markers=
  record=trace,stacks,pool  pool=
  # analyzer: render, export, commands -> analyze -> read -> analyzer_common;
  # read completes killed traces with the contract's recovery
  analyzer_common=  read=analyzer_common,contract  analyze=read  render=analyze
  export=analyze  commands=analyze,pool  torch=analyzer_common)
set(layout_args)
foreach(allow IN LISTS layout_allow)
  list(APPEND layout_args --allow ${allow})
endforeach()
foreach(stage contract common trace stacks markers record pool
              analyzer_common read analyze render export commands torch)
  list(APPEND layout_args ${stage}=$<TARGET_FILE:cumemtrace_${stage}>)
endforeach()
# And the headers, which leave no symbol: the analyzer includes nothing of
# preload/ (what it shares with the library is in contract/), the library
# nothing of analyzer/, and contract/ neither (only the public headers of
# include/, which every tree may use).
set(src ${CMAKE_SOURCE_DIR})
list(APPEND layout_args
  --tree preload=${src}/preload  --tree contract=${src}/contract
  --tree analyzer=${src}/analyzer:${src}/analyzer/include  --tree include=${src}/include
  --may-include preload=contract,include  --may-include contract=include
  --may-include analyzer=contract,include  --may-include include=)
add_test(NAME layout.StagesCallEachOtherOnlyInThePipelinesDirection
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/stage_dependencies.py
    --nm ${CMAKE_NM} ${layout_args})
