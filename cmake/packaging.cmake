# Installation (`cmake --install`, DESTDIR and --prefix honoured) and the Debian package (CPack).
# Included from the top-level CMakeLists.txt after every program's directory. docs/services.md
# says where things go and why.
include(GNUInstallDirs)

# Into /etc/init.d and /etc/conf.d as well (always into share/fructosa/openrc). Default: when this
# machine runs OpenRC.
if(EXISTS /sbin/openrc-run AND NOT EXISTS /run/systemd/system)
  set(openrc_default ON)
else()
  set(openrc_default OFF)
endif()
option(FRUCTOSA_INSTALL_OPENRC "Install the OpenRC scripts into <sysconfdir>/init.d and conf.d" ${openrc_default})

install(TARGETS lagent lmaster fructosa-report RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
if(TARGET make-dashboard)
  install(TARGETS make-dashboard RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
# Dashboards shipped as files (make-dashboard writes them for any sensor set).
file(GLOB dashboard_files ${PROJECT_SOURCE_DIR}/dashboards/*.json)
if(dashboard_files)
  install(FILES ${dashboard_files} DESTINATION ${CMAKE_INSTALL_DATADIR}/fructosa/dashboards)
endif()

# Man pages made from each program's --help.
set(man_pages)
foreach(entry "lagent|8|fructosa node agent|lmaster(8), make-dashboard(1), fructosa-report(1)"
              "lmaster|8|fructosa master|lagent(8), make-dashboard(1), fructosa-report(1)"
              "fructosa-report|1|what a batch job did: efficiency, verdict and advice|lmaster(8), lagent(8), /usr/share/doc/fructosa/report.md,")
  string(REPLACE "|" ";" entry "${entry}")
  list(GET entry 0 program)
  list(GET entry 1 section)
  list(GET entry 2 summary)
  list(GET entry 3 see_also)
  set(page ${PROJECT_BINARY_DIR}/man/${program}.${section})
  set(command_sections)
  if(section EQUAL 1)  # a command, not a daemon: no pidfile, its own exit status
    set(command_sections
        "-DFILES_ROFF=.TP^.I /etc/fructosa/lmaster.conf^where its [hdf5] path names the files read (-c)"
        "-DEXIT_ROFF=0 on success, 1 when a job has no data or the data cannot be read, 2 on a usage error.")
  endif()
  add_custom_command(OUTPUT ${page}
    COMMAND ${CMAKE_COMMAND} -DPROGRAM=$<TARGET_FILE:${program}> -DNAME=${program} -DSECTION=${section}
            "-DSUMMARY=${summary}" "-DSEE_ALSO=${see_also}" -DVERSION=${PROJECT_VERSION} -DOUT=${page}
            ${command_sections} -P ${PROJECT_SOURCE_DIR}/cmake/help_to_man.cmake
    DEPENDS ${program} ${PROJECT_SOURCE_DIR}/cmake/help_to_man.cmake
    COMMENT "Writing the man page ${program}(${section}) from ${program} --help" VERBATIM)
  list(APPEND man_pages ${page})
  install(FILES ${page} DESTINATION ${CMAKE_INSTALL_MANDIR}/man${section})
endforeach()
add_custom_target(man_pages ALL DEPENDS ${man_pages})

# The Slurm epilog that stores each job's report summary in its AdminComment (docs/report.md).
install(PROGRAMS ${PROJECT_SOURCE_DIR}/contrib/slurm/fructosa-epilog DESTINATION ${CMAKE_INSTALL_DATADIR}/fructosa/slurm)

file(GLOB user_docs ${PROJECT_SOURCE_DIR}/docs/*.md)
install(FILES ${PROJECT_SOURCE_DIR}/README.md ${user_docs} DESTINATION ${CMAKE_INSTALL_DOCDIR})

# Service files, sample configurations (never overwriting existing ones), OpenRC scripts: the
# paths in them are filled in at install time (cmake/install_services.cmake).
install(CODE "
  set(FRUCTOSA_SOURCE_DIR \"${PROJECT_SOURCE_DIR}\")
  set(FRUCTOSA_BINARY_DIR \"${PROJECT_BINARY_DIR}\")
  set(FRUCTOSA_BINDIR \"${CMAKE_INSTALL_BINDIR}\")
  set(FRUCTOSA_INSTALL_OPENRC ${FRUCTOSA_INSTALL_OPENRC})
  include(\"${PROJECT_SOURCE_DIR}/cmake/install_services.cmake\")
")

# The Debian package: `cpack -G DEB` in the build directory makes fructosa_<version>_amd64.deb.
set(CPACK_GENERATOR DEB)
set(CPACK_PACKAGE_NAME fructosa)
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGE_CONTACT "fructosa maintainers <root@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "HPC cluster performance monitoring: node agent (lagent), master (lmaster), job reports (fructosa-report)")
set(CPACK_PACKAGE_DESCRIPTION "lagent samples every node (psutil-compatible sensors, per-job cgroup,
taskstats, perf, GPU, RAPL, IPMI, InfiniBand, Lustre) and sends to lmaster, which writes Graphite,
HDF5, Elasticsearch and stdout. systemd units and OpenRC scripts included.")
# Debug information stays in the build tree (it is most of the programs' size).
set(CPACK_STRIP_FILES ON)
# Absolute install destinations (/etc/fructosa) and prefix-dependent paths written at install
# time both need the staging install to run with the real prefix under DESTDIR.
set(CPACK_SET_DESTDIR ON)
set(CPACK_INSTALL_PREFIX /usr)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)  # fructosa_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION admin)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
# Depends on the Debian runtime libraries the programs link (dpkg-shlibdeps), plus what the
# maintainer scripts use.
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_DEPENDS "adduser")
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "graphite-carbon, hdf5-tools, python3-h5py, openrc")
set(CPACK_DEBIAN_PACKAGE_CONTROL_STRICT_PERMISSION ON)
# conffiles: dpkg keeps an administrator's changes to these across upgrades and removes them on
# purge only.
set(conffiles /etc/fructosa/lagent.conf /etc/fructosa/lmaster.conf)
if(FRUCTOSA_INSTALL_OPENRC)
  foreach(service lagent lmaster fructosa)
    list(APPEND conffiles /etc/init.d/${service} /etc/conf.d/${service})
  endforeach()
endif()
list(JOIN conffiles "\n" FRUCTOSA_CONFFILES)
configure_file(${PROJECT_SOURCE_DIR}/cmake/debian/conffiles.in ${PROJECT_BINARY_DIR}/debian/conffiles @ONLY)
set(CPACK_DEBIAN_PACKAGE_CONTROL_EXTRA
    ${PROJECT_BINARY_DIR}/debian/conffiles
    ${PROJECT_SOURCE_DIR}/cmake/debian/postinst
    ${PROJECT_SOURCE_DIR}/cmake/debian/prerm
    ${PROJECT_SOURCE_DIR}/cmake/debian/postrm)
include(CPack)

if(FRUCTOSA_BUILD_TESTS)
  # tests/packaging: the install tree (units verified, OpenRC scripts checked, configurations
  # kept), the .deb (installed and purged when run as root, hence alone), the OpenRC scripts
  # run by Debian's openrc-run in a private mount namespace, the units' sandboxes (exposure
  # scores; lagent and lmaster run under their system call filters and capabilities), and the
  # .deb's life cycle in Debian 12 containers booted with systemd (systemd_boot) and with
  # sysvinit + OpenRC (openrc_boot) as PID 1 (label "container"). .ci/sanitize-and-fuzz leaves
  # them all out: the package of a sanitized build is not what a site installs.
  set(FRUCTOSA_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with Debian's h5py and psutil")
  foreach(test install deb openrc hardening systemd_boot openrc_boot)
    add_test(NAME packaging.${test}
             COMMAND ${FRUCTOSA_PYTHON} -m unittest -v test_${test}
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}/tests/packaging)
    set_tests_properties(packaging.${test} PROPERTIES
      ENVIRONMENT "BUILD_DIR=${PROJECT_BINARY_DIR};CMAKE=${CMAKE_COMMAND};CPACK=${CMAKE_CPACK_COMMAND};LAGENT=$<TARGET_FILE:lagent>;LMASTER=$<TARGET_FILE:lmaster>;PYTHONDONTWRITEBYTECODE=1"
      TIMEOUT 900)
  endforeach()
  set_tests_properties(packaging.deb PROPERTIES RUN_SERIAL ON)
  # Never beside the crashfs tests (resource "fuse_mounts", tests/CMakeLists.txt): a container's
  # mount namespace starts as a copy of this machine's, FUSE mounts included, which then cannot
  # end while it runs. Beside every other test (they took 200 s alone, one core idle).
  set_tests_properties(packaging.systemd_boot packaging.openrc_boot PROPERTIES LABELS container
                       RESOURCE_LOCK fuse_mounts)
endif()
