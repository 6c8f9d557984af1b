# reft_warnings: an interface target every project target links for one warning policy.
add_library(reft_warnings INTERFACE)
target_compile_options(reft_warnings INTERFACE
  $<$<COMPILE_LANGUAGE:CXX>:-Wall -Wextra -Wno-unused-parameter -Wno-missing-field-initializers>)
