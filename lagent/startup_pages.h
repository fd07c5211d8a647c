#pragma once
// Hands back the page mappings of code and constants the agent ran or read only while it started.
#include <cstdint>

namespace fructosa::agent {

struct ReleasedPages {
  std::uint64_t mappings = 0;  // mappings whose pages were released
  std::uint64_t bytes = 0;     // resident before (smaps Rss)
};

// Drops this process's page-table entries for every private, read-only mapping of a file that
// holds no page of its own (smaps Anonymous: 0): the program's and the shared libraries' code
// and constants. Those pages are the file's, in the page cache, so nothing is lost: a page used
// again is mapped again from the cache at its first touch (with the kernel's fault-around), and
// the rest (the parsing, linking and library set-up done at start, Kerberos' code that ZeroMQ
// links) no longer counts in lagent's RSS and is easier for the kernel to reclaim. A mapping
// that was ever written (relocations, a debugger's breakpoint) keeps its pages: MADV_DONTNEED
// would turn them back into the file's contents. A mapping madvise refuses is left as it is.
ReleasedPages release_clean_file_pages();

}  // namespace fructosa::agent
