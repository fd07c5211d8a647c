// What lmaster keeps of every key's unit, kind and description: the first agent to describe a key
// owns it; another agent cannot change it for every host; the owner can (an upgrade).
#include <gtest/gtest.h>

#include "output.h"

namespace fructosa::master {
namespace {

TEST(MetricInfoStore, TheFirstAgentOwnsAKeysDescription) {
  MetricInfoStore infos;
  const MetricInfo bytes{"bytes", Kind::gauge, "memory in use"};
  const MetricInfo lie{"percent", Kind::counter, "not what it is"};
  EXPECT_EQ(infos.learn("node01", "VirtualMemory", "used", bytes), MetricInfoStore::Learned::added);
  EXPECT_EQ(infos.learn("node02", "VirtualMemory", "used", bytes), MetricInfoStore::Learned::same);
  std::string owner;
  EXPECT_EQ(infos.learn("evil", "VirtualMemory", "used", lie, &owner), MetricInfoStore::Learned::kept_other);
  EXPECT_EQ(owner, "node01");
  EXPECT_EQ(infos.find("VirtualMemory", "used")->unit, "bytes");
  MetricInfo upgraded = bytes;
  upgraded.description = "memory in use, as the kernel counts it";
  EXPECT_EQ(infos.learn("node01", "VirtualMemory", "used", upgraded), MetricInfoStore::Learned::replaced);
  EXPECT_EQ(infos.find("VirtualMemory", "used")->description, upgraded.description);
  // lmaster's own keys are its to say.
  infos.remember("lmaster", "queued", {"count", Kind::gauge, "x"});
  EXPECT_EQ(infos.learn("node01", "lmaster", "queued", bytes), MetricInfoStore::Learned::kept_other);
  EXPECT_EQ(infos.keys_of("VirtualMemory").size(), 1u);
}

}  // namespace
}  // namespace fructosa::master
