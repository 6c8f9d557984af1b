# Host XOR / RS conformance tests (owned by the protection work). Included by
# tests/kernels/CMakeLists.txt when it exists, otherwise by tests/protect/CMakeLists.txt, so the
# target is defined exactly once.
reft_add_catch_test(NAME kernels_host_math_test
                    SOURCES ${CMAKE_CURRENT_LIST_DIR}/xor_host_test.cc ${CMAKE_CURRENT_LIST_DIR}/rs_test.cc
                    LIBS reft_kernels LABELS unit)
