// A failed system call as a value: errno, its name, the call, what it was
// doing, and what the user can do about it. Thrown by the POSIX layer
// (packet_socket, clocks) and turned into a JavaScript Error with `code`
// (the errno name), `errno` and `syscall` by the addon glue.
#pragma once

#include <stdexcept>
#include <string>

namespace mup {

/** "EOPNOTSUPP" for 95; "errno 1234" for a number glibc does not name. */
std::string errnoName(int err);

class SysError : public std::runtime_error {
 public:
  /**
   * `err`: the errno; `syscall`: e.g. "ioctl(SIOCSHWTSTAMP)"; `context`:
   * what was being done ("enable hardware timestamping on eth0"); `hint`:
   * what to do, may be empty.
   */
  SysError(int err, std::string syscall, const std::string& context, const std::string& hint);
  int err() const { return err_; }
  const std::string& code() const { return code_; }
  const std::string& syscall() const { return syscall_; }

 private:
  int err_;
  std::string code_;
  std::string syscall_;
};

/** A bad argument (never a system call): becomes a JavaScript TypeError. */
class ArgError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace mup
