// Storage sensors (SwapMemory, DiskPartitions, DiskUsage, DiskIOCounters) on node_exporter's
// captures (tests/fixtures/node-exporter) and synthesized trees (tests/fixtures/storage, see
// its README). Expected values come from psutil 5.9.4 pointed at the same files
// (psutil.PROCFS_PATH; for disk_io_counters also psutil._pslinux.is_storage_device patched to
// look under the fixture's sys/block), from node_exporter's e2e-output.txt, or by hand.
#include <gtest/gtest.h>
#include <mntent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/sysinfo.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <sstream>

#include "mounts.h"
#include "sensor.h"

using namespace fructosa;
using namespace fructosa::sensors;

namespace {

const std::string kFixtures = FRUCTOSA_FIXTURES;
const std::string kCapture = kFixtures + "/node-exporter";
const std::string kStorage = kFixtures + "/storage";

struct Reading {
  std::map<std::string, double> values;
  std::map<std::string, std::string> labels;
};

// A sensor with its options (the context refers to them, so they live as long).
struct Probe {
  Probe(const std::string& name, const std::string& proc, const std::string& sys,
        const std::vector<std::string>& pairs = {}) {
    const SensorDefinition* definition = find_sensor(name);
    if (!definition) throw std::runtime_error("no sensor " + name);
    options = std::make_unique<Options>(parse_pairs(*definition->options, pairs, "test"));
    sensor = definition->make(SensorContext{Roots{proc, sys}, *options});
  }
  Reading read() {
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", "test", 1);
    EXPECT_TRUE(sensor->sample(out));
    Reading reading;
    for (const auto& sample : samples) {
      for (const auto& metric : sample.metrics) {
        EXPECT_EQ(reading.values.count(metric.key), 0u) << "key reported twice: " << metric.key;
        reading.values[metric.key] = metric.value;
      }
      for (const auto& label : sample.labels) reading.labels[label.key] = label.value;
    }
    return reading;
  }
  // The SensorUnavailable message, or "" when the reading worked.
  std::string unavailable() {
    std::vector<Sample> samples;
    SampleWriter out(samples, "node", "test", 1);
    try {
      sensor->sample(out);
    } catch (const SensorUnavailable& why) {
      return why.what();
    }
    return {};
  }
  std::unique_ptr<Options> options;
  std::unique_ptr<Sensor> sensor;
};

class TempDir {
 public:
  TempDir() {
    char pattern[] = "/tmp/fructosa-storage-XXXXXX";
    path_ = ::mkdtemp(pattern);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string path() const { return path_.string(); }
  // Writes in place (truncating), so a file a sensor keeps open sees the new content.
  void write(const std::string& name, const std::string& text) const {
    std::filesystem::create_directories((path_ / name).parent_path());
    std::ofstream(path_ / name, std::ios::trunc) << text;
  }
  void copy(const std::string& from, const std::string& name) const {
    std::ifstream in(from);
    std::stringstream text;
    text << in.rdbuf();
    write(name, text.str());
  }

 private:
  std::filesystem::path path_;
};

using Counters = std::array<double, 9>;
const char* const kIoFields[] = {"read_count", "write_count", "read_bytes", "write_bytes", "read_time",
                                 "write_time", "read_merged_count", "write_merged_count", "busy_time"};

std::map<std::string, double> io_keys(const std::string& disk, const Counters& values) {
  std::map<std::string, double> keys;
  for (int i = 0; i < 9; ++i) keys[(disk.empty() ? "" : disk + ".") + kIoFields[i]] = values[i];
  return keys;
}

std::map<std::string, double> io_keys(const std::vector<std::pair<std::string, Counters>>& disks) {
  std::map<std::string, double> keys;
  for (const auto& [disk, values] : disks) keys.merge(io_keys(disk, values));
  return keys;
}

std::optional<double> pathconf_of(const std::string& path, int name) {
  errno = 0;
  long value = ::pathconf(path.c_str(), name);
  if (value == -1 && errno != 0) return std::nullopt;
  return static_cast<double>(value);
}

}  // namespace

// --- SwapMemory ------------------------------------------------------------------------

TEST(SwapMemory, MatchesPsutilOnTheCapture) {
  Probe probe("SwapMemory", kCapture + "/proc", kCapture + "/sys");
  // psutil.swap_memory() on the capture; sin/sout are e2e-output.txt's node_vmstat_pswpin
  // 1476 and node_vmstat_pswpout 35045 pages of 4 KiB.
  const std::map<std::string, double> expected{{"total", 4294963200}, {"used", 1063874560},
                                               {"free", 3231088640},  {"percent", 24.8},
                                               {"sin", 1476 * 4096.0}, {"sout", 35045 * 4096.0}};
  EXPECT_EQ(probe.read().values, expected);
}

TEST(SwapMemory, NoSwapIsZerosNotUnavailable) {
  TempDir proc;
  proc.write("meminfo", "MemTotal:  1000 kB\nMemFree:  500 kB\nSwapTotal:  0 kB\nSwapFree:  0 kB\n");
  proc.write("vmstat", "pswpin 0\npswpout 0\n");
  Probe probe("SwapMemory", proc.path(), proc.path());
  const std::map<std::string, double> expected{{"total", 0}, {"used", 0}, {"free", 0},
                                               {"percent", 0}, {"sin", 0}, {"sout", 0}};
  EXPECT_EQ(probe.read().values, expected);
}

TEST(SwapMemory, FallsBackToSysinfoAndZeroesSinSoutWithoutBothLines) {
  // meminfo without SwapTotal/SwapFree: psutil asks sysinfo(2), which no root redirects.
  Probe probe("SwapMemory", kStorage + "/swap-fallback/proc", kStorage + "/swap-fallback/sys");
  auto values = probe.read().values;
  struct sysinfo info;
  ASSERT_EQ(::sysinfo(&info), 0);
  EXPECT_EQ(values["total"], static_cast<double>(info.totalswap) * info.mem_unit);
  EXPECT_EQ(values["used"], values["total"] - values["free"]);
  // vmstat has pswpin but no pswpout: psutil reports both as 0.
  EXPECT_EQ(values["sin"], 0);
  EXPECT_EQ(values["sout"], 0);
  // Without vmstat at all, the same; without meminfo the sensor is unavailable.
  TempDir proc;
  proc.write("meminfo", "SwapTotal:  2048 kB\nSwapFree:  1024 kB\n");
  Probe no_vmstat("SwapMemory", proc.path(), proc.path());
  const std::map<std::string, double> expected{{"total", 2097152}, {"used", 1048576}, {"free", 1048576},
                                               {"percent", 50}, {"sin", 0}, {"sout", 0}};
  EXPECT_EQ(no_vmstat.read().values, expected);
  Probe no_meminfo("SwapMemory", proc.path() + "/nothing", proc.path());
  EXPECT_NE(no_meminfo.unavailable().find("/nothing/meminfo"), std::string::npos);
}

TEST(SwapMemory, ReadsVmstatOnlyAsFarAsNeededButWholeLines) {
  // The sensor reads /proc/vmstat in steps (2 KiB first): a line cut by a step is read
  // whole, lines after both counters do not matter, and a rewrite is seen.
  TempDir proc;
  proc.write("meminfo", "SwapTotal:  0 kB\nSwapFree:  0 kB\n");
  std::string filler;
  while (filler.size() < 2040) filler += "nr_filler_pages 12345\n";
  filler.resize(2039);
  filler += "\n";  // "pswpin 123456789" then spans bytes 2040 to 2056, across the first step
  proc.write("vmstat", filler + "pswpin 123456789\npswpout 42\npswpin 1\n");
  Probe probe("SwapMemory", proc.path(), proc.path());
  auto values = probe.read().values;
  EXPECT_EQ(values["sin"], 123456789 * 4096.0);
  EXPECT_EQ(values["sout"], 42 * 4096.0);
  proc.write("vmstat", "pswpout 5\npswpin 6\n");
  values = probe.read().values;
  EXPECT_EQ(values["sin"], 6 * 4096.0);
  EXPECT_EQ(values["sout"], 5 * 4096.0);
  proc.write("vmstat", "pswpout 5\n");  // only one of the two: psutil's 0 and 0
  values = probe.read().values;
  EXPECT_EQ(values["sin"], 0);
  EXPECT_EQ(values["sout"], 0);
}

// --- the mount table -------------------------------------------------------------------

TEST(Mounts, ParserAgreesWithGlibcGetmntent) {
  TempDir dir;
  std::string long_line = "/dev/sdz1 /" + std::string(5000, 'x') + " ext4 rw 0 0\n";
  std::ifstream in(kStorage + "/proc/self/mounts");
  std::stringstream fixture;
  fixture << in.rdbuf();
  for (const std::string& text :
       {fixture.str(), long_line + "/dev/a /a ext4 rw 0 0\n", std::string("/dev/a /a ext4 rw  \t\n/dev/b /b"),
        std::string(" \t\n#x\n/dev/c\t\t/c  ext4   ro,noatime\n"), std::string(4094 - 10, 'y') + " /p ext4 rw \n"}) {
    dir.write("mounts", text);
    std::vector<MountEntry> expected;
    FILE* file = ::setmntent((dir.path() + "/mounts").c_str(), "r");
    ASSERT_NE(file, nullptr);
    while (mntent* entry = ::getmntent(file))
      expected.push_back({entry->mnt_fsname, entry->mnt_dir, entry->mnt_type, entry->mnt_opts});
    ::endmntent(file);
    std::vector<MountEntry> parsed;
    parse_mount_table(text, parsed);
    ASSERT_EQ(parsed.size(), expected.size()) << text.substr(0, 200);
    for (std::size_t i = 0; i < parsed.size(); ++i) {
      EXPECT_EQ(parsed[i].device, expected[i].device) << i;
      EXPECT_EQ(parsed[i].mountpoint, expected[i].mountpoint) << i;
      EXPECT_EQ(parsed[i].fstype, expected[i].fstype) << i;
      EXPECT_EQ(parsed[i].opts, expected[i].opts) << i;
    }
  }
  EXPECT_EQ(decode_mount_field("a\\040b\\011c\\012d\\134e\\\\f\\041"), "a b\tc\nd\\e\\f\\041");
  EXPECT_TRUE(has_mount_option("rw,ro", "ro"));
  EXPECT_FALSE(has_mount_option("rw,errors=remount-ro", "ro"));
}

TEST(Mounts, TheTableIsTheFixturesSelfMountsUnderAnotherRoot) {
  EXPECT_EQ(mount_table_path(Roots{"/x/proc", "/x/sys"}), "/x/proc/self/mounts");
  EXPECT_FALSE(mount_table_is_rewritten("/x/proc/self/mounts"));
  // Under /proc, psutil's choice: /etc/mtab when it is a file (usually a symlink into /proc).
  std::string real = mount_table_path(Roots{});
  struct stat info;
  EXPECT_EQ(real, ::stat("/etc/mtab", &info) == 0 && S_ISREG(info.st_mode) ? "/etc/mtab" : "/proc/self/mounts");
}

// --- DiskPartitions --------------------------------------------------------------------

namespace {

struct Partition {
  std::string mountpoint, device, fstype, opts;
};

// psutil.disk_partitions() with PROCFS_PATH = tests/fixtures/storage/proc.
const std::vector<Partition> kPhysical{
    {"/", "/dev/dm-2", "ext4", "rw,relatime,errors=remount-ro,data=ordered"},
    {"/boot", "/dev/sda3", "ext2", "rw,relatime"},
    {"/var/lib/kubelet/plugins/kubernetes.io/vsphere-volume/mounts/[vsanDatastore] bafb9e5a-8856-7e6c-699c-801844e77a4a/kubernetes-dynamic-pvc-3eba5bba-48a3-11e8-89ab-005056b92113.vmdk", "/dev/sda", "ext4", "rw,relatime,data=ordered"},
    {"/var/lib/kubelet/plugins/kubernetes.io/vsphere-volume/mounts/[vsanDatastore]\tbafb9e5a-8856-7e6c-699c-801844e77a4a/kubernetes-dynamic-pvc-3eba5bba-48a3-11e8-89ab-005056b92113.vmdk", "/dev/sda", "ext4", "rw,relatime,data=ordered"},
    {"/var/lib/containers/storage/overlay", "/dev/mapper/rhel-root", "xfs", "rw,relatime,seclabel,attr2,inode64,logbufs=8,logbsize=32k,noquota"},
    {"/home", "tank/home", "zfs", "rw,xattr,noacl"},
    {"/data", "/dev/sdb1", "ext4", "rw,relatime"},
    {"/data", "/dev/sdc1", "xfs", "ro,relatime"},
    {"/mnt/back\\slash", "/dev/sdd1", "ext4", "rw,relatime"},
    {"/srv/v1.2", "/dev/sde1", "ext4", "rw,relatime"},
    {"/mnt/new\nline", "/dev/sdf1", "vfat", "rw,relatime,fmask=0022,dmask=0022,codepage=437"},
};

// What the sensor reports for a psutil list: the last entry per mount point.
Reading expected_partitions(const std::vector<Partition>& partitions) {
  Reading expected;
  expected.values["count"] = static_cast<double>(partitions.size());
  for (const auto& p : partitions) {
    std::string key = key_component(p.mountpoint) + ".";
    expected.values[key + "readonly"] = has_mount_option(p.opts, "ro");
    // psutil's maxfile/maxpath: pathconf() on this machine (the fixture's mount points mostly
    // do not exist here: no maxfile then, as psutil's None).
    if (auto value = pathconf_of(p.mountpoint, _PC_NAME_MAX)) expected.values[key + "maxfile"] = *value;
    else expected.values.erase(key + "maxfile");
    if (auto value = pathconf_of(p.mountpoint, _PC_PATH_MAX)) expected.values[key + "maxpath"] = *value;
    else expected.values.erase(key + "maxpath");
    expected.labels[key + "device"] = p.device;
    expected.labels[key + "fstype"] = p.fstype;
    expected.labels[key + "opts"] = p.opts;
  }
  return expected;
}

}  // namespace

TEST(DiskPartitions, PhysicalOnesMatchPsutilOnTheFixture) {
  Probe probe("DiskPartitions", kStorage + "/proc", kStorage + "/sys");
  Reading reading = probe.read();
  Reading expected = expected_partitions(kPhysical);
  EXPECT_EQ(reading.values, expected.values);
  EXPECT_EQ(reading.labels, expected.labels);
  // Spot checks of the naming: the visible /data is the later, read-only xfs; dots and
  // control characters in mount points become '_', '/' and spaces stay.
  EXPECT_EQ(reading.values["count"], 11);
  EXPECT_EQ(reading.values["/data.readonly"], 1);
  EXPECT_EQ(reading.labels["/data.fstype"], "xfs");
  EXPECT_EQ(reading.labels["/srv/v1_2.device"], "/dev/sde1");
  EXPECT_EQ(reading.labels["/mnt/new_line.fstype"], "vfat");
  EXPECT_EQ(reading.labels["/mnt/back\\slash.device"], "/dev/sdd1");
  EXPECT_EQ(reading.values["/.maxpath"], 4096);
  for (const auto& [key, value] : reading.values)
    EXPECT_NE(find_sensor("DiskPartitions")->catalog->find(key), nullptr) << key;
}

TEST(DiskPartitions, AllListsEveryMountAsPsutil) {
  Probe probe("DiskPartitions", kStorage + "/proc", kStorage + "/sys", {"all=true"});
  Reading reading = probe.read();
  // psutil.disk_partitions(all=True): 41 entries, 39 mount points (/proc/sys/fs/binfmt_misc
  // and /data twice).
  EXPECT_EQ(reading.values["count"], 41);
  EXPECT_EQ(reading.labels.size(), 39u * 3);
  EXPECT_EQ(reading.labels["/proc/sys/fs/binfmt_misc.device"], "binfmt_misc");
  EXPECT_EQ(reading.labels["/run/none-device.device"], "");  // "none" becomes ""
  EXPECT_EQ(reading.labels["/mnt/short.fstype"], "");
  EXPECT_EQ(reading.labels["/mnt/short.opts"], "");
  EXPECT_EQ(reading.labels["/nfs.device"], "server:/export");
  EXPECT_EQ(reading.labels["/sys/fs/cgroup/cpu,cpuacct.opts"], "rw,nosuid,nodev,noexec,relatime,cpu,cpuacct");
  EXPECT_EQ(reading.values["/sys/fs/cgroup.readonly"], 1);
  EXPECT_EQ(reading.values["/sys.readonly"], 0);
}

TEST(DiskPartitions, FollowsChangesOfTheMountTable) {
  TempDir proc;
  proc.copy(kStorage + "/proc/filesystems", "filesystems");
  proc.write("self/mounts", "/dev/sda1 / ext4 rw 0 0\n");
  Probe probe("DiskPartitions", proc.path(), proc.path());
  EXPECT_EQ(probe.read().values["count"], 1);
  EXPECT_EQ(probe.read().labels["/.device"], "/dev/sda1");
  proc.write("self/mounts", "/dev/sda2 / ext4 ro 0 0\n/dev/sdb1 /nonexistent-scratch xfs rw 0 0\n");
  Reading reading = probe.read();
  EXPECT_EQ(reading.values["count"], 2);
  EXPECT_EQ(reading.labels["/.device"], "/dev/sda2");
  EXPECT_EQ(reading.values["/.readonly"], 1);
  EXPECT_EQ(reading.labels["/nonexistent-scratch.fstype"], "xfs");
  EXPECT_EQ(reading.values.count("/nonexistent-scratch.maxfile"), 0u);  // pathconf fails: psutil's None
  proc.write("self/mounts", "");
  EXPECT_EQ(probe.read().values, (std::map<std::string, double>{{"count", 0}}));
}

TEST(DiskPartitions, RootDeviceIsFoundAsPsutilsRootFsDeviceFinder) {
  // "/dev/root" is replaced by the device of "/" (its st_dev on this machine) looked up in
  // <proc>/partitions, kept only if that /dev node exists: the test names it "null" so
  // that the node is /dev/null.
  struct stat root;
  ASSERT_EQ(::stat("/", &root), 0);
  TempDir proc;
  proc.write("filesystems", "\text4\n");
  proc.write("self/mounts", "/dev/root / ext4 rw 0 0\n");
  proc.write("partitions", "major minor  #blocks  name\n\n" + std::to_string(major(root.st_dev)) + " " +
                               std::to_string(minor(root.st_dev)) + " 1000 null\n");
  Probe probe("DiskPartitions", proc.path(), proc.path() + "/no-sys");
  EXPECT_EQ(probe.read().labels["/.device"], "/dev/null");
  // Not found anywhere: the device stays "/dev/root".
  proc.write("partitions", "major minor  #blocks  name\n\n");
  proc.write("self/mounts", "/dev/root / ext4 rw 0 0\n\n");  // a change, so it is looked up again
  EXPECT_EQ(probe.read().labels["/.device"], "/dev/root");
}

TEST(DiskPartitions, MissingFilesMakeItUnavailable) {
  TempDir proc;
  proc.write("self/mounts", "/dev/sda1 / ext4 rw 0 0\n");
  Probe physical("DiskPartitions", proc.path(), proc.path());
  EXPECT_NE(physical.unavailable().find("/filesystems"), std::string::npos);
  // all=true does not need /proc/filesystems.
  Probe all("DiskPartitions", proc.path(), proc.path(), {"all=true"});
  EXPECT_EQ(all.read().values["count"], 1);
  Probe none("DiskPartitions", proc.path() + "/nothing", proc.path(), {"all=true"});
  EXPECT_NE(none.unavailable().find("/nothing/self/mounts"), std::string::npos);
}

// --- DiskUsage -------------------------------------------------------------------------

TEST(DiskUsage, FollowsPsutilsArithmetic) {
  Probe probe("DiskUsage", "/proc", "/sys", {"path=/," + kFixtures + ",/"});
  struct statvfs before;
  ASSERT_EQ(::statvfs(kFixtures.c_str(), &before), 0);
  Reading reading = probe.read();
  std::string fixtures = key_component(kFixtures);
  // The total does not move; used and free do (other processes write), so the test checks
  // psutil's identities instead: used + free = total - f_bfree + f_bavail blocks, percent =
  // round(used / (used + free) * 100, 1).
  EXPECT_EQ(reading.values[fixtures + ".total"], static_cast<double>(before.f_blocks) * before.f_frsize);
  for (const std::string& key : {std::string("/"), fixtures}) {
    double used = reading.values[key + ".used"], free = reading.values[key + ".free"];
    EXPECT_GT(reading.values[key + ".total"], 0) << key;
    EXPECT_LE(used, reading.values[key + ".total"]) << key;
    EXPECT_EQ(reading.values[key + ".percent"], python_round(used / (used + free) * 100, 1)) << key;
  }
  EXPECT_EQ(reading.values.size(), 8u);  // "/" given twice is reported once
  EXPECT_TRUE(reading.labels.empty());
}

TEST(DiskUsage, ABadPathIsLabelledAndTheOthersAreStillReported) {
  Probe probe("DiskUsage", "/proc", "/sys", {"path=/nonexistent-fructosa,/"});
  Reading reading = probe.read();
  EXPECT_EQ(reading.values.count("/.total"), 1u);
  EXPECT_EQ(reading.values.count("/nonexistent-fructosa.total"), 0u);
  EXPECT_EQ(reading.labels["/nonexistent-fructosa.error"], "statvfs(/nonexistent-fructosa): No such file or directory");
  // Nothing readable: unavailable, naming the path.
  Probe bad("DiskUsage", "/proc", "/sys", {"path=/nonexistent-fructosa"});
  EXPECT_EQ(bad.unavailable(), "statvfs(/nonexistent-fructosa): No such file or directory");
  Probe empty("DiskUsage", "/proc", "/sys", {"path="});
  EXPECT_NE(empty.unavailable().find("no path"), std::string::npos);
}

TEST(DiskUsage, DefaultsToTheRootFileSystem) {
  Probe probe("DiskUsage", "/proc", "/sys");
  Reading reading = probe.read();
  // One path: FrUCToSA's keys (Graphite <host>.DiskUsage.percent), the path as a label.
  EXPECT_EQ(reading.values.size(), 4u);
  for (const char* key : {"total", "used", "free", "percent"}) EXPECT_EQ(reading.values.count(key), 1u) << key;
  EXPECT_EQ(reading.labels, (std::map<std::string, std::string>{{"path", "/"}}));
  EXPECT_EQ(metric_info("DiskUsage", "free").unit, "bytes");
  EXPECT_EQ(metric_info("DiskUsage", "percent").unit, "percent");
  EXPECT_EQ(metric_info("DiskUsage", "/.free").unit, "bytes");
}

TEST(DiskUsage, OnePathHasThePlainKeysSeveralOneSetEach) {
  struct statvfs st;
  ASSERT_EQ(::statvfs(kFixtures.c_str(), &st), 0);
  Probe one("DiskUsage", "/proc", "/sys", {"path=" + kFixtures});
  Reading reading = one.read();
  EXPECT_EQ(reading.values["total"], static_cast<double>(st.f_blocks) * st.f_frsize);
  EXPECT_EQ(reading.labels["path"], kFixtures);
  // The same path twice is one path.
  Probe twice("DiskUsage", "/proc", "/sys", {"path=/,/"});
  EXPECT_EQ(twice.read().values.count("percent"), 1u);
  Probe two("DiskUsage", "/proc", "/sys", {"path=/," + kFixtures});
  reading = two.read();
  EXPECT_EQ(reading.values.count("percent"), 0u);
  EXPECT_EQ(reading.values.count("/.percent"), 1u);
  EXPECT_EQ(reading.values[key_component(kFixtures) + ".total"], static_cast<double>(st.f_blocks) * st.f_frsize);
  EXPECT_TRUE(reading.labels.empty());
}

// --- DiskIOCounters --------------------------------------------------------------------

TEST(DiskIOCounters, TotalsMatchPsutilOnTheCapture) {
  // Only sda and dm-5 have a directory in the capture's sys/block: psutil sums those two.
  Probe probe("DiskIOCounters", kCapture + "/proc", kCapture + "/sys");
  EXPECT_EQ(probe.read().values,
            io_keys("", {25358366, 28543674, 513756367360, 259506544640, 18493296, 63982644, 34367663, 11134226,
                         9712728}));
}

TEST(DiskIOCounters, PerDiskMatchesPsutilAndNodeExporterOnTheCapture) {
  Probe probe("DiskIOCounters", kCapture + "/proc", kCapture + "/sys", {"perdisk=true"});
  auto values = probe.read().values;
  EXPECT_EQ(values.size(), 51u * 9);  // every line, partitions included
  // psutil.disk_io_counters(perdisk=True) on the capture:
  auto expected = io_keys({
      {"sda", {25354637, 28444756, 513713216512, 258916880384, 18492372, 63877960, 34367663, 11134226, 9653880}},
      {"sda3", {340, 11, 1442816, 77824, 52, 8, 13, 8, 56}},
      {"dm-0", {59910002, 39231014, 513708655616, 258916802560, 46229572, 1158557800, 0, 0, 11325968}},
      {"nvme0n1p1", {1140, 1, 4797440, 512, 16, 0, 0, 0, 16}},
      {"sdb", {326552, 41822, 4944782848, 1010127360, 84, 5007, 841, 2895, 60730}},  // 18 fields (4.18+)
      {"sdc1", {231, 24, 17646592, 54272, 4, 0, 3, 23, 64}},                       // 20 fields (5.5+)
      {"ram15", {0, 0, 0, 0, 0, 0, 0, 0, 0}},
  });
  for (const auto& [key, value] : expected) EXPECT_EQ(values[key], value) << key;
  // node_exporter's e2e-output.txt: node_disk_read_bytes_total{device="dm-5"} 4.3150848e+07,
  // node_disk_io_time_seconds_total{device="vda"} 41614.592.
  EXPECT_EQ(values["dm-5.read_bytes"], 4.3150848e+07);
  EXPECT_EQ(values["vda.busy_time"], 41614592);
}

TEST(DiskIOCounters, IncludeAndExcludeSelectDisksByName) {
  Probe probe("DiskIOCounters", kCapture + "/proc", kCapture + "/sys",
              {"perdisk=true", "include=sd*,nvme0n1", "exclude=sd?[0-9]"});
  std::set<std::string> disks;
  for (const auto& [key, value] : probe.read().values) disks.insert(key.substr(0, key.find('.')));
  EXPECT_EQ(disks, (std::set<std::string>{"sda", "sdb", "sdc", "nvme0n1"}));
  // Totals over the selected whole disks only.
  Probe dm("DiskIOCounters", kCapture + "/proc", kCapture + "/sys", {"include=dm-*"});
  EXPECT_EQ(dm.read().values, io_keys("", {3729, 98918, 43150848, 589664256, 924, 104684, 0, 0, 58848}));
  Probe nothing("DiskIOCounters", kCapture + "/proc", kCapture + "/sys", {"exclude=*"});
  EXPECT_NE(nothing.unavailable().find("no disk that include/exclude select"), std::string::npos);
}

TEST(DiskIOCounters, WrappedCountersContinueAsPsutilsNowrap) {
  // Three readings (tests/fixtures/storage/diskstats/{1,2,3}): nvme0n1's 32-bit counters
  // wrap between 1 and 2, cciss/c0d0 is gone in 2 and back, lower, in 3 (counted afresh).
  TempDir proc;
  const std::string sys = kStorage + "/diskstats/sys";
  proc.copy(kStorage + "/diskstats/1/diskstats", "diskstats");
  Probe perdisk("DiskIOCounters", proc.path(), sys, {"perdisk=true"});
  Probe totals("DiskIOCounters", proc.path(), sys);
  // psutil.disk_io_counters(perdisk=True), then (perdisk=False), across the same readings:
  const std::vector<std::map<std::string, double>> expected_perdisk{
      io_keys({{"sda", {1000, 2000, 4096000, 8192000, 500, 700, 10, 20, 900}},
               {"sda1", {900, 1900, 3584000, 7680000, 400, 600, 10, 20, 800}},
               {"sdb1", {100, 300, 102400, 204800, 0, 0, 0, 0, 0}},
               {"hda", {8, 60, 2560, 3584, 400, 560, 50, 70, 0}},
               {"nvme0n1", {4294967000, 10, 512000, 40960, 4294967290, 20, 0, 0, 4294967295}},
               {"cciss/c0d0", {10, 20, 40960, 81920, 5, 6, 0, 0, 7}},
               {"loop0", {0, 0, 0, 0, 0, 0, 0, 0, 0}}}),
      io_keys({{"sda", {1100, 2100, 4505600, 8601600, 550, 750, 11, 21, 950}},
               {"sda1", {1000, 2000, 3993600, 8089600, 450, 650, 11, 21, 850}},
               {"sdb1", {110, 330, 112640, 225280, 0, 0, 0, 0, 0}},
               {"hda", {8, 66, 2560, 3584, 440, 616, 55, 77, 0}},
               {"nvme0n1", {4294967100, 11, 563200, 45056, 4294967295, 22, 0, 0, 4294967305}},
               {"loop0", {0, 0, 0, 0, 0, 0, 0, 0, 0}}}),
      io_keys({{"sda", {1200, 2200, 4915200, 9011200, 600, 800, 12, 22, 1000}},
               {"sda1", {1100, 2100, 4403200, 8499200, 500, 700, 12, 22, 900}},
               {"sdb1", {120, 360, 122880, 245760, 0, 0, 0, 0, 0}},
               {"hda", {8, 72, 2560, 3584, 480, 672, 60, 84, 0}},
               {"nvme0n1", {4294967200, 12, 614400, 49152, 4294967305, 24, 0, 0, 4294967315}},
               {"cciss/c0d0", {5, 2, 20480, 8192, 1, 1, 0, 0, 1}},
               {"loop0", {0, 0, 0, 0, 0, 0, 0, 0, 0}}}),
  };
  const std::vector<Counters> expected_totals{
      {4294968018, 2090, 4651520, 8318464, 4294968195, 1286, 60, 90, 4294968202},
      {4294968208, 2177, 5071360, 8650240, 4294968285, 1388, 66, 98, 4294968255},
      {4294968413, 2286, 5552640, 9072128, 4294968386, 1497, 72, 106, 4294968316},
  };
  for (int reading = 0; reading < 3; ++reading) {
    proc.copy(kStorage + "/diskstats/" + std::to_string(reading + 1) + "/diskstats", "diskstats");
    EXPECT_EQ(perdisk.read().values, expected_perdisk[reading]) << "reading " << reading + 1;
    EXPECT_EQ(totals.read().values, io_keys("", expected_totals[reading])) << "reading " << reading + 1;
  }
}

TEST(DiskIOCounters, LinesOfUnknownLayoutAreSkipped) {
  TempDir proc;
  // 16 fields and a non-number: psutil raises ValueError; the sensor skips those lines.
  proc.write("diskstats",
             "   8 0 sdx 1 2 3 4 5 6 7 8 9 10 11 12 13\n"
             "   8 16 sdy 1 2 x 4 5 6 7 8 9 10 11\n"
             "\n"
             "   8 32 sdz 1 2 3 4 5 6 7 8 9 10 11\n");
  Probe probe("DiskIOCounters", proc.path(), proc.path(), {"perdisk=true"});
  EXPECT_EQ(probe.read().values, io_keys("sdz", {1, 5, 1536, 3584, 4, 8, 2, 6, 10}));
}

TEST(DiskIOCounters, ReadsSysfsWhenProcHasNoDiskstats) {
  // psutil's read_sysfs(): <sys>/block/*/stat and the partitions' stat below them. Worked
  // out by hand: sectors * 512; totals over sda and loop0 (sda1 has no <sys>/block entry).
  const std::string sys = kStorage + "/sysfs-fallback/sys";
  Probe perdisk("DiskIOCounters", kStorage + "/sysfs-fallback/proc", sys, {"perdisk=true"});
  EXPECT_EQ(perdisk.read().values, io_keys({{"sda", {100, 200, 1024000, 2048000, 300, 500, 5, 10, 600}},
                                            {"sda1", {50, 60, 512000, 614400, 100, 150, 1, 2, 120}},
                                            {"loop0", {1, 0, 4096, 0, 0, 0, 0, 0, 0}}}));
  Probe totals("DiskIOCounters", kStorage + "/sysfs-fallback/proc", sys);
  EXPECT_EQ(totals.read().values, io_keys("", {101, 200, 1028096, 2048000, 300, 500, 5, 10, 600}));
  Probe neither("DiskIOCounters", kStorage + "/sysfs-fallback/proc", kStorage + "/sysfs-fallback/nothing");
  EXPECT_NE(neither.unavailable().find("diskstats"), std::string::npos);
}

TEST(StorageSensors, AreRegisteredWithCatalogs) {
  for (const char* name : {"SwapMemory", "DiskPartitions", "DiskUsage", "DiskIOCounters"}) {
    const SensorDefinition* sensor = find_sensor(name);
    ASSERT_NE(sensor, nullptr) << name;
    EXPECT_FALSE(sensor->description.empty());
  }
  EXPECT_EQ(metric_info("SwapMemory", "sin").kind, Kind::counter);
  EXPECT_EQ(metric_info("SwapMemory", "total").kind, Kind::gauge);
  EXPECT_EQ(metric_info("DiskPartitions", "/.readonly").unit, "bool");
  EXPECT_EQ(metric_info("DiskIOCounters", "cciss/c0d0.read_time").unit, "milliseconds");
  EXPECT_EQ(metric_info("DiskIOCounters", "busy_time").kind, Kind::counter);
}
