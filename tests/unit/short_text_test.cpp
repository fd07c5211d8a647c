// common/short_text.h: the inline comparisons and copies of every size around their branches.
#include <gtest/gtest.h>

#include <string>

#include "short_text.h"

using fructosa::assign_text;
using fructosa::copy_text;
using fructosa::same_text;

namespace {

std::string text_of(std::size_t size, char first = 'a') {
  std::string text;
  for (std::size_t i = 0; i < size; ++i) text.push_back(static_cast<char>(first + i % 26));
  return text;
}

TEST(ShortText, SameTextTellsEveryDifferingByteAndSize) {
  for (std::size_t size = 0; size <= 40; ++size) {
    const std::string a = text_of(size);
    EXPECT_TRUE(same_text(a, std::string(a))) << size;
    EXPECT_FALSE(same_text(a, a + "x")) << size;
    for (std::size_t at = 0; at < size; ++at) {
      std::string b = a;
      b[at] = '#';
      EXPECT_FALSE(same_text(a, b)) << size << " differing at " << at;
    }
  }
}

TEST(ShortText, CopyTextCopiesEverySizeAndNothingAfter) {
  for (std::size_t size = 0; size <= 40; ++size) {
    const std::string from = text_of(size);
    std::string to(48, '.');
    char* end = copy_text(to.data(), from.data(), size);
    EXPECT_EQ(end, to.data() + size);
    EXPECT_EQ(to, from + std::string(48 - size, '.')) << size;
  }
}

TEST(ShortText, AssignTextGivesTheTextWhateverTheSizeBefore) {
  std::string to = text_of(12);
  for (std::size_t size : {12u, 12u, 3u, 30u, 30u, 0u, 17u}) {
    const std::string from = text_of(size, 'k');
    assign_text(to, from);
    EXPECT_EQ(to, from);
  }
}

}  // namespace
