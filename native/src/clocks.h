// Back-to-back clock readings, so a stamp on one clock can be put on another:
// CLOCK_REALTIME (software SO_TIMESTAMPING stamps), CLOCK_MONOTONIC (what
// bpf_ktime_get_ns() returns in the data plane) and a NIC's PTP hardware
// clock (/dev/ptpN; hardware stamps are raw PHC time).
#pragma once

#include <stdint.h>

#include <string>

namespace mup {

struct ClockSample {
  // CLOCK_REALTIME vs CLOCK_MONOTONIC: realtime = monotonic + rtMinusMono.
  int64_t realtimeNs = 0;   // midpoint of the narrowest realtime pair
  int64_t monotonicNs = 0;  // read between them
  int64_t rtMinusMonoNs = 0;
  int64_t rtMonoUncertaintyNs = 0;  // half the narrowest pair's width
  // The PHC, when a device was given: phc = realtime + phcMinusRt.
  bool phc = false;
  std::string phcDevice;
  std::string phcMethod;  // "PTP_SYS_OFFSET_EXTENDED" or "clock_gettime"
  int64_t phcNs = 0;
  int64_t phcMinusRtNs = 0;
  int64_t phcUncertaintyNs = 0;
  int samples = 0;
};

/** `samples` rounds of back-to-back reads; the narrowest window wins. Throws SysError on a PHC failure. */
ClockSample sampleClocks(const std::string& phcDevice, int samples);

}  // namespace mup
