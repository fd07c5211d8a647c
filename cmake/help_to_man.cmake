# Writes a man page from a program's --help text (cmake -P; see packaging.cmake): the help is
# the one description kept up to date, so the page is made from it rather than written twice.
# Inputs: PROGRAM (the built executable), NAME, SECTION, SUMMARY, VERSION, SEE_ALSO, OUT; a
# command (section 1) rather than a daemon (section 8) gives its own FILES_ROFF and EXIT_ROFF
# (roff lines separated by ^).
execute_process(COMMAND "${PROGRAM}" --help OUTPUT_VARIABLE help RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "${PROGRAM} --help exited with ${result}")
endif()
# roff: a backslash is written \e; a line starting with . or ' would be a request.
string(REPLACE "\\" "\\e" help "${help}")
string(REGEX REPLACE "(^|\n)([.'])" "\\1\\\\&\\2" help "${help}")
string(TOUPPER "${NAME}" title)
if(NOT DEFINED FILES_ROFF)
  set(FILES_ROFF ".TP
.I /etc/fructosa/${NAME}.conf
default configuration (a commented sample: /usr/share/doc/fructosa/examples/${NAME}.conf)
.TP
.I /run/${NAME}.pid
default pidfile (the service files use /run/${NAME}/${NAME}.pid)")
endif()
string(REPLACE "^" "\n" FILES_ROFF "${FILES_ROFF}")
if(NOT DEFINED EXIT_ROFF)
  set(EXIT_ROFF "0 on success; 3 from \\fBstatus\\fR when not running; 78 (EX_CONFIG) on a configuration error.")
endif()
file(WRITE "${OUT}" ".TH ${title} ${SECTION} \"\" \"fructosa ${VERSION}\" \"fructosa\"
.SH NAME
${NAME} \\- ${SUMMARY}
.SH DESCRIPTION
.nf
${help}.fi
.SH FILES
${FILES_ROFF}
.SH EXIT STATUS
${EXIT_ROFF}
.SH SEE ALSO
${SEE_ALSO}
/usr/share/doc/fructosa/README.md, /usr/share/doc/fructosa/services.md
")
