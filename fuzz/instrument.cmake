# Included from the top-level CMakeLists.txt when FRUCTOSA_FUZZ=ON, before any target exists:
# the whole project is compiled with libFuzzer's coverage instrumentation plus ASan/UBSan, and
# the fuzz targets (fuzz/CMakeLists.txt) link the libFuzzer driver.
if(NOT CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR
    "FRUCTOSA_FUZZ=ON needs clang (libFuzzer is part of clang's compiler-rt): configure a fresh "
    "build directory with -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang "
    "(Debian 12: apt-get install clang libclang-rt-14-dev). This one uses "
    "${CMAKE_CXX_COMPILER_ID} ${CMAKE_CXX_COMPILER}.")
endif()
# -O1 -g1, as for FRUCTOSA_SANITIZE (CMakeLists.txt): libFuzzer's advice, and a much quicker build.
add_compile_options(-fsanitize=fuzzer-no-link,address,undefined -fno-omit-frame-pointer
                    -fno-sanitize-recover=undefined -O1 -g1)
add_link_options(-fsanitize=address,undefined)
