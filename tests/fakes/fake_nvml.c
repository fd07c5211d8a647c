/* A stand-in for libnvidia-ml.so.1 for NvidiaGPU's tests (tests/unit/gpu_ipmi_test.cpp).
 *
 * It implements the NVML calls the sensor uses, with NVML's documented ABI (return codes, enum
 * values, struct layouts), for a fixed node of two GPUs:
 *   GPU 0  "NVIDIA H100 80GB HBM3", MIG disabled, every value supported;
 *   GPU 1  "NVIDIA A100-SXM4-40GB", MIG enabled with MIG devices in slots 0 and 1 (of 7);
 *          utilization is NOT_SUPPORTED on it and on its MIG devices, as on real MIG GPUs.
 * The values are constants (listed below and asserted by the tests). Device minors are not the
 * indices (GPU 0 is /dev/nvidia3, GPU 1 /dev/nvidia1), as NVML allows.
 *
 * Running compute processes come from the environment, read at every call so a test can
 * change them between readings:
 *   FAKE_NVML_PIDS="pid:gpu:bytes[:mig],..."   bytes "-" = NVML_VALUE_NOT_AVAILABLE;
 *                                              mig = the MIG slot (GPU 1 only; default 0)
 *   FAKE_NVML_INIT=<code>                      nvmlInit_v2 returns this code (e.g. 9)
 * fake_nvml_init_calls() / fake_nvml_shutdown_calls() count nvmlInit_v2 / nvmlShutdown.
 *
 * Written for this project; nothing here comes from nvml.h. */
#include <stdlib.h>
#include <string.h>

typedef int nvmlReturn_t;
enum {
  SUCCESS = 0,
  ERROR_UNINITIALIZED = 1,
  ERROR_INVALID_ARGUMENT = 2,
  ERROR_NOT_SUPPORTED = 3,
  ERROR_NOT_FOUND = 6,
  ERROR_INSUFFICIENT_SIZE = 7,
  ERROR_DRIVER_NOT_LOADED = 9,
  ERROR_UNKNOWN = 999
};

struct fake_device {
  int gpu;  /* index of the physical GPU */
  int mig;  /* -1: the physical GPU; else the MIG slot */
  const char* name;
  const char* uuid;
  unsigned long long memory_total, memory_used;
};
typedef struct fake_device* nvmlDevice_t;

typedef struct {
  unsigned int gpu, memory;
} nvmlUtilization_t;
typedef struct {
  unsigned long long total, free, used;
} nvmlMemory_t;
typedef struct {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
} nvmlProcessInfo_t;

#define EXPORT __attribute__((visibility("default")))

static struct fake_device gpus[2] = {
    {0, -1, "NVIDIA H100 80GB HBM3", "GPU-0a0b0c0d-0000-4000-8000-000000000000", 85520809984ULL, 1048576000ULL},
    {1, -1, "NVIDIA A100-SXM4-40GB", "GPU-1a1b1c1d-1111-4111-8111-111111111111", 42949672960ULL, 2147483648ULL},
};
static struct fake_device migs[2] = {
    {1, 0, "NVIDIA A100-SXM4-40GB MIG 3g.20gb", "MIG-2a2b2c2d-2222-4222-8222-222222222222", 20937965568ULL, 1073741824ULL},
    {1, 1, "NVIDIA A100-SXM4-40GB MIG 2g.10gb", "MIG-3a3b3c3d-3333-4333-8333-333333333333", 10468982784ULL, 536870912ULL},
};
static int initialized = 0;
static int init_calls = 0, shutdown_calls = 0;

EXPORT int fake_nvml_init_calls(void) { return init_calls; }
EXPORT int fake_nvml_shutdown_calls(void) { return shutdown_calls; }

EXPORT const char* nvmlErrorString(nvmlReturn_t code) {
  switch (code) {
    case SUCCESS: return "Success";
    case ERROR_UNINITIALIZED: return "Uninitialized";
    case ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case ERROR_NOT_SUPPORTED: return "Not Supported";
    case ERROR_NOT_FOUND: return "Not Found";
    case ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
    default: return "Unknown Error";
  }
}

EXPORT nvmlReturn_t nvmlInit_v2(void) {
  const char* forced = getenv("FAKE_NVML_INIT");
  ++init_calls;
  if (forced && *forced && atoi(forced) != 0) return atoi(forced);
  ++initialized;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlShutdown(void) {
  ++shutdown_calls;
  if (initialized == 0) return ERROR_UNINITIALIZED;
  --initialized;
  return SUCCESS;
}

#define REQUIRE_INIT() \
  do {                 \
    if (!initialized) return ERROR_UNINITIALIZED; \
  } while (0)

EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
  REQUIRE_INIT();
  if (!count) return ERROR_INVALID_ARGUMENT;
  *count = 2;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
  REQUIRE_INIT();
  if (index >= 2 || !device) return ERROR_INVALID_ARGUMENT;
  *device = &gpus[index];
  return SUCCESS;
}

static nvmlReturn_t copy_text(const char* text, char* buffer, unsigned int length) {
  if (!buffer) return ERROR_INVALID_ARGUMENT;
  if (strlen(text) + 1 > length) return ERROR_INSUFFICIENT_SIZE;
  strcpy(buffer, text);
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
  REQUIRE_INIT();
  return device ? copy_text(device->name, name, length) : ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
  REQUIRE_INIT();
  return device ? copy_text(device->uuid, uuid, length) : ERROR_INVALID_ARGUMENT;
}

EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
  REQUIRE_INIT();
  if (!device || !utilization) return ERROR_INVALID_ARGUMENT;
  if (device->gpu == 1) return ERROR_NOT_SUPPORTED; /* MIG mode */
  utilization->gpu = 37;
  utilization->memory = 12;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
  REQUIRE_INIT();
  if (!device || !memory) return ERROR_INVALID_ARGUMENT;
  memory->total = device->memory_total;
  memory->used = device->memory_used;
  memory->free = device->memory_total - device->memory_used;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
  REQUIRE_INIT();
  if (!device || !minor) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *minor = device->gpu == 0 ? 3 : 1;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* milliwatts) {
  REQUIRE_INIT();
  if (!device || !milliwatts) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *milliwatts = device->gpu == 0 ? 123456 : 61000;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t device, unsigned long long* millijoules) {
  REQUIRE_INIT();
  if (!device || !millijoules) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *millijoules = device->gpu == 0 ? 987654321ULL : 5000000ULL;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, int sensor, unsigned int* celsius) {
  REQUIRE_INIT();
  if (!device || !celsius || sensor != 0 /* NVML_TEMPERATURE_GPU */) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *celsius = device->gpu == 0 ? 45 : 33;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetClockInfo(nvmlDevice_t device, int type, unsigned int* mhz) {
  /* NVML_CLOCK_GRAPHICS 0, NVML_CLOCK_SM 1, NVML_CLOCK_MEM 2 */
  static const unsigned int clocks[2][3] = {{1980, 1980, 2619}, {1410, 1410, 1215}};
  REQUIRE_INIT();
  if (!device || !mhz || type < 0 || type > 2) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *mhz = clocks[device->gpu][type];
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* current, unsigned int* pending) {
  REQUIRE_INIT();
  if (!device || !current || !pending) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *current = *pending = device->gpu == 1 ? 1 : 0;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
  REQUIRE_INIT();
  if (!device || !count) return ERROR_INVALID_ARGUMENT;
  if (device->mig >= 0) return ERROR_NOT_SUPPORTED;
  *count = 7;
  return SUCCESS;
}

EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index, nvmlDevice_t* mig) {
  REQUIRE_INIT();
  if (!device || !mig || device->mig >= 0) return ERROR_INVALID_ARGUMENT;
  if (device->gpu != 1) return ERROR_NOT_SUPPORTED; /* MIG disabled */
  if (index >= 7) return ERROR_INVALID_ARGUMENT;
  if (index >= 2) return ERROR_NOT_FOUND;
  *mig = &migs[index];
  return SUCCESS;
}

/* The FAKE_NVML_PIDS entries that run on `device`, at most `room` of them into `out` (which may
 * be NULL); returns how many there are in all. */
static unsigned int list_processes(nvmlDevice_t device, nvmlProcessInfo_t* out, unsigned int room) {
  const char* spec = getenv("FAKE_NVML_PIDS");
  unsigned int found = 0;
  while (spec && *spec) {
    char entry[128];
    size_t length = strcspn(spec, ",");
    if (length < sizeof entry) {
      unsigned int pid = 0;
      int gpu = -1, mig = 0;
      char bytes[32] = "";
      memcpy(entry, spec, length);
      entry[length] = '\0';
      {
        char* fields[4] = {0, 0, 0, 0};
        int n = 0;
        char* save = NULL;
        for (char* field = strtok_r(entry, ":", &save); field && n < 4; field = strtok_r(NULL, ":", &save))
          fields[n++] = field;
        if (n >= 3) {
          pid = (unsigned int)strtoul(fields[0], NULL, 10);
          gpu = atoi(fields[1]);
          strncpy(bytes, fields[2], sizeof bytes - 1);
          if (n == 4) mig = atoi(fields[3]);
        }
      }
      if (gpu == device->gpu && (device->mig < 0 || device->mig == mig)) {
        if (out && found < room) {
          out[found].pid = pid;
          out[found].usedGpuMemory = strcmp(bytes, "-") == 0 ? ~0ULL : strtoull(bytes, NULL, 10);
          out[found].gpuInstanceId = gpu == 1 ? (unsigned int)mig : ~0U;
          out[found].computeInstanceId = gpu == 1 ? 0 : ~0U;
        }
        ++found;
      }
    }
    spec += length;
    if (*spec == ',') ++spec;
  }
  return found;
}

EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses_v3(nvmlDevice_t device, unsigned int* count,
                                                            nvmlProcessInfo_t* infos) {
  unsigned int found;
  REQUIRE_INIT();
  if (!device || !count) return ERROR_INVALID_ARGUMENT;
  found = list_processes(device, infos, infos ? *count : 0);
  if (found > *count) {
    *count = found;
    return ERROR_INSUFFICIENT_SIZE;
  }
  *count = found;
  return SUCCESS;
}
