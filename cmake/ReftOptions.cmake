# Build options. GPU backends default to AUTO: built when their compiler is found,
# so the project builds and tests on machines without a GPU toolkit.
set(REFT_WITH_CUDA AUTO CACHE STRING "Build the CUDA backend (ON, OFF, AUTO)")
set(REFT_WITH_HIP AUTO CACHE STRING "Build the HIP backend (ON, OFF, AUTO)")
set(REFT_WITH_PYTHON AUTO CACHE STRING "Build the Python module (ON, OFF, AUTO)")
option(REFT_BUILD_BENCH "Build benchmarks under tools/bench" ON)
set_property(CACHE REFT_WITH_CUDA PROPERTY STRINGS ON OFF AUTO)
set_property(CACHE REFT_WITH_HIP PROPERTY STRINGS ON OFF AUTO)
set_property(CACHE REFT_WITH_PYTHON PROPERTY STRINGS ON OFF AUTO)
