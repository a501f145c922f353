// N-API glue: argument checks, JavaScript values, and workers that run the
// blocking socket calls off the event loop: send on libuv's thread pool, the
// waits (recv, txStamps) on threads of their own. Every failure becomes a JavaScript Error with `code` (errno name),
// `errno` and `syscall`; nothing here aborts the process (and, as a net,
// NODE_ADDON_API_CPP_EXCEPTIONS_ALL turns any other C++ exception thrown in
// a callback into a JavaScript Error instead of std::terminate).
#include <napi.h>
#include <v8.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "clocks.h"
#include "packet_socket.h"
#include "sys_error.h"

namespace {

using mup::ArgError;
using mup::SysError;

Napi::Value jsError(Napi::Env env, const SysError& e) {
  Napi::Error err = Napi::Error::New(env, e.what());
  err.Value().Set("code", e.code());
  err.Value().Set("errno", e.err());
  err.Value().Set("syscall", e.syscall());
  return err.Value();
}

const char* clockName(mup::Clock c) { return c == mup::Clock::Hardware ? "hardware" : "software"; }

Napi::Value stampOrNull(Napi::Env env, const mup::Stamp& s) {
  return s.valid ? Napi::BigInt::New(env, s.ns) : env.Null();
}

uint32_t uintArg(const Napi::Value& v, const char* name, uint32_t lo, uint32_t hi) {
  if (!v.IsNumber()) throw ArgError(std::string(name) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= lo && d <= hi) || d != double(uint32_t(d))) {
    throw ArgError(std::string(name) + " must be an integer from " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return uint32_t(d);
}

class SocketWrap;

/** One blocking call on a worker thread, settled as a promise on the main thread. */
class SocketWorker : public Napi::AsyncWorker {
 public:
  explicit SocketWorker(SocketWrap* w);
  Napi::Promise promise() { return deferred_.Promise(); }
  /**
   * Run on a thread of its own instead of libuv's pool: for calls that wait
   * (recv, txStamps). Waiting on the pool (4 threads by default) would queue
   * everything else behind the waits, sends included. Settled on the main
   * thread through a thread-safe function; the pool if no thread can start.
   */
  void StartOwnThread();

 protected:
  virtual void run(mup::PacketSocket& s) = 0;
  virtual Napi::Value result(Napi::Env env) = 0;

 private:
  void Execute() override;
  void OnOK() override;
  void OnError(const Napi::Error& e) override;
  void done();

  SocketWrap* wrap_;
  Napi::Promise::Deferred deferred_;
  std::unique_ptr<SysError> sysErr_;
  std::string otherErr_;
  bool failed_ = false;
};

class SocketWrap : public Napi::ObjectWrap<SocketWrap> {
 public:
  static Napi::Function define(Napi::Env env) {
    return DefineClass(env, "PacketSocket",
                       {InstanceMethod<&SocketWrap::send>("send"), InstanceMethod<&SocketWrap::recv>("recv"),
                        InstanceMethod<&SocketWrap::txStamps>("txStamps"), InstanceMethod<&SocketWrap::close>("close"),
                        InstanceMethod<&SocketWrap::info>("info")});
  }

  SocketWrap(const Napi::CallbackInfo& info) : Napi::ObjectWrap<SocketWrap>(info) {
    if (info.Length() != 1 || !info[0].IsExternal()) {
      throw Napi::TypeError::New(info.Env(), "PacketSocket cannot be constructed directly: use open()");
    }
    sock_.reset(info[0].As<Napi::External<mup::PacketSocket>>().Data());
  }

  mup::PacketSocket& sock() { return *sock_; }
  void begin() {
    inflight_++;
    Ref();
  }
  void end() {
    inflight_--;
    Unref();
    if (closing_ && inflight_ == 0) sock_->close();
  }

 private:
  Napi::Value closedError(Napi::Env env, const char* what) {
    auto d = Napi::Promise::Deferred::New(env);
    d.Reject(jsError(env, SysError(EBADF, what, std::string("use the socket on ") + sock_->ifname(),
                                   "the socket is closed: open() a new one")));
    return d.Promise();
  }

  // send(frames: Buffer[], timeoutMs)
  Napi::Value send(const Napi::CallbackInfo& info);
  // recv(max, min, timeoutMs, snaplen)
  Napi::Value recv(const Napi::CallbackInfo& info);
  // txStamps(max, min, timeoutMs)
  Napi::Value txStamps(const Napi::CallbackInfo& info);

  Napi::Value close(const Napi::CallbackInfo& info) {
    if (!closing_) {
      closing_ = true;
      sock_->wake();
      if (inflight_ == 0) sock_->close();
    }
    return info.Env().Undefined();
  }

  Napi::Value info(const Napi::CallbackInfo& info) {
    Napi::Env env = info.Env();
    const mup::PacketSocket& s = *sock_;
    Napi::Object o = Napi::Object::New(env);
    o.Set("ifname", s.ifname());
    o.Set("ifindex", s.ifindex());
    o.Set("netns", s.netns().empty() ? env.Null() : Napi::String::New(env, s.netns()));
    char mac[18];
    const uint8_t* m = s.mac();
    snprintf(mac, sizeof mac, "%02x:%02x:%02x:%02x:%02x:%02x", m[0], m[1], m[2], m[3], m[4], m[5]);
    o.Set("mac", mac);
    o.Set("protocol", s.protocol());
    o.Set("clock", clockName(s.clock()));
    o.Set("flags", s.flags());
    o.Set("closed", closing_);
    const mup::TsInfo& t = s.tsInfo();
    Napi::Object ti = Napi::Object::New(env);
    ti.Set("ok", t.ok);
    ti.Set("code", t.ok ? env.Null() : Napi::String::New(env, mup::errnoName(t.err)));
    ti.Set("soTimestamping", t.soTimestamping);
    ti.Set("phcIndex", t.phcIndex);
    ti.Set("txTypes", t.txTypes);
    ti.Set("rxFilters", t.rxFilters);
    o.Set("tsInfo", ti);
    const mup::HwAttempt& h = s.hw();
    Napi::Object hw = Napi::Object::New(env);
    hw.Set("attempted", h.attempted);
    hw.Set("enabled", h.ok);
    hw.Set("code", h.attempted && !h.ok ? Napi::String::New(env, mup::errnoName(h.err)) : env.Null());
    hw.Set("errno", h.attempted && !h.ok ? Napi::Number::New(env, h.err) : env.Null());
    hw.Set("message", h.attempted && !h.ok ? Napi::String::New(env, h.message) : env.Null());
    hw.Set("txType", h.ok ? Napi::Number::New(env, h.applied.tx_type) : env.Null());
    hw.Set("rxFilter", h.ok ? Napi::Number::New(env, h.applied.rx_filter) : env.Null());
    hw.Set("previousKnown", h.previousKnown);
    o.Set("hardware", hw);
    return o;
  }

  std::unique_ptr<mup::PacketSocket> sock_;
  int inflight_ = 0;
  bool closing_ = false;
};

SocketWorker::SocketWorker(SocketWrap* w)
    : Napi::AsyncWorker(w->Env(), "mup:tstamp"), wrap_(w), deferred_(Napi::Promise::Deferred::New(w->Env())) {
  wrap_->begin();
}

void SocketWorker::Execute() {
  try {
    run(wrap_->sock());
  } catch (const SysError& e) {
    sysErr_ = std::make_unique<SysError>(e);
  } catch (const std::exception& e) {
    failed_ = true;
    otherErr_ = e.what();
  }
}

void SocketWorker::StartOwnThread() {
  Napi::ThreadSafeFunction tsfn = Napi::ThreadSafeFunction::New(Env(), Napi::Function(), "mup:tstamp-wait", 0, 1);
  try {
    std::thread([this, tsfn]() mutable {
      Execute();
      // After this call the main thread may delete `this`: nothing of it below.
      tsfn.BlockingCall(this, [](Napi::Env, Napi::Function, SocketWorker* self) {
        self->OnOK();
        delete self;
      });
      tsfn.Release();
    }).detach();
  } catch (const std::system_error&) {
    tsfn.Release();
    Queue();
  }
}

void SocketWorker::OnOK() {
  Napi::Env env = Env();
  Napi::HandleScope scope(env);
  try {
    if (sysErr_) {
      deferred_.Reject(jsError(env, *sysErr_));
    } else if (failed_) {
      deferred_.Reject(Napi::Error::New(env, otherErr_).Value());
    } else {
      deferred_.Resolve(result(env));
    }
  } catch (const Napi::Error& e) {
    deferred_.Reject(e.Value());
  }
  done();
}

void SocketWorker::OnError(const Napi::Error& e) {
  deferred_.Reject(e.Value());
  done();
}

void SocketWorker::done() { wrap_->end(); }

class SendWorker : public SocketWorker {
 public:
  SendWorker(SocketWrap* w, std::vector<std::vector<uint8_t>> frames, int timeoutMs)
      : SocketWorker(w), frames_(std::move(frames)), timeoutMs_(timeoutMs) {}

 protected:
  void run(mup::PacketSocket& s) override { res_ = s.send(frames_, timeoutMs_); }
  Napi::Value result(Napi::Env env) override {
    Napi::Object o = Napi::Object::New(env);
    o.Set("requested", res_.requested);
    o.Set("sent", res_.sent);
    o.Set("firstId", res_.firstId);
    if (res_.err != 0) {
      Napi::Object e = Napi::Object::New(env);
      e.Set("code", mup::errnoName(res_.err));
      e.Set("errno", res_.err);
      e.Set("message", res_.message);
      o.Set("error", e);
    } else {
      o.Set("error", env.Null());
    }
    return o;
  }

 private:
  std::vector<std::vector<uint8_t>> frames_;
  int timeoutMs_;
  mup::SendResult res_;
};

class RecvWorker : public SocketWorker {
 public:
  RecvWorker(SocketWrap* w, unsigned max, unsigned min, int timeoutMs, uint32_t snaplen, bool keepControl)
      : SocketWorker(w), max_(max), min_(min), timeoutMs_(timeoutMs), snaplen_(snaplen), keepControl_(keepControl) {}

 protected:
  void run(mup::PacketSocket& s) override { pkts_ = s.recv(max_, min_, timeoutMs_, snaplen_, keepControl_); }
  Napi::Value result(Napi::Env env) override {
    Napi::Array a = Napi::Array::New(env, pkts_.size());
    for (size_t i = 0; i < pkts_.size(); i++) {
      const mup::RxPacket& p = pkts_[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("data", Napi::Buffer<uint8_t>::Copy(env, p.data.data(), p.data.size()));
      o.Set("wireLength", p.wireLen);
      o.Set("pktType", p.pktType);
      o.Set("software", stampOrNull(env, p.software));
      o.Set("hardware", stampOrNull(env, p.hardware));
      if (keepControl_) o.Set("control", Napi::Buffer<uint8_t>::Copy(env, p.control.data(), p.control.size()));
      a.Set(uint32_t(i), o);
    }
    return a;
  }

 private:
  unsigned max_, min_;
  int timeoutMs_;
  uint32_t snaplen_;
  bool keepControl_;
  std::vector<mup::RxPacket> pkts_;
};

class TxStampWorker : public SocketWorker {
 public:
  TxStampWorker(SocketWrap* w, unsigned max, unsigned min, int timeoutMs, bool keepControl, uint32_t snaplen)
      : SocketWorker(w), max_(max), min_(min), timeoutMs_(timeoutMs), keepControl_(keepControl), snaplen_(snaplen) {}

 protected:
  void run(mup::PacketSocket& s) override {
    stamps_ = s.txStamps(max_, min_, timeoutMs_, keepControl_, snaplen_, &skipped_);
  }
  Napi::Value result(Napi::Env env) override {
    Napi::Array a = Napi::Array::New(env, stamps_.size());
    for (size_t i = 0; i < stamps_.size(); i++) {
      const mup::TxStamp& t = stamps_[i];
      Napi::Object o = Napi::Object::New(env);
      o.Set("id", t.id);
      o.Set("tstype", t.tstype);
      o.Set("ns", Napi::BigInt::New(env, t.stamp.ns));
      o.Set("clock", clockName(t.stamp.clock));
      if (keepControl_) o.Set("control", Napi::Buffer<uint8_t>::Copy(env, t.control.data(), t.control.size()));
      if (snaplen_ > 0) o.Set("data", Napi::Buffer<uint8_t>::Copy(env, t.data.data(), t.data.size()));
      a.Set(uint32_t(i), o);
    }
    Napi::Object r = Napi::Object::New(env);
    r.Set("stamps", a);
    r.Set("skipped", skipped_);
    return r;
  }

 private:
  unsigned max_, min_;
  int timeoutMs_;
  bool keepControl_;
  uint32_t snaplen_;
  unsigned skipped_ = 0;
  std::vector<mup::TxStamp> stamps_;
};

constexpr uint32_t kMaxBatch = 1024;
constexpr uint32_t kMaxTimeoutMs = 3600 * 1000;

Napi::Value SocketWrap::send(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closing_) return closedError(env, "sendmmsg");
  try {
    if (info.Length() < 2 || !info[0].IsArray()) throw ArgError("send(frames, timeoutMs): frames must be an array of Buffers");
    Napi::Array arr = info[0].As<Napi::Array>();
    if (arr.Length() == 0 || arr.Length() > kMaxBatch) {
      throw ArgError("send: 1 to " + std::to_string(kMaxBatch) + " frames per batch, got " + std::to_string(arr.Length()));
    }
    int timeoutMs = int(uintArg(info[1], "timeoutMs", 0, kMaxTimeoutMs));
    std::vector<std::vector<uint8_t>> frames;
    frames.reserve(arr.Length());
    for (uint32_t i = 0; i < arr.Length(); i++) {
      Napi::Value v = arr.Get(i);
      if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint8_array) {
        throw ArgError("send: frames[" + std::to_string(i) + "] must be a Buffer or Uint8Array");
      }
      Napi::Uint8Array b = v.As<Napi::Uint8Array>();
      if (b.ByteLength() < 14 || b.ByteLength() > 65535) {
        throw ArgError("send: frames[" + std::to_string(i) + "] is " + std::to_string(b.ByteLength()) +
                       " bytes; a frame (Ethernet header included) is 14 to 65535 bytes");
      }
      frames.emplace_back(b.Data(), b.Data() + b.ByteLength());
    }
    auto* w = new SendWorker(this, std::move(frames), timeoutMs);
    w->Queue();
    return w->promise();
  } catch (const ArgError& e) {
    throw Napi::TypeError::New(env, e.what());
  }
}

Napi::Value SocketWrap::recv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closing_) return closedError(env, "recvmmsg");
  try {
    if (info.Length() < 4) throw ArgError("recv(max, min, timeoutMs, snaplen[, keepControl])");
    uint32_t max = uintArg(info[0], "max", 1, kMaxBatch);
    uint32_t min = uintArg(info[1], "min", 0, max);
    int timeoutMs = int(uintArg(info[2], "timeoutMs", 0, kMaxTimeoutMs));
    uint32_t snaplen = uintArg(info[3], "snaplen", 14, 65535);
    bool keep = info.Length() > 4 && info[4].ToBoolean().Value();
    auto* w = new RecvWorker(this, max, min, timeoutMs, snaplen, keep);
    w->StartOwnThread();
    return w->promise();
  } catch (const ArgError& e) {
    throw Napi::TypeError::New(env, e.what());
  }
}

Napi::Value SocketWrap::txStamps(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (closing_) return closedError(env, "recvmmsg(MSG_ERRQUEUE)");
  try {
    if (info.Length() < 3) throw ArgError("txStamps(max, min, timeoutMs[, keepControl[, snaplen]])");
    uint32_t max = uintArg(info[0], "max", 1, kMaxBatch);
    uint32_t min = uintArg(info[1], "min", 0, max);
    int timeoutMs = int(uintArg(info[2], "timeoutMs", 0, kMaxTimeoutMs));
    bool keep = info.Length() > 3 && info[3].ToBoolean().Value();
    uint32_t snaplen = info.Length() > 4 && !info[4].IsUndefined() ? uintArg(info[4], "snaplen", 0, 65535) : 0;
    auto* w = new TxStampWorker(this, max, min, timeoutMs, keep, snaplen);
    w->StartOwnThread();
    return w->promise();
  } catch (const ArgError& e) {
    throw Napi::TypeError::New(env, e.what());
  }
}

struct AddonData {
  Napi::FunctionReference socketClass;
};

// open({ ifname, netns, protocol, mode, ignoreOutgoing, rcvbuf, matchWord, matchWithin, txStampFrames }): synchronous
// (a few ioctls; setns is per thread, so it runs on the caller's).
Napi::Value open(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    if (info.Length() < 1 || !info[0].IsObject()) throw ArgError("open(options): options must be an object");
    Napi::Object o = info[0].As<Napi::Object>();
    mup::OpenOptions opt;
    if (!o.Get("ifname").IsString()) throw ArgError("open: ifname must be a string");
    opt.ifname = o.Get("ifname").As<Napi::String>().Utf8Value();
    Napi::Value ns = o.Get("netns");
    if (ns.IsString()) {
      opt.netns = ns.As<Napi::String>().Utf8Value();
    } else if (!ns.IsUndefined() && !ns.IsNull()) {
      throw ArgError("open: netns must be a path string (e.g. /var/run/netns/NAME)");
    }
    if (!o.Get("protocol").IsUndefined()) opt.protocol = uint16_t(uintArg(o.Get("protocol"), "protocol", 0, 0xffff));
    Napi::Value mode = o.Get("mode");
    if (!mode.IsUndefined()) {
      std::string m = mode.IsString() ? mode.As<Napi::String>().Utf8Value() : "";
      if (m == "auto") opt.mode = mup::Mode::Auto;
      else if (m == "software") opt.mode = mup::Mode::Software;
      else if (m == "hardware") opt.mode = mup::Mode::Hardware;
      else throw ArgError("open: mode must be 'auto', 'software' or 'hardware'");
    }
    Napi::Value ig = o.Get("ignoreOutgoing");
    if (!ig.IsUndefined()) {
      if (!ig.IsBoolean()) throw ArgError("open: ignoreOutgoing must be a boolean");
      opt.ignoreOutgoing = ig.As<Napi::Boolean>().Value();
    }
    if (!o.Get("rcvbuf").IsUndefined()) opt.rcvbuf = int(uintArg(o.Get("rcvbuf"), "rcvbuf", 0, 1 << 30));
    if (!o.Get("matchWord").IsUndefined()) opt.matchWord = uint32_t(uintArg(o.Get("matchWord"), "matchWord", 0, 0xffffffffu));
    if (!o.Get("matchWithin").IsUndefined()) opt.matchWithin = uint32_t(uintArg(o.Get("matchWithin"), "matchWithin", 0, 1024));
    // 1..3 leaves no 4-byte window: the filter would be only "drop".
    if (opt.matchWithin > 0 && opt.matchWithin < 4) {
      throw ArgError("open: matchWithin " + std::to_string(opt.matchWithin) +
                     " cannot hold the 4-byte word (every frame would be dropped): use 4 to 1024, or 0 for no filter");
    }
    Napi::Value tf = o.Get("txStampFrames");
    if (!tf.IsUndefined()) {
      if (!tf.IsBoolean()) throw ArgError("open: txStampFrames must be a boolean");
      opt.txStampFrames = tf.As<Napi::Boolean>().Value();
    }
    std::unique_ptr<mup::PacketSocket> s = mup::PacketSocket::open(opt);
    AddonData* data = env.GetInstanceData<AddonData>();
    Napi::Object obj = data->socketClass.New({Napi::External<mup::PacketSocket>::New(env, s.get())});
    s.release();  // owned by the wrapper now
    return obj;
  } catch (const ArgError& e) {
    throw Napi::TypeError::New(env, e.what());
  } catch (const SysError& e) {
    throw Napi::Error(env, jsError(env, e));
  }
}

// sampleClocks(ptpDevice | null, samples)
Napi::Value sampleClocks(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  try {
    std::string dev = info.Length() > 0 && info[0].IsString() ? info[0].As<Napi::String>().Utf8Value() : "";
    int samples = info.Length() > 1 ? int(uintArg(info[1], "samples", 1, 1000)) : 9;
    mup::ClockSample c = mup::sampleClocks(dev, samples);
    Napi::Object o = Napi::Object::New(env);
    o.Set("realtimeNs", Napi::BigInt::New(env, c.realtimeNs));
    o.Set("monotonicNs", Napi::BigInt::New(env, c.monotonicNs));
    o.Set("realtimeMinusMonotonicNs", Napi::BigInt::New(env, c.rtMinusMonoNs));
    o.Set("realtimeMonotonicUncertaintyNs", Napi::Number::New(env, double(c.rtMonoUncertaintyNs)));
    o.Set("samples", c.samples);
    if (c.phc) {
      Napi::Object p = Napi::Object::New(env);
      p.Set("device", c.phcDevice);
      p.Set("method", c.phcMethod);
      p.Set("phcNs", Napi::BigInt::New(env, c.phcNs));
      p.Set("phcMinusRealtimeNs", Napi::BigInt::New(env, c.phcMinusRtNs));
      p.Set("uncertaintyNs", Napi::Number::New(env, double(c.phcUncertaintyNs)));
      o.Set("phc", p);
    } else {
      o.Set("phc", env.Null());
    }
    return o;
  } catch (const ArgError& e) {
    throw Napi::TypeError::New(env, e.what());
  } catch (const SysError& e) {
    throw Napi::Error(env, jsError(env, e));
  }
}

// parseControl(buffer, 'rx' | 'errqueue'): run the parser that recv and
// txStamps use on control bytes the caller supplies (for example a real
// answer from the kernel, edited to carry a hardware stamp veth cannot give).
Napi::Value parseControl(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 2 || !info[0].IsBuffer() || !info[1].IsString()) {
    throw Napi::TypeError::New(env, "parseControl(buffer, 'rx' | 'errqueue')");
  }
  Napi::Buffer<uint8_t> b = info[0].As<Napi::Buffer<uint8_t>>();
  std::string kind = info[1].As<Napi::String>().Utf8Value();
  // An aligned private copy: CMSG_* walk it as struct cmsghdr.
  std::vector<uint64_t> ctl((b.Length() + 7) / 8 + 1, 0);
  memcpy(ctl.data(), b.Data(), b.Length());
  msghdr m{};
  m.msg_control = ctl.data();
  m.msg_controllen = b.Length();
  Napi::Object o = Napi::Object::New(env);
  if (kind == "rx") {
    mup::RxPacket p;
    mup::parseRxControl(m, &p);
    o.Set("software", stampOrNull(env, p.software));
    o.Set("hardware", stampOrNull(env, p.hardware));
  } else if (kind == "errqueue") {
    mup::TxStamp t;
    int other = 0;
    bool ok = mup::parseErrqueueControl(m, &t, &other);
    o.Set("isTimestamp", ok);
    o.Set("id", ok ? Napi::Number::New(env, t.id) : env.Null());
    o.Set("tstype", ok ? Napi::Number::New(env, t.tstype) : env.Null());
    o.Set("ns", ok ? Napi::BigInt::New(env, t.stamp.ns) : env.Null());
    o.Set("clock", ok ? Napi::String::New(env, clockName(t.stamp.clock)) : env.Null());
    o.Set("otherErrno", other);
  } else {
    throw Napi::TypeError::New(env, "parseControl: kind must be 'rx' or 'errqueue'");
  }
  return o;
}

Napi::Value errnoName(const Napi::CallbackInfo& info) {
  try {
    return Napi::String::New(info.Env(), mup::errnoName(int(uintArg(info[0], "errno", 0, 4095))));
  } catch (const ArgError& e) {
    throw Napi::TypeError::New(info.Env(), e.what());
  }
}

// V8's own API, not N-API (which has no call for it): a full collection that
// also compacts the heap and gives its free pages back (Isolate::
// LowMemoryNotification). A plain full collection (global.gc()) frees the
// objects but keeps most pages they were on: after large batches, single
// changes and a reload, the daemon's heap kept ~45 MB of committed, unused
// pages through it.
// On the calling (JavaScript) thread; it blocks for the collection.
Napi::Value compactHeap(const Napi::CallbackInfo& info) {
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  if (isolate == nullptr) throw Napi::Error::New(info.Env(), "compactHeap: no V8 isolate on this thread");
  isolate->LowMemoryNotification();
  return info.Env().Undefined();
}

// V8's own API too: moderate memory pressure (Isolate::
// MemoryPressureNotification). V8 starts incremental marking that frees
// memory (and compacts) as it ends, in steps between the caller's tasks and
// on its helper threads, where a full collection is one pause: 51-84 ms with
// 131,072 rules after a reload. Returns at once; does nothing if marking is
// already under way.
Napi::Value startHeapCollection(const Napi::CallbackInfo& info) {
  v8::Isolate* isolate = v8::Isolate::GetCurrent();
  if (isolate == nullptr) throw Napi::Error::New(info.Env(), "startHeapCollection: no V8 isolate on this thread");
  // On the isolate's thread V8 acts on it at once and sets the level back
  // to none, so the next call starts marking again.
  isolate->MemoryPressureNotification(v8::MemoryPressureLevel::kModerate);
  return info.Env().Undefined();
}

Napi::Object init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  data->socketClass = Napi::Persistent(SocketWrap::define(env));
  env.SetInstanceData(data);
  exports.Set("open", Napi::Function::New<open>(env, "open"));
  exports.Set("sampleClocks", Napi::Function::New<sampleClocks>(env, "sampleClocks"));
  exports.Set("errnoName", Napi::Function::New<errnoName>(env, "errnoName"));
  exports.Set("parseControl", Napi::Function::New<parseControl>(env, "parseControl"));
  exports.Set("compactHeap", Napi::Function::New<compactHeap>(env, "compactHeap"));
  exports.Set("startHeapCollection", Napi::Function::New<startHeapCollection>(env, "startHeapCollection"));
  return exports;
}

}  // namespace

NODE_API_MODULE(mup_tstamp, init)
