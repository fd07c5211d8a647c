// The agent's link straight to carbon, for a lagent.conf with [Graphite] and no [lmaster]
// (FrUCToSA 0.3's agents sent to carbon directly; small clusters need no lmaster). Batches are
// encoded as lmaster's Graphite output encodes them (common/carbon_encoder.h: the same paths,
// pickle frames of at most batch_size points, or plaintext lines), written over one TCP
// connection, and kept in lagent's spool until carbon has *taken* them.
//
// Carbon never acknowledges, so "taken" means: every byte of the batch was written into the
// connection, and the connection was still up replay_window seconds later (a batch written just
// before carbon died can be lost with it: in our send queue, in carbon's receive buffer, or in
// its cache not yet written to whisper). That is the replay window of lmaster's output, kept
// in the spool instead of memory, so it also survives an lagent restart. After a lost
// connection, every batch not taken yet goes again, oldest first, once carbon is back (whisper
// overwrites the points it already had with the same values); reconnects back off from 0.5 s,
// doubling to retry_max_interval. At a stop, lagent closes its side once everything is
// written, and carbon closing its own side in turn (it read everything) takes what is left.
// replay_window = 0: a batch is taken once written. A written batch needs no flush to disk of
// its own (only a power cut of the node before carbon read it could lose it).
#pragma once

#include <memory>
#include <string>

#include "carbon_encoder.h"
#include "link.h"

namespace fructosa::agent {

// lagent.conf's [Graphite]: lmaster's graphite_options() and retry_max_interval.
const OptionTable& carbon_link_options();

struct CarbonLinkSettings {
  graphite::CarbonSettings carbon;
  std::string host;  // the name samples are attributed to (spooled samples do not keep it)
  double retry_max_interval = 30;
};

// "carbon at host:port (pickle)": the link's destination(), for log lines and systemd's status.
std::string carbon_destination(const graphite::CarbonSettings& carbon);

// Connects on start(), not before.
std::unique_ptr<Link> make_carbon_link(CarbonLinkSettings settings);

}  // namespace fructosa::agent
