// The daemons' pidfile: held while the process lives, refused through a link or onto anything
// but a regular file (a root daemon must not truncate what a planted link points at).
#include "daemon.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "test_support.h"

namespace fructosa {
namespace {

namespace fs = std::filesystem;
using test::TempDir;

TEST(Pidfile, HoldsThePidAndGoesAtTheEnd) {
  TempDir dir;
  {
    Pidfile pidfile(dir.file("x.pid"));
    EXPECT_EQ(Pidfile::holder(dir.file("x.pid")), ::getpid());
  }
  EXPECT_FALSE(fs::exists(dir.file("x.pid")));
}

TEST(Pidfile, ALinkIsNotFollowedAndItsTargetIsLeftAlone) {
  TempDir dir;
  std::ofstream(dir.file("precious")) << "keep me\n";
  fs::create_symlink(dir.file("precious"), dir.file("x.pid"));
  EXPECT_THROW(Pidfile pidfile(dir.file("x.pid")), std::runtime_error);
  EXPECT_FALSE(Pidfile::holder(dir.file("x.pid")));
  std::ifstream in(dir.file("precious"));
  std::string text;
  std::getline(in, text);
  EXPECT_EQ(text, "keep me");
}

TEST(Pidfile, AFifoIsRefusedWithoutBlocking) {
  TempDir dir;
  ASSERT_EQ(::mkfifo(dir.file("x.pid").c_str(), 0600), 0);
  try {
    Pidfile pidfile(dir.file("x.pid"));
    ADD_FAILURE() << "a fifo was taken as a pidfile";
  } catch (const std::runtime_error& error) {
    EXPECT_NE(std::string(error.what()).find("not a regular file"), std::string::npos) << error.what();
  }
}

}  // namespace
}  // namespace fructosa
