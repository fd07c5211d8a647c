# fructosa wire protocol, lagent (ZeroMQ DEALER) <-> lmaster (ZeroMQ ROUTER).
#
# Rules: a field is never renumbered or retyped; new fields are appended. An incompatible
# change bumps kProtocolVersion (common/codec.h), which every message carries.
#
# Per connection the agent first sends Hello and Dictionary messages; batches then refer to
# sensors and series by their index in that dictionary, so a steady stream carries little
# more than timestamps and values. A master that meets an agent it has no dictionary for
# (it restarted, or the connection was re-established) answers Resync; the agent then sends
# Hello, its whole dictionary and every unacknowledged batch again.
@0xd6330b8c6f419f53;

$import "/capnp/c++.capnp".namespace("fructosa::wire");

enum MetricKind {
  gauge @0;
  counter @1;
}

struct SensorEntry {
  name @0 :Text;
  description @1 :Text;
}

# One (sensor, key) pair with its catalog metadata: sent once per connection.
struct SeriesEntry {
  sensor @0 :UInt32;          # index into the sensor dictionary
  key @1 :Text;
  unit @2 :Text;
  kind @3 :MetricKind;
  description @4 :Text;
}

# Dictionaries grow by appending: entries get consecutive indices from firstSensor/firstSeries.
struct Dictionary {
  firstSensor @0 :UInt32;
  sensors @1 :List(SensorEntry);
  firstSeries @2 :UInt32;
  series @3 :List(SeriesEntry);
}

struct Label {
  key @0 :Text;
  value @1 :Text;
}

struct Sample {
  sensor @0 :UInt32;          # index into the sensor dictionary
  timeNs @1 :Int64;           # ns since the Unix epoch
  job @2 :UInt64;             # 0 = the node itself
  series @3 :List(UInt32);    # parallel to values
  values @4 :List(Float64);
  labels @5 :List(Label);     # text details kept by HDF5/Elasticsearch, skipped by Graphite
}

struct Batch {
  sequence @0 :UInt64;        # per agent session, starts at 1, +1 per batch
  samples @1 :List(Sample);   # protocol version 1
  # Protocol version 2: the samples in the compact encoding (common/codec.cpp, "Compact batch
  # encoding"): series lists and values are sent as changes from the connection's previous sample
  # of the same sensor and job, so a steady stream costs 1-3 bytes per value instead of 12.
  # Stateful: a master that lost the connection's state asks for a resync, which starts it over.
  compactSamples @2 :Data;
}

struct Hello {
  host @0 :Text;              # short host name samples are attributed to
  session @1 :UInt64;         # random per agent process start
  agentVersion @2 :Text;
}

struct Ack {
  sequence @0 :UInt64;        # cumulative: every batch up to this one is accepted
}

struct Heartbeat {
  timeNs @0 :Int64;
  lastSequence @1 :UInt64;    # last batch sequence the agent has sent
}

struct Resync {
  reason @0 :Text;
}

# lmaster -> agent: read `sensor` every `intervalS` seconds for `durationS` seconds, then go back
# to the configured interval (`lmaster ctl interval`; an agent that lacks the sensor logs it).
struct Control {
  sensor @0 :Text;
  intervalS @1 :Float64;
  durationS @2 :Float64;
}

struct Envelope {
  version @0 :UInt16;
  union {
    hello @1 :Hello;
    dictionary @2 :Dictionary;
    batch @3 :Batch;
    heartbeat @4 :Heartbeat;
    ack @5 :Ack;
    resync @6 :Resync;
    control @7 :Control;
  }
}
