# The benchmarks of tools/bench.sh as CTest tests with label "slow" (minutes each, busy machine
# = noisy figures): `ctest -L slow` runs them, the test command (tools/test.sh, CI) excludes
# them. They fail only when a benchmark itself fails; the figures go to BENCHMARKS.md by hand.
# reft_add_slow_bench(NAME name TARGET exe ARGS ...)
function(reft_add_slow_bench)
  cmake_parse_arguments(B "" "NAME;TARGET" "ARGS" ${ARGN})
  if(TARGET ${B_TARGET})
    add_test(NAME bench:${B_NAME} COMMAND $<TARGET_FILE:${B_TARGET}> ${B_ARGS})
    set_tests_properties(bench:${B_NAME} PROPERTIES LABELS slow TIMEOUT 1800 RUN_SERIAL TRUE)
  endif()
endfunction()
reft_add_slow_bench(NAME client TARGET reft_bench_client ARGS --size 256M --reps 5)
reft_add_slow_bench(NAME store TARGET store_bench ARGS --bytes 268435456 --runs 3)
reft_add_slow_bench(NAME kernels TARGET reft_bench_kernels ARGS --size 256M --reps 3)
reft_add_slow_bench(NAME protect TARGET protect_bench ARGS --mib 64 --reps 5)
reft_add_slow_bench(NAME aor TARGET aor_bench ARGS --reps 3)
reft_add_slow_bench(NAME peer TARGET reft_bench_peer ARGS --size 256M --reps 3)
reft_add_slow_bench(NAME persist TARGET persist_bench ARGS --bytes 268435456 --runs 3)
reft_add_slow_bench(NAME planner_table3 TARGET planner_table3_bench)
