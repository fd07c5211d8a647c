// Graphite metric names: the one mapping from FrUCToSA's names (hosts, sensors, keys, the
// prefix) to the components of a Graphite path. lmaster's Graphite output sends these names,
// and everything that reads Graphite (make-dashboard, fructosa-report) asks for them, so both
// sides must compute them here.
//
// A component keeps only [A-Za-z0-9_:#-]; every other byte, a dot inside a component included,
// becomes '_', and an empty component becomes "_". That is the set every hop takes as it is:
// carbon-c-relay rewrites anything else to '_' before storing (so a name sent with other bytes
// is stored under a name nobody asked for), and graphite-web's target grammar cannot take
// `( ) , = + @ %` unquoted. Examples:
//   key "/scratch+proj(1)@a=b.total"  -> "_scratch_proj_1__a_b.total"
//   key "coretemp.Core 0.current"     -> "coretemp.Core_0.current"  (a key's dots separate)
//   key "a..b"                        -> "a._.b"
//   sensor "My.Sensor"                -> "My_Sensor"                 (one component)
//   host "node07.cluster.example"     -> "node07"                    (the short host)
//   host "10.1.2.3"                   -> "10_1_2_3"                  (an IPv4 address, whole)
//   prefix ".my site.a/b."            -> "my_site.a_b."
// Light on purpose: included by the Graphite output and make-dashboard.
#pragma once

#include <string>
#include <string_view>

namespace fructosa {

// Whether a component keeps byte `c` as it is.
constexpr bool graphite_keeps(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
         c == '-' || c == ':' || c == '#';
}

// One component (a sensor name, one part of a key): every byte it does not keep becomes '_'.
void append_graphite_component(std::string& out, std::string_view component);
std::string graphite_component(std::string_view component);

// A dotted name (a key): its dots stay separators, each part is mapped as a component.
void append_graphite_dotted(std::string& out, std::string_view dotted);
// Whether append_graphite_dotted() appends `dotted` as it is: kept bytes and dots, no empty
// part. True for nearly every key; lmaster's Graphite output asks it for every point it sends.
bool graphite_dotted_as_is(std::string_view dotted);
std::string graphite_dotted(std::string_view dotted);

// The host component: the host up to its first dot (an IPv4 address whole: its first octet
// says nothing), mapped as a component.
void append_graphite_host(std::string& out, std::string_view host);
std::string graphite_host(std::string_view host);

// What a configured prefix puts before every path: dots at either end ignored ("cluster1." and
// ".cluster1" mean "cluster1"), the rest mapped as a dotted name, then a '.'; "" for none.
std::string graphite_prefix(std::string_view prefix);

}  // namespace fructosa
