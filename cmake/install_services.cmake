# Runs at install time (`cmake --install`, and CPack's staging install), so that the paths
# written into the service files follow the prefix given then (--prefix) and DESTDIR is honoured
# (file(INSTALL) prepends it). Set by packaging.cmake: FRUCTOSA_SOURCE_DIR, FRUCTOSA_BINARY_DIR,
# FRUCTOSA_BINDIR, FRUCTOSA_INSTALL_OPENRC.

# The programs look for /etc/fructosa/*.conf by default, so the usual prefixes (/usr,
# /usr/local) put configuration in /etc; any other prefix keeps everything under itself.
if(CMAKE_INSTALL_PREFIX STREQUAL "/usr" OR CMAKE_INSTALL_PREFIX STREQUAL "/usr/local")
  set(sysconf "/etc")
else()
  set(sysconf "${CMAKE_INSTALL_PREFIX}/etc")
endif()
set(FRUCTOSA_BIN_DIR "${CMAKE_INSTALL_PREFIX}/${FRUCTOSA_BINDIR}")
set(FRUCTOSA_CONFIG_DIR "${sysconf}/fructosa")
set(FRUCTOSA_DOC_DIR "${CMAKE_INSTALL_PREFIX}/share/doc/fructosa")
set(share "${CMAKE_INSTALL_PREFIX}/share/fructosa")
set(lib "${CMAKE_INSTALL_PREFIX}/lib")

string(MD5 prefix_key "${CMAKE_INSTALL_PREFIX}")
set(staged "${FRUCTOSA_BINARY_DIR}/service-files/${prefix_key}")
foreach(template systemd/lagent.service systemd/lmaster.service openrc/init.d/lagent openrc/init.d/lmaster)
  configure_file("${FRUCTOSA_SOURCE_DIR}/${template}.in" "${staged}/${template}" @ONLY)
endforeach()

# systemd: units, the lmaster user (sysusers.d) and the directories it cannot make (tmpfiles.d).
file(INSTALL DESTINATION "${lib}/systemd/system" TYPE FILE
     FILES "${staged}/systemd/lagent.service" "${staged}/systemd/lmaster.service"
           "${FRUCTOSA_SOURCE_DIR}/systemd/fructosa.target")
file(INSTALL DESTINATION "${lib}/sysusers.d" TYPE FILE
     FILES "${FRUCTOSA_SOURCE_DIR}/systemd/fructosa.sysusers" RENAME fructosa.conf)
file(INSTALL DESTINATION "${lib}/tmpfiles.d" TYPE FILE
     FILES "${FRUCTOSA_SOURCE_DIR}/systemd/fructosa.tmpfiles" RENAME fructosa.conf)

# OpenRC: always a copy under share/fructosa/openrc; into <sysconf>/init.d and conf.d only when
# asked (FRUCTOSA_INSTALL_OPENRC), since /etc/init.d scripts on a systemd machine turn into
# generated units and update-rc.d calls.
set(openrc_scripts "${staged}/openrc/init.d/lagent" "${staged}/openrc/init.d/lmaster"
                   "${FRUCTOSA_SOURCE_DIR}/openrc/init.d/fructosa")
set(openrc_confs "${FRUCTOSA_SOURCE_DIR}/openrc/conf.d/lagent" "${FRUCTOSA_SOURCE_DIR}/openrc/conf.d/lmaster"
                 "${FRUCTOSA_SOURCE_DIR}/openrc/conf.d/fructosa")
set(script_permissions FILE_PERMISSIONS OWNER_READ OWNER_WRITE OWNER_EXECUTE GROUP_READ GROUP_EXECUTE WORLD_READ WORLD_EXECUTE)
file(INSTALL DESTINATION "${share}/openrc/init.d" TYPE FILE ${script_permissions} FILES ${openrc_scripts})
file(INSTALL DESTINATION "${share}/openrc/conf.d" TYPE FILE FILES ${openrc_confs})

# Configuration files are the administrator's: one that exists is never overwritten (the new
# sample is always in share/doc/fructosa/examples to compare with).
function(fructosa_install_config source directory)
  get_filename_component(name "${source}" NAME)
  if(EXISTS "$ENV{DESTDIR}${directory}/${name}")
    message(STATUS "Keeping existing: $ENV{DESTDIR}${directory}/${name}")
  else()
    file(INSTALL DESTINATION "${directory}" TYPE FILE FILES "${source}")
  endif()
endfunction()
foreach(config lagent.conf lmaster.conf)
  fructosa_install_config("${FRUCTOSA_SOURCE_DIR}/etc/fructosa/${config}" "${FRUCTOSA_CONFIG_DIR}")
endforeach()
file(INSTALL DESTINATION "${FRUCTOSA_DOC_DIR}/examples" TYPE FILE
     FILES "${FRUCTOSA_SOURCE_DIR}/etc/fructosa/lagent.conf" "${FRUCTOSA_SOURCE_DIR}/etc/fructosa/lmaster.conf")
if(FRUCTOSA_INSTALL_OPENRC)
  file(INSTALL DESTINATION "${sysconf}/init.d" TYPE FILE ${script_permissions} FILES ${openrc_scripts})
  foreach(conf ${openrc_confs})
    fructosa_install_config("${conf}" "${sysconf}/conf.d")
  endforeach()
endif()
