# Sanitizer and fuzzing builds; both off by default, so the normal g++ build is unchanged.
#
# FORECASTD_SANITIZE  "" (default), "address,undefined" or "thread": instruments every target
#                     (compile and link) with those sanitizers. Used by scripts/sanitize.sh
#                     (`make sanitize`) in build-asan and build-tsan. gcc or clang.
# FORECASTD_FUZZ      OFF (default) or ON: adds the libFuzzer targets of tests/fuzz, built with
#                     -fsanitize=fuzzer,address,undefined. Needs clang (libFuzzer is clang's);
#                     used by scripts/fuzz.sh (`make fuzz`) in build-fuzz.
set(FORECASTD_SANITIZE "" CACHE STRING
    "Sanitizers for every target: empty, address,undefined or thread")
set_property(CACHE FORECASTD_SANITIZE PROPERTY STRINGS "" "address,undefined" "thread")
option(FORECASTD_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only)" OFF)

if(FORECASTD_SANITIZE)
  if(NOT FORECASTD_SANITIZE MATCHES "^(address|undefined|thread)(,(address|undefined|thread))*$")
    message(FATAL_ERROR "FORECASTD_SANITIZE='${FORECASTD_SANITIZE}': expected a comma-separated "
                        "list of address, undefined and thread")
  endif()
  if(FORECASTD_SANITIZE MATCHES "thread" AND FORECASTD_SANITIZE MATCHES "address")
    message(FATAL_ERROR "FORECASTD_SANITIZE: thread and address cannot be combined")
  endif()
  message(STATUS "forecastd: sanitizers ${FORECASTD_SANITIZE}")
  # No recovery: a UBSan report fails the test that triggered it instead of scrolling past.
  # Frame pointers keep the reports' stacks whole in optimised code.
  set(_fd_san_flags -fsanitize=${FORECASTD_SANITIZE} -fno-omit-frame-pointer -g)
  if(FORECASTD_SANITIZE MATCHES "undefined")
    list(APPEND _fd_san_flags -fno-sanitize-recover=undefined)
  endif()
  if(FORECASTD_SANITIZE MATCHES "thread")
    # Keeps our code ABI-compatible with the uninstrumented libraries we link. gcc defines
    # __SANITIZE_THREAD__ under -fsanitize=thread, and protobuf's map_field.h then gives
    # MapFieldBase two extra members: our inline code and Debian's libprotobuf would disagree
    # on the layout of every map field (google.protobuf.Struct included), and crash. The
    # instrumentation comes from the flag, not the macro.
    list(APPEND _fd_san_flags -U__SANITIZE_THREAD__)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${_fd_san_flags}>")
  add_link_options(-fsanitize=${FORECASTD_SANITIZE})
endif()

if(FORECASTD_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "FORECASTD_FUZZ=ON needs clang (libFuzzer): configure with "
                        "-DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang")
  endif()
  if(FORECASTD_SANITIZE)
    message(FATAL_ERROR "FORECASTD_FUZZ brings its own sanitizers; leave FORECASTD_SANITIZE empty")
  endif()
  message(STATUS "forecastd: libFuzzer targets (tests/fuzz), with address,undefined")
  # Coverage feedback and the sanitizers on everything the fuzz targets link of ours; libFuzzer's
  # main() is linked into the fuzz executables only (tests/fuzz/CMakeLists.txt).
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link,address,undefined>"
                      "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-sanitize-recover=undefined>"
                      "$<$<COMPILE_LANGUAGE:C,CXX>:-fno-omit-frame-pointer;-g>")
  add_link_options(-fsanitize=address,undefined)
endif()
