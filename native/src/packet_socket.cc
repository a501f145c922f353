#include "packet_socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/errqueue.h>
#include <linux/filter.h>
#include <linux/ethtool.h>
#include <linux/if_packet.h>
#include <linux/sockios.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <mutex>

#include "sys_error.h"

namespace mup {

namespace {

int64_t nowMs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return int64_t(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

/** Closes an fd when it goes out of scope unless released. */
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  int release() {
    int f = fd;
    fd = -1;
    return f;
  }
};

std::string hwHint(int err, const std::string& ifname) {
  switch (err) {
    case EOPNOTSUPP:
      return "the driver of " + ifname +
             " has no hardware timestamping (veth and most virtual NICs do not); use timestamping 'software', "
             "or 'auto' to fall back by itself";
    case ERANGE:
      return "the NIC cannot stamp every received frame (HWTSTAMP_FILTER_ALL), only some kinds (for example PTP); "
             "use timestamping 'software'";
    case EPERM:
    case EACCES:
      return "run as root (CAP_NET_ADMIN is needed to change the NIC's timestamping)";
    case EBUSY:
      return "another user (ptp4l?) holds the NIC's timestamping configuration";
    default:
      return "use timestamping 'software'";
  }
}

/** Runs the body with the calling thread in a network namespace, and comes back. */
template <typename F>
auto inNetns(const std::string& path, F body) -> decltype(body()) {
  if (path.empty()) return body();
  Fd self(::open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC));
  if (self.fd < 0) throw SysError(errno, "open(/proc/thread-self/ns/net)", "remember the current network namespace", "");
  Fd target(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (target.fd < 0) {
    int e = errno;
    throw SysError(e, "open(" + path + ")", "open network namespace " + path,
                   e == ENOENT ? "no such namespace file (`ip netns add NAME` creates /var/run/netns/NAME; "
                                 "`ip netns list` shows them)"
                               : "");
  }
  if (setns(target.fd, CLONE_NEWNET) != 0) {
    int e = errno;
    throw SysError(e, "setns(CLONE_NEWNET)", "enter network namespace " + path,
                   e == EPERM ? "run as root (CAP_SYS_ADMIN)" : e == EINVAL ? path + " is not a network namespace" : "");
  }
  struct Back {
    int fd;
    ~Back() noexcept(false) {
      if (setns(fd, CLONE_NEWNET) != 0 && !std::uncaught_exceptions()) {
        throw SysError(errno, "setns(CLONE_NEWNET)", "return to the original network namespace",
                       "this thread is left in another namespace: restart the process");
      }
    }
  } back{self.fd};
  return body();
}

/**
 * The control message lies wholly inside the buffer (a crafted cmsg_len cannot
 * make us read past it). Subtractions only: offset + cmsg_len could wrap.
 */
bool inside(const msghdr& m, const cmsghdr* c) {
  const uint8_t* begin = static_cast<const uint8_t*>(m.msg_control);
  const uint8_t* p = reinterpret_cast<const uint8_t*>(c);
  if (p < begin) return false;
  const size_t off = size_t(p - begin);
  if (off > m.msg_controllen || m.msg_controllen - off < sizeof(cmsghdr)) return false;
  return c->cmsg_len >= sizeof(cmsghdr) && c->cmsg_len <= m.msg_controllen - off;
}
}  // namespace

bool parseScmTimestamping(const cmsghdr* c, Stamp* software, Stamp* hardware) {
  if (c->cmsg_level != SOL_SOCKET) return false;
  if (c->cmsg_type != SO_TIMESTAMPING_OLD && c->cmsg_type != SO_TIMESTAMPING_NEW) return false;
  // Both layouts are three {int64 sec, long nsec} on a 64-bit machine; the
  // _NEW one is always {int64, int64}. Read field by field, not by cast.
  const size_t each = 16;
  if (c->cmsg_len < CMSG_LEN(3 * each)) return false;
  const unsigned char* d = CMSG_DATA(c);
  auto read = [&](int i, Stamp* s) {
    int64_t sec = 0, nsec = 0;
    memcpy(&sec, d + i * each, 8);
    memcpy(&nsec, d + i * each + 8, 8);
    if (sec == 0 && nsec == 0) return;  // the kernel leaves a stamp it did not take at zero
    int64_t ns = 0;
    // Bytes from elsewhere (parseControl) may hold any value: no signed overflow.
    if (__builtin_mul_overflow(sec, int64_t(1000000000), &ns) || __builtin_add_overflow(ns, nsec, &ns)) return;
    s->valid = true;
    s->ns = ns;
  };
  static_assert(sizeof(time_t) == 8 && sizeof(long) == 8, "64-bit only: scm_timestamping layout");
  read(0, software);
  software->clock = Clock::Software;
  read(2, hardware);
  hardware->clock = Clock::Hardware;
  return true;
}

void parseRxControl(const msghdr& m, RxPacket* p) {
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c)) {
    if (!inside(m, c)) break;
    parseScmTimestamping(c, &p->software, &p->hardware);
  }
}

bool parseErrqueueControl(const msghdr& m, TxStamp* out, int* otherErr) {
  bool haveErr = false, haveTs = false;
  *otherErr = 0;
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(const_cast<msghdr*>(&m), c)) {
    if (!inside(m, c)) break;
    Stamp sw, hw;
    if (parseScmTimestamping(c, &sw, &hw)) {
      // A TX message carries the one stamp that was taken: ts[2] from the
      // NIC or ts[0] from the kernel (never both: OPT_TX_SWHW is not set).
      if (hw.valid) {
        out->stamp = hw;
        haveTs = true;
      } else if (sw.valid) {
        out->stamp = sw;
        haveTs = true;
      }
      continue;
    }
    const bool isErr = (c->cmsg_level == SOL_PACKET && c->cmsg_type == PACKET_TX_TIMESTAMP) ||
                       (c->cmsg_level == SOL_IP && c->cmsg_type == IP_RECVERR) ||
                       (c->cmsg_level == SOL_IPV6 && c->cmsg_type == IPV6_RECVERR);
    if (isErr && c->cmsg_len >= CMSG_LEN(sizeof(sock_extended_err))) {
      sock_extended_err e;
      memcpy(&e, CMSG_DATA(c), sizeof e);
      if (e.ee_origin == SO_EE_ORIGIN_TIMESTAMPING && e.ee_errno == ENOMSG) {
        out->id = e.ee_data;
        out->tstype = e.ee_info;
        haveErr = true;
      } else {
        *otherErr = int(e.ee_errno);
      }
    }
  }
  return haveErr && haveTs;
}

std::unique_ptr<PacketSocket> PacketSocket::open(const OpenOptions& opt) {
  if (opt.ifname.empty() || opt.ifname.size() >= IFNAMSIZ) {
    throw ArgError("interface name \"" + opt.ifname + "\" must be 1 to " + std::to_string(IFNAMSIZ - 1) + " bytes");
  }
  std::unique_ptr<PacketSocket> s(new PacketSocket());
  s->ifname_ = opt.ifname;
  s->netns_ = opt.netns;
  s->protocol_ = opt.protocol;
  const std::string on = opt.ifname + (opt.netns.empty() ? "" : " (namespace " + opt.netns + ")");

  inNetns(opt.netns, [&]() {
    // Protocol 0 until bind: a socket created with ETH_P_ALL would see every
    // interface's frames until it is bound.
    Fd fd(::socket(AF_PACKET, SOCK_RAW | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    // A failure after SIOCSHWTSTAMP succeeded puts the NIC back as it was.
    struct RestoreOnFailure {
      PacketSocket* s;
      const Fd& fd;
      ~RestoreOnFailure() {
        if (std::uncaught_exceptions() == 0 || !s->hw_.ok || !s->hw_.previousKnown || fd.fd < 0) return;
        ifreq r{};
        memcpy(r.ifr_name, s->ifname_.data(), s->ifname_.size());
        hwtstamp_config cfg = s->hw_.previous;
        r.ifr_data = reinterpret_cast<char*>(&cfg);
        (void)ioctl(fd.fd, SIOCSHWTSTAMP, &r);
      }
    } restore{s.get(), fd};
    if (fd.fd < 0) {
      int e = errno;
      throw SysError(e, "socket(AF_PACKET, SOCK_RAW)", "open a packet socket for " + on,
                     e == EPERM ? "run as root (CAP_NET_RAW)" : "");
    }
    ifreq ifr{};
    memcpy(ifr.ifr_name, opt.ifname.data(), opt.ifname.size());
    if (ioctl(fd.fd, SIOCGIFINDEX, &ifr) != 0) {
      int e = errno;
      throw SysError(e, "ioctl(SIOCGIFINDEX)", "find interface " + on,
                     e == ENODEV ? "no such interface in this network namespace (`ip link` lists them; pass netns "
                                   "when it lives in another)"
                                 : "");
    }
    s->ifindex_ = ifr.ifr_ifindex;
    if (ioctl(fd.fd, SIOCGIFHWADDR, &ifr) == 0) memcpy(s->mac_, ifr.ifr_hwaddr.sa_data, 6);

    // What the driver says it can do (veth: software only, no PHC).
    ethtool_ts_info ti{};
    ti.cmd = ETHTOOL_GET_TS_INFO;
    ifr.ifr_data = reinterpret_cast<char*>(&ti);
    if (ioctl(fd.fd, SIOCETHTOOL, &ifr) == 0) {
      s->tsInfo_.ok = true;
      s->tsInfo_.soTimestamping = ti.so_timestamping;
      s->tsInfo_.phcIndex = ti.phc_index;
      s->tsInfo_.txTypes = ti.tx_types;
      s->tsInfo_.rxFilters = ti.rx_filters;
    } else {
      s->tsInfo_.err = errno;
    }

    if (opt.mode != Mode::Software) {
      HwAttempt& hw = s->hw_;
      hw.attempted = true;
      hwtstamp_config cfg{};
      ifr.ifr_data = reinterpret_cast<char*>(&cfg);
      if (ioctl(fd.fd, SIOCGHWTSTAMP, &ifr) == 0) {
        hw.previousKnown = true;
        hw.previous = cfg;
      }
      cfg = hwtstamp_config{};
      cfg.tx_type = HWTSTAMP_TX_ON;
      cfg.rx_filter = HWTSTAMP_FILTER_ALL;
      ifr.ifr_data = reinterpret_cast<char*>(&cfg);
      if (ioctl(fd.fd, SIOCSHWTSTAMP, &ifr) == 0) {
        hw.ok = true;
        hw.applied = cfg;
      } else {
        hw.err = errno;
        SysError err(hw.err, "ioctl(SIOCSHWTSTAMP)", "enable hardware timestamping on " + on, hwHint(hw.err, opt.ifname));
        hw.message = err.what();
        if (opt.mode == Mode::Hardware) throw err;
      }
    }
    s->clock_ = s->hw_.ok ? Clock::Hardware : Clock::Software;

    uint32_t flags = SOF_TIMESTAMPING_OPT_ID | SOF_TIMESTAMPING_RX_SOFTWARE | SOF_TIMESTAMPING_SOFTWARE;
    if (!opt.txStampFrames) flags |= SOF_TIMESTAMPING_OPT_TSONLY;
    if (s->clock_ == Clock::Hardware) {
      flags |= SOF_TIMESTAMPING_TX_HARDWARE | SOF_TIMESTAMPING_RX_HARDWARE | SOF_TIMESTAMPING_RAW_HARDWARE;
    } else {
      flags |= SOF_TIMESTAMPING_TX_SOFTWARE;
    }
    if (setsockopt(fd.fd, SOL_SOCKET, SO_TIMESTAMPING, &flags, sizeof flags) != 0) {
      throw SysError(errno, "setsockopt(SO_TIMESTAMPING)", "enable timestamping on the socket for " + on, "");
    }
    s->flags_ = flags;

    if (opt.ignoreOutgoing) {
      int one = 1;
      if (setsockopt(fd.fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) != 0) {
        throw SysError(errno, "setsockopt(PACKET_IGNORE_OUTGOING)", "ignore own frames on " + on,
                       "needs Linux 4.20 or later; pass ignoreOutgoing: false");
      }
    }
    if (opt.rcvbuf > 0 && setsockopt(fd.fd, SOL_SOCKET, SO_RCVBUFFORCE, &opt.rcvbuf, sizeof opt.rcvbuf) != 0 &&
        setsockopt(fd.fd, SOL_SOCKET, SO_RCVBUF, &opt.rcvbuf, sizeof opt.rcvbuf) != 0) {
      throw SysError(errno, "setsockopt(SO_RCVBUF)", "size the receive buffer of " + on, "");
    }

    if (opt.matchWithin > 0) {
      // For each offset: load the word there, accept on a match, else go on.
      // A load past the frame's end ends the filter with 0: dropped, so a
      // frame is kept only if the word is in it, before its end.
      std::vector<sock_filter> prog;
      for (uint32_t off = 0; off + 4 <= opt.matchWithin; off++) {
        prog.push_back(sock_filter{BPF_LD | BPF_W | BPF_ABS, 0, 0, off});
        prog.push_back(sock_filter{BPF_JMP | BPF_JEQ | BPF_K, 0, 1, opt.matchWord});
        prog.push_back(sock_filter{BPF_RET | BPF_K, 0, 0, 0xffffffffu});
      }
      prog.push_back(sock_filter{BPF_RET | BPF_K, 0, 0, 0});
      sock_fprog fprog{static_cast<unsigned short>(prog.size()), prog.data()};
      if (setsockopt(fd.fd, SOL_SOCKET, SO_ATTACH_FILTER, &fprog, sizeof fprog) != 0) {
        throw SysError(errno, "setsockopt(SO_ATTACH_FILTER)", "attach the frame filter to " + on, "");
      }
    }

    sockaddr_ll sll{};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(opt.protocol);
    sll.sll_ifindex = s->ifindex_;
    if (bind(fd.fd, reinterpret_cast<sockaddr*>(&sll), sizeof sll) != 0) {
      int e = errno;
      throw SysError(e, "bind(AF_PACKET)", "bind the packet socket to " + on,
                     e == ENETDOWN ? "bring the interface up (`ip link set dev IF up`)" : "");
    }
    Fd wake(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (wake.fd < 0) throw SysError(errno, "eventfd", "create the wake-up descriptor for " + on, "");
    s->fd_ = fd.release();
    s->wakeFd_ = wake.release();
  });
  return s;
}

PacketSocket::~PacketSocket() { close(); }

void PacketSocket::wake() {
  woken_ = true;
  if (wakeFd_ >= 0) {
    uint64_t one = 1;
    ssize_t r = ::write(wakeFd_, &one, sizeof one);
    (void)r;
  }
}

void PacketSocket::close() {
  if (fd_ >= 0 && hw_.ok && hw_.previousKnown) {
    // Put the NIC back as we found it (other users, ptp4l, may rely on it).
    ifreq ifr{};
    memcpy(ifr.ifr_name, ifname_.data(), ifname_.size());
    hwtstamp_config cfg = hw_.previous;
    ifr.ifr_data = reinterpret_cast<char*>(&cfg);
    (void)ioctl(fd_, SIOCSHWTSTAMP, &ifr);
  }
  if (fd_ >= 0) ::close(fd_);
  if (wakeFd_ >= 0) ::close(wakeFd_);
  fd_ = wakeFd_ = -1;
}

bool PacketSocket::waitFor(short events, int64_t deadlineMs) {
  for (;;) {
    if (woken_) return false;
    int64_t left = deadlineMs - nowMs();
    if (left < 0) left = 0;
    pollfd p[2] = {{fd_, events, 0}, {wakeFd_, POLLIN, 0}};
    int r = ::poll(p, 2, int(left > 1000000 ? 1000000 : left));
    if (r < 0) {
      if (errno == EINTR) continue;
      throw SysError(errno, "poll", "wait on the packet socket of " + ifname_, "");
    }
    if (p[1].revents != 0) return false;
    if (p[0].revents & (events | POLLHUP | POLLNVAL)) return true;
    if (p[0].revents & POLLERR) {
      if (events == 0) return true;  // waiting for the error queue: that is it
      // Waiting for room to send while TX stamps sit unread in the error
      // queue: poll reports POLLERR at once. Wait in 1 ms steps instead of
      // spinning (recv uses an edge-triggered epoll instead).
      if (nowMs() >= deadlineMs) return false;
      pollfd w{wakeFd_, POLLIN, 0};
      ::poll(&w, 1, 1);
      continue;
    }
    if (r == 0 && nowMs() >= deadlineMs) return false;
  }
}

SendResult PacketSocket::send(const std::vector<std::vector<uint8_t>>& frames, int timeoutMs) {
  std::lock_guard<std::mutex> lock(sendMutex_);
  SendResult res;
  res.requested = uint32_t(frames.size());
  res.firstId = nextId_;
  if (closed()) throw SysError(EBADF, "sendmmsg", "send on " + ifname_, "the socket is closed");
  std::vector<iovec> iov(frames.size());
  std::vector<mmsghdr> msgs(frames.size());
  for (size_t i = 0; i < frames.size(); i++) {
    iov[i].iov_base = const_cast<uint8_t*>(frames[i].data());
    iov[i].iov_len = frames[i].size();
    msgs[i] = mmsghdr{};
    msgs[i].msg_hdr.msg_iov = &iov[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  }
  const int64_t deadline = nowMs() + timeoutMs;
  size_t idx = 0;
  while (idx < frames.size()) {
    int n = sendmmsg(fd_, &msgs[idx], unsigned(frames.size() - idx), 0);
    if (n > 0) {
      idx += size_t(n);
      nextId_ += uint32_t(n);
      continue;
    }
    int e = errno;
    if (e == EINTR) continue;
    if (e == EAGAIN || e == EWOULDBLOCK) {
      if (waitFor(POLLOUT, deadline)) continue;
      res.err = EAGAIN;
      res.message = SysError(e, "sendmmsg", "send on " + ifname_,
                             woken_ ? "the socket was closed" : "no room in the send queue within the timeout")
                        .what();
      break;
    }
    // ENOBUFS: the frame was dropped after the kernel set up its timestamp
    // (qdisc or driver queue full), so it consumed an OPT_ID.
    if (e == ENOBUFS) nextId_ += 1;
    res.err = e;
    std::string hint = e == EMSGSIZE  ? "the frame is longer than the interface MTU plus the Ethernet header"
                       : e == ENETDOWN ? "bring the interface up"
                       : e == ENOBUFS  ? "the interface queue is full: send smaller batches or slower"
                       : e == ENXIO    ? "the interface is gone"
                                       : "";
    res.message = SysError(e, "sendmmsg", "send frame " + std::to_string(idx) + " on " + ifname_, hint).what();
    break;
  }
  res.sent = uint32_t(idx);
  return res;
}

std::vector<RxPacket> PacketSocket::recv(unsigned max, unsigned min, int timeoutMs, uint32_t snaplen, bool keepControl) {
  if (closed()) throw SysError(EBADF, "recvmmsg", "receive on " + ifname_, "the socket is closed");
  std::vector<RxPacket> out;
  std::vector<std::vector<uint8_t>> bufs(max, std::vector<uint8_t>(snaplen));
  constexpr size_t kCtl = 256;
  std::vector<uint8_t> ctl(size_t(max) * kCtl);
  std::vector<sockaddr_ll> from(max);
  std::vector<iovec> iov(max);
  std::vector<mmsghdr> msgs(max);
  const int64_t deadline = nowMs() + timeoutMs;
  // Wait with an edge-triggered epoll, registered before the first read so
  // no arrival is missed. poll() would report POLLERR at once for as long as
  // TX stamps sit unread in the error queue; edge-triggered, that is one
  // wake-up per new stamp, not a busy loop.
  Fd ep(epoll_create1(EPOLL_CLOEXEC));
  if (ep.fd < 0) throw SysError(errno, "epoll_create1", "wait on the packet socket of " + ifname_, "");
  epoll_event ev{};
  ev.events = EPOLLIN | EPOLLET;
  ev.data.fd = fd_;
  if (epoll_ctl(ep.fd, EPOLL_CTL_ADD, fd_, &ev) != 0) {
    throw SysError(errno, "epoll_ctl", "wait on the packet socket of " + ifname_, "");
  }
  ev.events = EPOLLIN;
  ev.data.fd = wakeFd_;
  if (epoll_ctl(ep.fd, EPOLL_CTL_ADD, wakeFd_, &ev) != 0) {
    throw SysError(errno, "epoll_ctl", "wait on the packet socket of " + ifname_, "");
  }
  auto waitIn = [&]() -> bool {
    for (;;) {
      if (woken_) return false;
      int64_t left = deadline - nowMs();
      if (left <= 0) return false;
      epoll_event got[2];
      int r = epoll_wait(ep.fd, got, 2, int(left > 1000000 ? 1000000 : left));
      if (r < 0) {
        if (errno == EINTR) continue;
        throw SysError(errno, "epoll_wait", "wait on the packet socket of " + ifname_, "");
      }
      if (r == 0) continue;  // the deadline check above ends it
      for (int i = 0; i < r; i++) {
        if (got[i].data.fd == wakeFd_) return false;
      }
      return true;  // readable, or a new error-queue entry (EPOLLERR): try again
    }
  };
  while (out.size() < max) {
    size_t base = out.size();
    size_t want = max - base;
    for (size_t i = 0; i < want; i++) {
      iov[i] = {bufs[base + i].data(), snaplen};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_name = &from[i];
      msgs[i].msg_hdr.msg_namelen = sizeof(sockaddr_ll);
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = ctl.data() + i * kCtl;
      msgs[i].msg_hdr.msg_controllen = kCtl;
    }
    // MSG_TRUNC: a packet socket then returns the frame's real length.
    int n = recvmmsg(fd_, msgs.data(), unsigned(want), MSG_DONTWAIT | MSG_TRUNC, nullptr);
    if (n > 0) {
      for (int i = 0; i < n; i++) {
        RxPacket p;
        p.wireLen = msgs[i].msg_len;
        size_t keep = p.wireLen < snaplen ? p.wireLen : snaplen;
        p.data.assign(bufs[base + i].begin(), bufs[base + i].begin() + keep);
        p.pktType = from[i].sll_pkttype;
        parseRxControl(msgs[i].msg_hdr, &p);
        if (keepControl) {
          const uint8_t* c = static_cast<const uint8_t*>(msgs[i].msg_hdr.msg_control);
          p.control.assign(c, c + msgs[i].msg_hdr.msg_controllen);
        }
        out.push_back(std::move(p));
      }
      continue;
    }
    int e = errno;
    if (e == EINTR) continue;
    if (e != EAGAIN && e != EWOULDBLOCK) {
      if (!out.empty()) break;  // report it on the next call
      throw SysError(e, "recvmmsg", "receive on " + ifname_,
                     e == ENETDOWN ? "the interface went down; bring it up and open a new socket" : "");
    }
    if (out.size() >= min) break;
    if (!waitIn()) break;
  }
  return out;
}

std::vector<TxStamp> PacketSocket::txStamps(unsigned max, unsigned min, int timeoutMs, bool keepControl, uint32_t snaplen,
                                            unsigned* skipped) {
  if (closed()) throw SysError(EBADF, "recvmmsg(MSG_ERRQUEUE)", "read TX stamps on " + ifname_, "the socket is closed");
  std::vector<TxStamp> out;
  *skipped = 0;
  constexpr size_t kCtl = 256;
  // OPT_TSONLY: no payload comes back; room for a header anyway. Else the frame.
  const size_t kData = snaplen > 0 ? snaplen : 64;
  std::vector<uint8_t> ctl(size_t(max) * kCtl), data(size_t(max) * kData);
  std::vector<iovec> iov(max);
  std::vector<mmsghdr> msgs(max);
  const int64_t deadline = nowMs() + timeoutMs;
  while (out.size() < max) {
    size_t want = max - out.size();
    for (size_t i = 0; i < want; i++) {
      iov[i] = {data.data() + i * kData, kData};
      msgs[i] = mmsghdr{};
      msgs[i].msg_hdr.msg_iov = &iov[i];
      msgs[i].msg_hdr.msg_iovlen = 1;
      msgs[i].msg_hdr.msg_control = ctl.data() + i * kCtl;
      msgs[i].msg_hdr.msg_controllen = kCtl;
    }
    int n = recvmmsg(fd_, msgs.data(), unsigned(want), MSG_ERRQUEUE | MSG_DONTWAIT, nullptr);
    if (n > 0) {
      for (int i = 0; i < n; i++) {
        TxStamp t;
        int other = 0;
        if (parseErrqueueControl(msgs[i].msg_hdr, &t, &other)) {
          if (keepControl) {
            const uint8_t* c = static_cast<const uint8_t*>(msgs[i].msg_hdr.msg_control);
            t.control.assign(c, c + msgs[i].msg_hdr.msg_controllen);
          }
          if (snaplen > 0) {
            const uint8_t* d = data.data() + i * kData;
            t.data.assign(d, d + (msgs[i].msg_len < kData ? msgs[i].msg_len : kData));
          }
          out.push_back(std::move(t));
        } else {
          (*skipped)++;
        }
      }
      continue;
    }
    int e = errno;
    if (e == EINTR) continue;
    if (e != EAGAIN && e != EWOULDBLOCK) {
      if (!out.empty()) break;
      throw SysError(e, "recvmmsg(MSG_ERRQUEUE)", "read TX stamps on " + ifname_, "");
    }
    // POLLERR with an empty error queue is a socket error (the interface
    // went down: ENETDOWN). Report it rather than poll again at once forever.
    int soErr = 0;
    socklen_t soLen = sizeof soErr;
    if (getsockopt(fd_, SOL_SOCKET, SO_ERROR, &soErr, &soLen) == 0 && soErr != 0) {
      if (!out.empty()) break;
      throw SysError(soErr, "recvmmsg(MSG_ERRQUEUE)", "read TX stamps on " + ifname_,
                     soErr == ENETDOWN ? "the interface went down; bring it up and open a new socket" : "");
    }
    if (out.size() >= min) break;
    if (!waitFor(0, deadline)) break;
  }
  return out;
}

}  // namespace mup
