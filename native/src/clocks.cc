#include "clocks.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/ptp_clock.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include "sys_error.h"

namespace mup {

namespace {

int64_t read(clockid_t id) {
  timespec t{};
  clock_gettime(id, &t);
  return int64_t(t.tv_sec) * 1000000000LL + t.tv_nsec;
}

int64_t ptpNs(const ptp_clock_time& t) { return int64_t(t.sec) * 1000000000LL + t.nsec; }

// The dynamic clock id of an open PHC (FD_TO_CLOCKID in the kernel's
// testptp.c).
clockid_t fdToClockid(int fd) { return clockid_t((~unsigned(fd) << 3) | 3); }

}  // namespace

ClockSample sampleClocks(const std::string& phcDevice, int samples) {
  ClockSample s;
  if (samples < 1) samples = 1;
  s.samples = samples;
  int64_t best = INT64_MAX;
  for (int i = 0; i < samples; i++) {
    int64_t a = read(CLOCK_REALTIME);
    int64_t m = read(CLOCK_MONOTONIC);
    int64_t b = read(CLOCK_REALTIME);
    if (b - a < best) {
      best = b - a;
      s.realtimeNs = a + (b - a) / 2;
      s.monotonicNs = m;
      s.rtMinusMonoNs = s.realtimeNs - m;
      s.rtMonoUncertaintyNs = (b - a + 1) / 2;
    }
  }
  if (phcDevice.empty()) return s;

  int fd = ::open(phcDevice.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int e = errno;
    throw SysError(e, "open(" + phcDevice + ")", "open the NIC's PTP hardware clock",
                   e == ENOENT ? "no such device: the NIC has no PHC, or its index differs (the socket's "
                                 "tsInfo.phcIndex names it; -1 means none)"
                               : e == EACCES ? "run as root" : "");
  }
  s.phc = true;
  s.phcDevice = phcDevice;
  // Preferred: the driver reads system-PHC-system triplets itself, close together.
  ptp_sys_offset_extended ext{};
  ext.n_samples = unsigned(samples > PTP_MAX_SAMPLES ? PTP_MAX_SAMPLES : samples);
  if (ioctl(fd, PTP_SYS_OFFSET_EXTENDED, &ext) == 0) {
    s.phcMethod = "PTP_SYS_OFFSET_EXTENDED";
    int64_t w = INT64_MAX;
    for (unsigned i = 0; i < ext.n_samples; i++) {
      int64_t a = ptpNs(ext.ts[i][0]), p = ptpNs(ext.ts[i][1]), b = ptpNs(ext.ts[i][2]);
      if (b - a < w) {
        w = b - a;
        s.phcNs = p;
        s.phcMinusRtNs = p - (a + (b - a) / 2);
        s.phcUncertaintyNs = (b - a + 1) / 2;
      }
    }
  } else {
    s.phcMethod = "clock_gettime";
    clockid_t id = fdToClockid(fd);
    int64_t w = INT64_MAX;
    for (int i = 0; i < samples; i++) {
      timespec t{};
      int64_t a = read(CLOCK_REALTIME);
      int r = clock_gettime(id, &t);
      int64_t b = read(CLOCK_REALTIME);
      if (r != 0) {
        int e = errno;
        ::close(fd);
        throw SysError(e, "clock_gettime(" + phcDevice + ")", "read the NIC's PTP hardware clock", "");
      }
      int64_t p = int64_t(t.tv_sec) * 1000000000LL + t.tv_nsec;
      if (b - a < w) {
        w = b - a;
        s.phcNs = p;
        s.phcMinusRtNs = p - (a + (b - a) / 2);
        s.phcUncertaintyNs = (b - a + 1) / 2;
      }
    }
  }
  ::close(fd);
  return s;
}

}  // namespace mup
