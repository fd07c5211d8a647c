# fructosa_stack: the C++ libraries every program links (spdlog and fmt, Boost.Program_options,
# Cap'n Proto, ZeroMQ, zlib), linked dynamically, or statically into a program whose
# FRUCTOSA_STATIC_STACK property is true.
#
# Why: lagent runs on every node, and a dynamically linked program keeps resident a good part of
# every shared library it maps (the dynamic linker's symbol lookups and relocations touch them,
# and the kernel maps up to 64 KiB around each page touched). On Debian's libraries that was 7 of
# lagent's 10.5 MiB, most of it for code lagent never runs; linked in from Debian's static
# archives, with --gc-sections, only what is used is there (docs/performance.md: 10.5 to 7.5
# MiB, the same CPU). libc and the Kerberos libraries ZeroMQ's GSSAPI mechanism needs stay
# shared: Debian ships no static Kerberos. lmaster, the tests and the tools link dynamically.
#
# The property is read on the program being linked ($<TARGET_PROPERTY:...> without a target in
# a link interface), so the libraries in between (fructosa_common, fructosa_agent) link this
# one target and each program chooses.
option(FRUCTOSA_STATIC_AGENT "Link lagent's C++ libraries statically (smaller resident memory on every node)" ON)

# Compile-time usage (headers, definitions) is the same either way: the shared targets'.
add_library(fructosa_stack INTERFACE)
set(stack_shared fmt::fmt spdlog::spdlog Boost::program_options CapnProto::capnp CapnProto::kj
                 PkgConfig::ZMQ ZLIB::ZLIB)
foreach(library IN LISTS stack_shared)
  target_include_directories(fructosa_stack SYSTEM INTERFACE
    $<TARGET_PROPERTY:${library},INTERFACE_INCLUDE_DIRECTORIES>)
  target_compile_definitions(fructosa_stack INTERFACE
    $<TARGET_PROPERTY:${library},INTERFACE_COMPILE_DEFINITIONS>)
  target_compile_options(fructosa_stack INTERFACE
    $<TARGET_PROPERTY:${library},INTERFACE_COMPILE_OPTIONS>)
endforeach()
target_link_libraries(fructosa_stack INTERFACE Threads::Threads)

# The static archives, from the -dev packages .ci/run installs. ZeroMQ's are what
# `pkg-config --static --libs libzmq` names, less what the linker turns out not to need.
set(stack_archives zmq sodium pgm norm protokit capnp kj boost_program_options z bsd md)
set(static_usable ${FRUCTOSA_STATIC_AGENT})
if(FRUCTOSA_SANITIZE OR FRUCTOSA_FUZZ)
  set(static_usable OFF)  # the sanitizer runtimes want the C++ runtime shared
endif()
set(stack_static_paths)
if(static_usable)
  foreach(archive IN LISTS stack_archives)
    find_library(FRUCTOSA_ARCHIVE_${archive} NAMES lib${archive}.a)
    if(NOT FRUCTOSA_ARCHIVE_${archive})
      message(STATUS "lagent links dynamically: no lib${archive}.a")
      set(static_usable OFF)
      break()
    endif()
    list(APPEND stack_static_paths ${FRUCTOSA_ARCHIVE_${archive}})
  endforeach()
  find_library(FRUCTOSA_GSSAPI_KRB5 NAMES gssapi_krb5)
  if(static_usable AND NOT FRUCTOSA_GSSAPI_KRB5)
    message(STATUS "lagent links dynamically: no libgssapi_krb5")
    set(static_usable OFF)
  endif()
endif()
set(FRUCTOSA_STATIC_STACK_USABLE ${static_usable})

if(static_usable)
  # Lets --gc-sections drop unused functions of the project's own code too.
  add_compile_options(-ffunction-sections -fdata-sections)
  # Debian ships spdlog and fmt as shared libraries only: their implementation is compiled here
  # from the installed headers.
  add_library(fructosa_log_impl STATIC ${PROJECT_SOURCE_DIR}/common/log_impl.cpp)
  foreach(library fmt::fmt spdlog::spdlog)
    target_compile_definitions(fructosa_log_impl PRIVATE
      $<TARGET_PROPERTY:${library},INTERFACE_COMPILE_DEFINITIONS>)
  endforeach()
  set(static_link fructosa_log_impl ${stack_static_paths} ${FRUCTOSA_GSSAPI_KRB5} rt m)
else()
  set(static_link ${stack_shared})
endif()
set(is_static "$<BOOL:$<TARGET_PROPERTY:FRUCTOSA_STATIC_STACK>>")
target_link_libraries(fructosa_stack INTERFACE "$<IF:${is_static},${static_link},${stack_shared}>")

# RE2 (the sensors' job regexes, linked by the programs that have sensors), chosen the same way:
# its shared library is C++ and would map the shared C++ runtime (libstdc++.so, libgcc_s.so)
# into lagent again beside the static one: 0.3 MiB more resident, and two runtimes in a process.
pkg_check_modules(RE2 REQUIRED IMPORTED_TARGET re2)
add_library(fructosa_re2 INTERFACE)
target_include_directories(fructosa_re2 SYSTEM INTERFACE $<TARGET_PROPERTY:PkgConfig::RE2,INTERFACE_INCLUDE_DIRECTORIES>)
target_compile_options(fructosa_re2 INTERFACE $<TARGET_PROPERTY:PkgConfig::RE2,INTERFACE_COMPILE_OPTIONS>)
set(re2_static PkgConfig::RE2)
if(static_usable)
  find_library(FRUCTOSA_ARCHIVE_re2 NAMES libre2.a)
  if(FRUCTOSA_ARCHIVE_re2)
    set(re2_static ${FRUCTOSA_ARCHIVE_re2} Threads::Threads)
  else()
    message(STATUS "lagent links RE2 dynamically: no libre2.a")
  endif()
endif()
target_link_libraries(fructosa_re2 INTERFACE "$<IF:${is_static},${re2_static},PkgConfig::RE2>")

# Makes PROGRAM link the stack statically (when the archives are there), the C++ runtime with it,
# and drop the sections nothing refers to.
function(fructosa_link_stack_statically program)
  if(FRUCTOSA_STATIC_STACK_USABLE)
    set_target_properties(${program} PROPERTIES FRUCTOSA_STATIC_STACK ON)
    target_link_options(${program} PRIVATE -static-libstdc++ -static-libgcc -Wl,--gc-sections)
  endif()
endfunction()
