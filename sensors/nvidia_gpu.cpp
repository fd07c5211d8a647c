// NvidiaGPU: NVIDIA GPUs through NVML, the library the driver installs (libnvidia-ml.so.1),
// loaded with dlopen at the first reading and kept loaded; nvidia-smi is never run.
//
// Per GPU <i> (NVML's index): utilization, memory, power, total energy, temperature, clocks,
// MIG mode, compute processes, and its /dev/nvidia<minor> number (what a job's devices cgroup
// allows: JobCgroup's label gpus, matched by fructosa-report); name and UUID as labels. A GPU in MIG mode also reports each
// MIG device <i>.mig<k> (k: NVML's MIG device index) with what NVML gives per MIG device
// (memory; utilization where supported; processes). A value NVML does not support on a device
// (NVML_ERROR_NOT_SUPPORTED, e.g. utilization in MIG mode) is left out silently; any other
// error leaves the value out too and is logged once per device and call.
//
// Per job: NVML's running compute processes (nvmlDeviceGetComputeRunningProcesses_v3, else
// _v2, else the v1 call) are mapped to jobs with JobDirectory::job_of_pid (<proc>/<pid>/cgroup);
// every job of the snapshot gets processes / process_memory totals (0 when it uses no GPU) and
// per-GPU / per-MIG-device keys where it has processes. Without job discovery (no
// SensorContext::jobs) or with per_job = false only the node sample is made.
//
// The NVML ABI below (return codes, enum values, struct layouts, symbol names) is restated
// from NVIDIA's documented interface; nvml.h is not needed to build.
#include <dlfcn.h>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "jobs.h"
#include "sensor.h"

namespace fructosa::sensors::nvidia_gpu_file {
namespace {

// --- NVML's ABI ------------------------------------------------------------------------------
namespace nvml {

using Return = int;  // nvmlReturn_t
constexpr Return kSuccess = 0;
constexpr Return kNotSupported = 3;
constexpr Return kNotFound = 6;
constexpr Return kInsufficientSize = 7;

struct DeviceSt;
using Device = DeviceSt*;  // nvmlDevice_t, an opaque handle

struct Utilization {  // nvmlUtilization_t
  unsigned int gpu;
  unsigned int memory;
};
struct Memory {  // nvmlMemory_t (v1), bytes
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
struct ProcessInfo {  // nvmlProcessInfo_t of the _v2 and _v3 calls
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t of the unversioned call
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
static_assert(sizeof(Utilization) == 8 && sizeof(Memory) == 24);
static_assert(sizeof(ProcessInfo) == 24 && sizeof(ProcessInfoV1) == 16);

constexpr unsigned long long kValueNotAvailable = ~0ULL;  // NVML_VALUE_NOT_AVAILABLE
constexpr int kTemperatureGpu = 0;                        // NVML_TEMPERATURE_GPU
constexpr int kClockGraphics = 0, kClockSm = 1, kClockMem = 2;  // nvmlClockType_t
constexpr unsigned int kMigEnabled = 1;                   // NVML_DEVICE_MIG_ENABLE
constexpr unsigned int kNameBuffer = 96;                  // NVML_DEVICE_NAME_V2_BUFFER_SIZE
constexpr unsigned int kUuidBuffer = 96;                  // NVML_DEVICE_UUID_V2_BUFFER_SIZE

using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using GetCountFn = Return (*)(unsigned int*);
using GetHandleByIndexFn = Return (*)(unsigned int, Device*);
using GetTextFn = Return (*)(Device, char*, unsigned int);
using GetUtilizationFn = Return (*)(Device, Utilization*);
using GetMemoryFn = Return (*)(Device, Memory*);
using GetUintFn = Return (*)(Device, unsigned int*);
using GetUllFn = Return (*)(Device, unsigned long long*);
using GetTemperatureFn = Return (*)(Device, int, unsigned int*);
using GetClockFn = Return (*)(Device, int, unsigned int*);
using GetProcessesFn = Return (*)(Device, unsigned int*, void*);
using GetMigModeFn = Return (*)(Device, unsigned int*, unsigned int*);
using GetMigHandleFn = Return (*)(Device, unsigned int, Device*);

}  // namespace nvml

const OptionTable kOptions{
    {.name = "library",
     .type = OptionType::text,
     .default_value = "libnvidia-ml.so.1",
     .help = "the NVML library dlopen() loads: a soname searched as the dynamic linker does, or a "
             "path"},
    {.name = "per_job",
     .type = OptionType::boolean,
     .default_value = "true",
     .help = "map NVML's running compute processes to batch jobs ([jobs] discovery) and report "
             "per-job samples"},
    {.name = "mig",
     .type = OptionType::boolean,
     .default_value = "true",
     .help = "report the MIG devices of GPUs in MIG mode (<gpu>.mig<k>.*)"},
};

const Catalog kCatalog{
    {"*.utilization_gpu", Unit::percent, Kind::gauge,
     "percent of the last sample period a kernel ran on the GPU"},
    {"*.utilization_memory", Unit::percent, Kind::gauge,
     "percent of the last sample period device memory was read or written"},
    {"*.memory_used", Unit::bytes, Kind::gauge, "device memory allocated"},
    {"*.memory_total", Unit::bytes, Kind::gauge, "device memory installed"},
    {"*.memory_free", Unit::bytes, Kind::gauge, "device memory not allocated"},
    {"*.power", Unit::watts, Kind::gauge, "power draw of the board"},
    {"*.energy", Unit::joules, Kind::counter, "energy used since the driver was loaded"},
    {"*.temperature", Unit::celsius, Kind::gauge, "GPU core temperature"},
    {"*.clock_graphics", Unit::hertz_mega, Kind::gauge, "graphics clock"},
    {"*.clock_sm", Unit::hertz_mega, Kind::gauge, "streaming multiprocessor clock"},
    {"*.clock_memory", Unit::hertz_mega, Kind::gauge, "memory clock"},
    {"*.mig_mode", Unit::boolean, Kind::gauge, "1 when the GPU is in MIG mode"},
    {"*.minor", Unit::none, Kind::gauge, "the GPU's device file /dev/nvidia<minor> (what cgroups allow jobs)"},
    {"*.processes", Unit::count, Kind::gauge,
     "compute processes on the GPU (in a per-job sample: the job's)"},
    {"*.process_memory", Unit::bytes, Kind::gauge,
     "device memory used by those processes (left out when NVML cannot tell, e.g. without "
     "privileges)"},
    {"*.*.utilization_gpu", Unit::percent, Kind::gauge, "MIG device <gpu>.mig<k>: GPU utilization"},
    {"*.*.utilization_memory", Unit::percent, Kind::gauge, "MIG device: memory utilization"},
    {"*.*.memory_used", Unit::bytes, Kind::gauge, "MIG device: memory allocated"},
    {"*.*.memory_total", Unit::bytes, Kind::gauge, "MIG device: memory of its instance"},
    {"*.*.memory_free", Unit::bytes, Kind::gauge, "MIG device: memory not allocated"},
    {"*.*.processes", Unit::count, Kind::gauge,
     "MIG device: compute processes on it (in a per-job sample: the job's)"},
    {"*.*.process_memory", Unit::bytes, Kind::gauge, "MIG device: memory used by those processes"},
    {"processes", Unit::count, Kind::gauge, "per-job sample: the job's compute processes on all GPUs"},
    {"process_memory", Unit::bytes, Kind::gauge,
     "per-job sample: device memory used by the job's processes on all GPUs"},
};

// What one device's processes add up to (for the node, or for one job).
struct Usage {
  std::uint64_t processes = 0;
  std::uint64_t memory = 0;
  bool memory_known = false;
  void add(unsigned long long used) {
    ++processes;
    if (used != nvml::kValueNotAvailable) {
      memory += used;
      memory_known = true;
    }
  }
};

struct GpuInfo {
  nvml::Device handle = nullptr;
  std::string key;  // "0"
  std::string name, uuid;
  std::optional<unsigned int> minor;
};

class NvidiaGPUSensor final : public Sensor {
 public:
  explicit NvidiaGPUSensor(const SensorContext& context)
      : library_(context.options.get_text("library")),
        jobs_(context.options.get_bool("per_job") ? context.jobs : nullptr),
        mig_(context.options.get_bool("mig")) {}

  ~NvidiaGPUSensor() override {
    // The library stays loaded (unloading NVML is known to be fragile); NVML's reference
    // count goes back down.
    if (initialized_ && shutdown_) shutdown_();
  }

  bool sample(SampleWriter& out) override {
    load();
    unsigned int count = 0;
    nvml::Return code = get_count_(&count);
    if (code != nvml::kSuccess) throw SensorUnavailable(fmt::format("{}: {}", get_count_name_, error(code)));
    if (count == 0) throw SensorUnavailable("NVML reports no GPU");
    if (count != gpus_.size()) enumerate(count);

    pid_jobs_.clear();
    job_usage_.clear();
    values_ = 0;
    listed_any_ = false;
    first_error_.clear();
    for (auto& gpu : gpus_) read_gpu(out, gpu);
    if (values_ == 0)
      throw SensorUnavailable(fmt::format("NVML gave no value for any of the {} GPUs ({})", gpus_.size(),
                                          first_error_.empty() ? "nothing supported" : first_error_));
    // Per-job samples only when some process list could be read (else every job would show
    // 0 processes where NVML said nothing, e.g. without the privileges for other users' ones).
    if (jobs_ && listed_any_) write_jobs(out);
    return true;
  }

 private:
  template <class Fn>
  Fn symbol(const char* name) {
    return reinterpret_cast<Fn>(::dlsym(handle_, name));
  }

  template <class Fn>
  Fn required(const char* name, const char* fallback = nullptr, const char** used = nullptr) {
    Fn fn = symbol<Fn>(name);
    if (!fn && fallback) {
      fn = symbol<Fn>(fallback);
      name = fallback;
    }
    if (!fn) throw SensorUnavailable(fmt::format("{} has no {}: not a usable NVML", library_, name));
    if (used) *used = name;
    return fn;
  }

  // dlopen once (retried each round until it works), then nvmlInit once (retried until it
  // works).
  void load() {
    if (!handle_) {
      ::dlerror();
      void* handle = ::dlopen(library_.c_str(), RTLD_NOW | RTLD_LOCAL);
      if (!handle) {
        const char* why = ::dlerror();
        throw SensorUnavailable(fmt::format("cannot load {}: {}", library_, why ? why : "unknown dlopen error"));
      }
      handle_ = handle;
      try {
        resolve();
      } catch (...) {
        handle_ = nullptr;
        ::dlclose(handle);
        throw;
      }
    }
    if (!initialized_) {
      nvml::Return code = init_();
      if (code != nvml::kSuccess) throw SensorUnavailable(fmt::format("{} failed: {}", init_name_, error(code)));
      initialized_ = true;
    }
  }

  void resolve() {
    error_string_ = symbol<nvml::ErrorStringFn>("nvmlErrorString");
    init_ = required<nvml::InitFn>("nvmlInit_v2", "nvmlInit", &init_name_);
    shutdown_ = symbol<nvml::ShutdownFn>("nvmlShutdown");
    get_count_ = required<nvml::GetCountFn>("nvmlDeviceGetCount_v2", "nvmlDeviceGetCount", &get_count_name_);
    get_handle_ = required<nvml::GetHandleByIndexFn>("nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex",
                                                     &get_handle_name_);
    get_name_ = symbol<nvml::GetTextFn>("nvmlDeviceGetName");
    get_uuid_ = symbol<nvml::GetTextFn>("nvmlDeviceGetUUID");
    get_utilization_ = symbol<nvml::GetUtilizationFn>("nvmlDeviceGetUtilizationRates");
    get_memory_ = symbol<nvml::GetMemoryFn>("nvmlDeviceGetMemoryInfo");
    get_power_ = symbol<nvml::GetUintFn>("nvmlDeviceGetPowerUsage");
    get_minor_ = symbol<nvml::GetUintFn>("nvmlDeviceGetMinorNumber");
    get_energy_ = symbol<nvml::GetUllFn>("nvmlDeviceGetTotalEnergyConsumption");
    get_temperature_ = symbol<nvml::GetTemperatureFn>("nvmlDeviceGetTemperature");
    get_clock_ = symbol<nvml::GetClockFn>("nvmlDeviceGetClockInfo");
    get_mig_mode_ = symbol<nvml::GetMigModeFn>("nvmlDeviceGetMigMode");
    get_max_mig_ = symbol<nvml::GetUintFn>("nvmlDeviceGetMaxMigDeviceCount");
    get_mig_handle_ = symbol<nvml::GetMigHandleFn>("nvmlDeviceGetMigDeviceHandleByIndex");
    processes_version_ = 3;
    get_processes_ = symbol<nvml::GetProcessesFn>("nvmlDeviceGetComputeRunningProcesses_v3");
    if (!get_processes_) {
      processes_version_ = 2;
      get_processes_ = symbol<nvml::GetProcessesFn>("nvmlDeviceGetComputeRunningProcesses_v2");
    }
    if (!get_processes_) {
      processes_version_ = 1;
      get_processes_ = symbol<nvml::GetProcessesFn>("nvmlDeviceGetComputeRunningProcesses");
    }
  }

  std::string error(nvml::Return code) const {
    const char* text = error_string_ ? error_string_(code) : nullptr;
    return text ? fmt::format("{} (NVML error {})", text, code) : fmt::format("NVML error {}", code);
  }

  std::string text(nvml::GetTextFn fn, nvml::Device device, unsigned int size) {
    if (!fn) return {};
    std::string buffer(size, '\0');
    if (fn(device, buffer.data(), size) != nvml::kSuccess) return {};
    buffer.resize(buffer.find('\0') == std::string::npos ? buffer.size() : buffer.find('\0'));
    return buffer;
  }

  // The GPUs (again when their number changes); read_gpu() gets each one's handle, name and
  // UUID once (and again while that fails).
  void enumerate(unsigned int count) {
    gpus_.clear();
    for (unsigned int i = 0; i < count; ++i) gpus_.push_back(GpuInfo{nullptr, std::to_string(i), {}, {}, std::nullopt});
  }

  // An NVML call's outcome: true on success; otherwise logged once per device and call
  // (NOT_SUPPORTED at debug level: it is normal, e.g. utilization of a MIG device).
  bool check(const std::string& device, const char* call, nvml::Return code) {
    if (code == nvml::kSuccess) return true;
    note(device, call, code);
    return false;
  }

  void note(const std::string& device, const char* call, nvml::Return code) {
    if (first_error_.empty() && code != nvml::kNotSupported)
      first_error_ = fmt::format("GPU {}: {}: {}", device, call, error(code));
    if (!logged_.insert(fmt::format("{}/{}/{}", device, call, code)).second) return;
    if (code == nvml::kNotSupported)
      spdlog::debug("NvidiaGPU: GPU {}: {} is not supported; its values are left out", device, call);
    else
      spdlog::warn("NvidiaGPU: GPU {}: {} failed: {}; its values are left out", device, call, error(code));
  }

  void set(SampleWriter& out, const std::string& prefix, std::string_view metric, double value) {
    key_.assign(prefix).append(".").append(metric);
    out.set(key_, value);
    ++values_;
  }

  // Utilization and memory: what both GPUs and MIG devices report.
  void read_common(SampleWriter& out, const std::string& prefix, nvml::Device device) {
    nvml::Utilization utilization{};
    if (get_utilization_ &&
        check(prefix, "nvmlDeviceGetUtilizationRates", get_utilization_(device, &utilization))) {
      set(out, prefix, "utilization_gpu", utilization.gpu);
      set(out, prefix, "utilization_memory", utilization.memory);
    }
    nvml::Memory memory{};
    if (get_memory_ && check(prefix, "nvmlDeviceGetMemoryInfo", get_memory_(device, &memory))) {
      set(out, prefix, "memory_used", static_cast<double>(memory.used));
      set(out, prefix, "memory_total", static_cast<double>(memory.total));
      set(out, prefix, "memory_free", static_cast<double>(memory.free));
    }
  }

  void read_gpu(SampleWriter& out, GpuInfo& gpu) {
    if (!gpu.handle) {
      nvml::Return code = get_handle_(static_cast<unsigned int>(&gpu - gpus_.data()), &gpu.handle);
      if (!check(gpu.key, get_handle_name_, code)) {
        gpu.handle = nullptr;
        return;
      }
      gpu.name = text(get_name_, gpu.handle, nvml::kNameBuffer);
      gpu.uuid = text(get_uuid_, gpu.handle, nvml::kUuidBuffer);
      unsigned int minor = 0;
      if (get_minor_ && check(gpu.key, "nvmlDeviceGetMinorNumber", get_minor_(gpu.handle, &minor))) gpu.minor = minor;
    }
    const std::string& prefix = gpu.key;
    nvml::Device device = gpu.handle;
    if (!gpu.name.empty()) out.label(prefix + ".name", gpu.name);
    if (!gpu.uuid.empty()) out.label(prefix + ".uuid", gpu.uuid);
    if (gpu.minor) set(out, prefix, "minor", *gpu.minor);
    read_common(out, prefix, device);
    unsigned int milliwatts = 0;
    if (get_power_ && check(prefix, "nvmlDeviceGetPowerUsage", get_power_(device, &milliwatts)))
      set(out, prefix, "power", milliwatts / 1e3);
    unsigned long long millijoules = 0;
    if (get_energy_ && check(prefix, "nvmlDeviceGetTotalEnergyConsumption", get_energy_(device, &millijoules)))
      set(out, prefix, "energy", static_cast<double>(millijoules) / 1e3);
    unsigned int celsius = 0;
    if (get_temperature_ &&
        check(prefix, "nvmlDeviceGetTemperature", get_temperature_(device, nvml::kTemperatureGpu, &celsius)))
      set(out, prefix, "temperature", celsius);
    if (get_clock_) {
      static constexpr std::pair<int, std::string_view> kClocks[] = {
          {nvml::kClockGraphics, "clock_graphics"}, {nvml::kClockSm, "clock_sm"}, {nvml::kClockMem, "clock_memory"}};
      for (const auto& [type, metric] : kClocks) {
        unsigned int mhz = 0;
        if (check(prefix, "nvmlDeviceGetClockInfo", get_clock_(device, type, &mhz))) set(out, prefix, metric, mhz);
      }
    }
    bool mig = false;
    if (get_mig_mode_) {
      unsigned int current = 0, pending = 0;
      if (check(prefix, "nvmlDeviceGetMigMode", get_mig_mode_(device, &current, &pending))) {
        mig = current == nvml::kMigEnabled;
        set(out, prefix, "mig_mode", mig ? 1 : 0);
      }
    }

    // Processes of the whole GPU (in MIG mode NVML aggregates its MIG devices here, given the
    // privileges; else the MIG devices' lists are added up below).
    Usage gpu_usage;
    bool gpu_listed = processes(prefix, device, gpu_usage, prefix);
    if (mig && mig_ && get_max_mig_ && get_mig_handle_) {
      unsigned int slots = 0;
      if (check(prefix, "nvmlDeviceGetMaxMigDeviceCount", get_max_mig_(device, &slots))) {
        for (unsigned int k = 0; k < slots; ++k) {
          nvml::Device mig_device = nullptr;
          nvml::Return code = get_mig_handle_(device, k, &mig_device);
          if (code == nvml::kNotFound) continue;  // no MIG device in this slot
          if (!check(prefix, "nvmlDeviceGetMigDeviceHandleByIndex", code)) continue;
          std::string mig_prefix = fmt::format("{}.mig{}", prefix, k);
          auto uuid = text(get_uuid_, mig_device, nvml::kUuidBuffer);
          if (!uuid.empty()) out.label(mig_prefix + ".uuid", uuid);
          auto name = text(get_name_, mig_device, nvml::kNameBuffer);
          if (!name.empty()) out.label(mig_prefix + ".name", name);
          read_common(out, mig_prefix, mig_device);
          Usage mig_usage;
          if (processes(mig_prefix, mig_device, mig_usage, gpu_listed ? std::string() : prefix))
            write_usage(out, mig_prefix, mig_usage);
          if (!gpu_listed) {
            gpu_usage.processes += mig_usage.processes;
            gpu_usage.memory += mig_usage.memory;
            gpu_usage.memory_known |= mig_usage.memory_known;
          }
        }
      }
    }
    if (gpu_listed || gpu_usage.processes) write_usage(out, prefix, gpu_usage);
  }

  void write_usage(SampleWriter& out, const std::string& prefix, const Usage& usage) {
    set(out, prefix, "processes", static_cast<double>(usage.processes));
    if (usage.memory_known) set(out, prefix, "process_memory", static_cast<double>(usage.memory));
  }

  // Lists `device`'s compute processes into `usage` and, for per-job samples, into the usage
  // of their jobs under `prefix` and, when `gpu_prefix` is not empty, under that too.
  bool processes(const std::string& prefix, nvml::Device device, Usage& usage, const std::string& gpu_prefix) {
    if (!get_processes_) return false;
    const char* call = processes_version_ == 3   ? "nvmlDeviceGetComputeRunningProcesses_v3"
                       : processes_version_ == 2 ? "nvmlDeviceGetComputeRunningProcesses_v2"
                                                 : "nvmlDeviceGetComputeRunningProcesses";
    std::size_t stride = processes_version_ == 1 ? sizeof(nvml::ProcessInfoV1) : sizeof(nvml::ProcessInfo);
    nvml::Return code = nvml::kInsufficientSize;
    unsigned int count = 0;
    for (int attempt = 0; attempt < 4 && code == nvml::kInsufficientSize; ++attempt) {
      if (process_buffer_.size() < 64 * stride) process_buffer_.resize(64 * stride);
      count = static_cast<unsigned int>(process_buffer_.size() / stride);
      code = get_processes_(device, &count, process_buffer_.data());
      if (code == nvml::kInsufficientSize) process_buffer_.resize((count + 16) * stride);
    }
    if (!check(prefix, call, code)) return false;
    listed_any_ = true;
    for (unsigned int i = 0; i < count; ++i) {
      const unsigned char* entry = process_buffer_.data() + i * stride;
      unsigned int pid;
      unsigned long long used;
      if (processes_version_ == 1) {
        nvml::ProcessInfoV1 info;
        std::memcpy(&info, entry, sizeof info);
        pid = info.pid, used = info.usedGpuMemory;
      } else {
        nvml::ProcessInfo info;
        std::memcpy(&info, entry, sizeof info);
        pid = info.pid, used = info.usedGpuMemory;
      }
      usage.add(used);
      if (!jobs_) continue;
      std::uint64_t job = job_of(pid);
      if (job == 0) continue;
      auto& per_job = job_usage_[job];
      per_job[prefix].add(used);
      if (!gpu_prefix.empty() && gpu_prefix != prefix) per_job[gpu_prefix].add(used);
    }
    return true;
  }

  std::uint64_t job_of(unsigned int pid) {
    auto it = pid_jobs_.find(pid);
    if (it != pid_jobs_.end()) return it->second;
    std::uint64_t job = jobs_->job_of_pid(static_cast<int>(pid));
    pid_jobs_.emplace(pid, job);
    return job;
  }

  // One sample per job of the snapshot: totals over the GPUs (MIG devices are parts of a GPU,
  // so only whole-GPU keys count there), then what it runs on each GPU / MIG device.
  void write_jobs(SampleWriter& out) {
    auto snapshot = jobs_->snapshot();
    if (!snapshot) return;
    for (const auto& job : snapshot->jobs) {
      out.begin_job(job.id);
      Usage total;
      auto it = job_usage_.find(job.id);
      if (it != job_usage_.end()) {
        for (const auto& [prefix, usage] : it->second) {
          if (prefix.find('.') != std::string::npos) continue;
          total.processes += usage.processes;
          total.memory += usage.memory;
          total.memory_known |= usage.memory_known;
        }
      }
      out.set("processes", static_cast<double>(total.processes));
      if (total.memory_known || total.processes == 0) out.set("process_memory", static_cast<double>(total.memory));
      if (it == job_usage_.end()) continue;
      for (const auto& [prefix, usage] : it->second) write_usage(out, prefix, usage);
    }
  }

  const std::string library_;
  JobDirectory* const jobs_;
  const bool mig_;

  void* handle_ = nullptr;
  bool initialized_ = false;
  const char* init_name_ = "nvmlInit_v2";
  const char* get_count_name_ = "nvmlDeviceGetCount_v2";
  const char* get_handle_name_ = "nvmlDeviceGetHandleByIndex_v2";
  nvml::InitFn init_ = nullptr;
  nvml::ShutdownFn shutdown_ = nullptr;
  nvml::ErrorStringFn error_string_ = nullptr;
  nvml::GetCountFn get_count_ = nullptr;
  nvml::GetHandleByIndexFn get_handle_ = nullptr;
  nvml::GetTextFn get_name_ = nullptr;
  nvml::GetTextFn get_uuid_ = nullptr;
  nvml::GetUtilizationFn get_utilization_ = nullptr;
  nvml::GetMemoryFn get_memory_ = nullptr;
  nvml::GetUintFn get_power_ = nullptr;
  nvml::GetUintFn get_minor_ = nullptr;
  nvml::GetUllFn get_energy_ = nullptr;
  nvml::GetTemperatureFn get_temperature_ = nullptr;
  nvml::GetClockFn get_clock_ = nullptr;
  nvml::GetMigModeFn get_mig_mode_ = nullptr;
  nvml::GetUintFn get_max_mig_ = nullptr;
  nvml::GetMigHandleFn get_mig_handle_ = nullptr;
  nvml::GetProcessesFn get_processes_ = nullptr;
  int processes_version_ = 3;

  std::vector<GpuInfo> gpus_;
  std::vector<unsigned char> process_buffer_;
  std::unordered_map<unsigned int, std::uint64_t> pid_jobs_;                 // this round
  std::map<std::uint64_t, std::map<std::string, Usage>> job_usage_;         // this round
  std::set<std::string> logged_;
  std::string first_error_;
  std::size_t values_ = 0;
  bool listed_any_ = false;
  std::string key_;
};

}  // namespace

FRUCTOSA_REGISTER_SENSOR("NvidiaGPU",
                         "NVIDIA GPUs through NVML (dlopen libnvidia-ml.so.1): utilization, memory, "
                         "power, energy, temperature, clocks, MIG devices, per-job processes",
                         kOptions, kCatalog, NvidiaGPUSensor, .row = DashboardRow::gpu, .job_keys = "processes,*.processes,*.process_memory,*.*.processes,*.*.process_memory");

}  // namespace fructosa::sensors::nvidia_gpu_file
