// DiskUsage: psutil.disk_usage(path) for each configured path: statvfs(2) (which no procfs
// root can redirect), with psutil's arithmetic: `used` counts the blocks reserved for root
// as used, `free` is what unprivileged users can still write, `percent` is used / (used +
// free).
//
// Keys: with one path (the default, `/`), FrUCToSA's `total`, `used`, `free`, `percent`, and the
// path as the label `path` (Graphite keeps FrUCToSA's <host>.DiskUsage.percent; HDF5 and
// Elasticsearch the path too); with several, one set per path, `<path>.total` ... (the path
// a key component: `/home.percent`, in Graphite `_home.percent`).
//
// A path that cannot be read (missing, no permission) is a configuration problem: its keys
// are left out and the label `<path>.error` says why, in every reading, while the other
// paths are still reported. Only when no path works does the sensor throw SensorUnavailable
// naming them (the agent logs that once). Nothing is logged from here: `lagent probe` has
// the default logger on stdout, where it would break the JSON lines.
#include <fmt/format.h>
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "sensor.h"

namespace fructosa::sensors::disk_usage_file {
namespace {

const OptionTable kOptions{
    {"path", OptionType::list, "/", "comma-separated paths whose file systems are reported"},
};

const Catalog kCatalog{
    // One path: the label `path` names it.
    {"total", Unit::bytes, Kind::gauge, "size of the file system holding the path (f_blocks * f_frsize)"},
    {"used", Unit::bytes, Kind::gauge, "space in use, blocks reserved for root included (total - f_bfree * f_frsize)"},
    {"free", Unit::bytes, Kind::gauge, "space unprivileged users can still use (f_bavail * f_frsize)"},
    {"percent", Unit::percent, Kind::gauge, "used / (used + free): of the space unprivileged users can have, as df's Use%"},
    // Several paths: the path is the first component.
    {"*.total", Unit::bytes, Kind::gauge, "size of the file system holding the path (f_blocks * f_frsize)"},
    {"*.used", Unit::bytes, Kind::gauge, "space in use, blocks reserved for root included (total - f_bfree * f_frsize)"},
    {"*.free", Unit::bytes, Kind::gauge, "space unprivileged users can still use (f_bavail * f_frsize)"},
    {"*.percent", Unit::percent, Kind::gauge, "used / (used + free): of the space unprivileged users can have, as df's Use%"},
};

struct Watched {
  std::string path;
  std::string keys[4];  // [<path>.]total, used, free, percent
  std::string error_key;  // <path>.error, a label, while statvfs fails
};

class DiskUsageSensor final : public Sensor {
 public:
  explicit DiskUsageSensor(const SensorContext& context) {
    std::vector<std::string> paths;
    for (const auto& path : context.options.get_list("path"))
      if (std::find(paths.begin(), paths.end(), path) == paths.end()) paths.push_back(path);
    // make-dashboard decides the same way from the option (DashboardHints::per_item_option).
    bool one = paths.size() == 1;
    for (const auto& path : paths) {
      Watched watched{path, {}, {}};
      std::string prefix = one ? "" : key_component(path) + ".";
      const char* fields[] = {"total", "used", "free", "percent"};
      for (int i = 0; i < 4; ++i) watched.keys[i] = prefix + fields[i];
      watched.error_key = prefix + "error";
      paths_.push_back(std::move(watched));
    }
    if (one) path_label_ = paths.front();
  }

  bool sample(SampleWriter& out) override {
    if (paths_.empty()) throw SensorUnavailable("no path configured (option `path`)");
    std::size_t working = 0;
    std::string errors;
    for (auto& watched : paths_) {
      struct statvfs st;
      if (::statvfs(watched.path.c_str(), &st) != 0) {
        std::string error = fmt::format("statvfs({}): {}", watched.path, std::strerror(errno));
        out.label(watched.error_key, error);
        errors += (errors.empty() ? "" : "; ") + error;
        continue;
      }
      ++working;
      // _psposix.disk_usage(): exact integers, then one conversion.
      std::uint64_t frsize = st.f_frsize;
      std::uint64_t total = st.f_blocks * frsize;
      std::uint64_t avail_to_root = st.f_bfree * frsize;
      std::uint64_t avail_to_user = st.f_bavail * frsize;
      std::uint64_t used = total - avail_to_root;
      std::uint64_t total_user = used + avail_to_user;
      out.set(watched.keys[0], static_cast<double>(total));
      out.set(watched.keys[1], static_cast<double>(used));
      out.set(watched.keys[2], static_cast<double>(avail_to_user));
      out.set(watched.keys[3], usage_percent(static_cast<double>(used), static_cast<double>(total_user)));
      if (!path_label_.empty()) out.label("path", path_label_);
    }
    if (working == 0) throw SensorUnavailable(errors);
    return true;
  }

 private:
  std::vector<Watched> paths_;
  std::string path_label_;  // the one path, when only one is configured
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("DiskUsage", "Size, use and free space of the file systems holding given paths (psutil.disk_usage)",
                         kOptions, kCatalog, DiskUsageSensor, .row = DashboardRow::filesystem,
                         .per_item_option = "path");

}  // namespace fructosa::sensors::disk_usage_file
