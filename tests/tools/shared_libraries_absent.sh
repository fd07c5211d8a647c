#!/bin/sh
# Usage: shared_libraries_absent.sh PROGRAM PATTERN
# Fails when PROGRAM's dynamic section names a shared library that matches the extended regular
# expression PATTERN, or when it names none at all (readelf could not read it).
set -eu
needed=$(readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]$/\1/p')
[ -n "$needed" ] || { echo "$1: no NEEDED entries read" >&2; exit 1; }
echo "$1 needs: $(echo $needed)"
if echo "$needed" | grep -E "$2"; then
  echo "$1 links the above shared, where it should link them statically" >&2
  exit 1
fi
