// A raw AF_PACKET socket bound to one interface, with SO_TIMESTAMPING:
// hardware RX/TX stamps when the driver takes SIOCSHWTSTAMP, kernel
// software stamps otherwise. Batched send (sendmmsg) and receive
// (recvmmsg); TX stamps come back from the error queue, each tied to its
// frame by SOF_TIMESTAMPING_OPT_ID (and OPT_TSONLY: no payload copy).
//
// Plain POSIX and C++: no N-API here, so every call can run on a worker
// thread. Failures throw SysError. The blocking calls (send, recv,
// txStamps) poll the socket together with an eventfd, so close() from
// another thread wakes them.
#pragma once

#include <linux/net_tstamp.h>
#include <stdint.h>
#include <sys/socket.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace mup {

enum class Clock { Software, Hardware };
enum class Mode { Auto, Software, Hardware };

/** One timestamp: nanoseconds on `clock` (software: CLOCK_REALTIME; hardware: the NIC's PHC). */
struct Stamp {
  bool valid = false;
  int64_t ns = 0;
  Clock clock = Clock::Software;
};

/** ETHTOOL_GET_TS_INFO: what the driver says it can do. */
struct TsInfo {
  bool ok = false;
  int err = 0;             // errno when !ok
  uint32_t soTimestamping = 0;
  int32_t phcIndex = -1;   // /dev/ptpN, -1: none
  uint32_t txTypes = 0;    // bit (1 << HWTSTAMP_TX_*)
  uint32_t rxFilters = 0;  // bit (1 << HWTSTAMP_FILTER_*)
};

/** What happened when hardware timestamping was requested with SIOCSHWTSTAMP. */
struct HwAttempt {
  bool attempted = false;
  bool ok = false;
  int err = 0;             // errno of the failure
  std::string message;     // full message of the failure (errno name, what to do)
  hwtstamp_config applied{};   // what the driver answered (it may widen rx_filter)
  bool previousKnown = false;  // SIOCGHWTSTAMP answered: restored on close
  hwtstamp_config previous{};
};

struct OpenOptions {
  std::string ifname;
  std::string netns;         // path of a network namespace file, "" = the calling thread's
  uint16_t protocol = 0x0003;  // ETH_P_ALL (host order)
  Mode mode = Mode::Auto;
  bool ignoreOutgoing = true;  // PACKET_IGNORE_OUTGOING: do not receive our own frames
  int rcvbuf = 4 << 20;
  // A classic BPF socket filter: keep only frames holding the 32-bit word
  // matchWord (network order) at some offset below matchWithin; 0: no filter.
  uint32_t matchWord = 0;
  uint32_t matchWithin = 0;
  // TX stamps carry a copy of their frame (no OPT_TSONLY): the caller can tell
  // which frame a stamp is from by its content, not only by the OPT_ID count.
  bool txStampFrames = false;
};

struct RxPacket {
  std::vector<uint8_t> data;  // at most snaplen bytes
  uint32_t wireLen = 0;       // length on the wire (> data.size() when cut)
  uint8_t pktType = 0;        // PACKET_HOST, PACKET_OTHERHOST, ...
  Stamp software;             // ts[0] of SCM_TIMESTAMPING
  Stamp hardware;             // ts[2] (raw hardware)
  std::vector<uint8_t> control;  // the raw control messages, when asked for
};

struct TxStamp {
  uint32_t id = 0;      // SOF_TIMESTAMPING_OPT_ID counter: 0 for the socket's first frame
  uint32_t tstype = 0;  // SCM_TSTAMP_SND (0), SCM_TSTAMP_SCHED (1), SCM_TSTAMP_ACK (2)
  Stamp stamp;
  std::vector<uint8_t> data;  // the stamped frame, at most snaplen bytes (txStampFrames sockets)
  std::vector<uint8_t> control;  // the raw control messages, when asked for
};

struct SendResult {
  uint32_t requested = 0;
  uint32_t sent = 0;      // frames the kernel accepted, in order from the first
  uint32_t firstId = 0;   // OPT_ID of the first accepted frame; then firstId + 1, ...
  int err = 0;            // errno that stopped the batch early (0: all sent)
  std::string message;    // its message
};

/** Parse one SCM_TIMESTAMPING control message: ts[0] software, ts[2] hardware. False if `c` is not one. */
bool parseScmTimestamping(const struct cmsghdr* c, Stamp* software, Stamp* hardware);
/** Fill the stamps of an RX packet from its control messages. */
void parseRxControl(const struct msghdr& m, RxPacket* p);
/**
 * Parse one error-queue message: true when it is a TX timestamp
 * (sock_extended_err with origin SO_EE_ORIGIN_TIMESTAMPING and ENOMSG,
 * plus SCM_TIMESTAMPING); `*otherErr` gets a real error's errno otherwise.
 */
bool parseErrqueueControl(const struct msghdr& m, TxStamp* out, int* otherErr);

class PacketSocket {
 public:
  /** Opens, binds and configures; throws SysError. Enters opt.netns on the calling thread and returns. */
  static std::unique_ptr<PacketSocket> open(const OpenOptions& opt);
  ~PacketSocket();
  PacketSocket(const PacketSocket&) = delete;
  PacketSocket& operator=(const PacketSocket&) = delete;

  /** Send each frame once (Ethernet header included). Waits up to timeoutMs for queue room. */
  SendResult send(const std::vector<std::vector<uint8_t>>& frames, int timeoutMs);
  /** Up to `max` frames; returns once `min` arrived, at timeout, or on close (whatever came). */
  /** keepControl: copy each message's raw control bytes into the result (diagnostics, tests). */
  std::vector<RxPacket> recv(unsigned max, unsigned min, int timeoutMs, uint32_t snaplen, bool keepControl);
  /** Up to `max` TX stamps from the error queue; same waiting rules as recv. snaplen > 0: keep that much of each frame. */
  std::vector<TxStamp> txStamps(unsigned max, unsigned min, int timeoutMs, bool keepControl, uint32_t snaplen,
                                unsigned* skipped);

  /** Wake every blocked call (they return what they have). Thread-safe. */
  void wake();
  /** Restore the NIC's previous hardware timestamping config, close the fds. Idempotent; call once no call runs. */
  void close();
  bool closed() const { return fd_ < 0; }

  const std::string& ifname() const { return ifname_; }
  int ifindex() const { return ifindex_; }
  const uint8_t* mac() const { return mac_; }
  uint16_t protocol() const { return protocol_; }
  Clock clock() const { return clock_; }
  uint32_t flags() const { return flags_; }
  const TsInfo& tsInfo() const { return tsInfo_; }
  const HwAttempt& hw() const { return hw_; }
  std::string netns() const { return netns_; }

 private:
  PacketSocket() = default;
  /** poll fd for `events` and the wake eventfd; false on timeout or wake. */
  bool waitFor(short events, int64_t deadlineMs);

  int fd_ = -1;
  int wakeFd_ = -1;
  std::atomic<bool> woken_{false};
  std::string ifname_;
  std::string netns_;
  int ifindex_ = 0;
  uint8_t mac_[6] = {};
  uint16_t protocol_ = 0;
  Clock clock_ = Clock::Software;
  uint32_t flags_ = 0;
  TsInfo tsInfo_;
  HwAttempt hw_;
  std::atomic<uint32_t> nextId_{0};
  std::mutex sendMutex_;  // one send() at a time, so OPT_ID ranges of concurrent batches cannot interleave
};

}  // namespace mup
