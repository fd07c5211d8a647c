// The spool's and the journal's records written by earlier versions must still check: the CRC is
// the standard CRC-32 (check value of "123456789").
#include <gtest/gtest.h>

#include <string>

#include "crc32.h"

TEST(Crc32, IsTheStandardCrc32) {
  const std::string check = "123456789";
  EXPECT_EQ(fructosa::crc32(check.data(), check.size()), 0xCBF43926u);
  EXPECT_EQ(fructosa::crc32("", 0), 0u);
}
