#include "sys_error.h"

#include <string.h>

namespace mup {

std::string errnoName(int err) {
  const char* name = strerrorname_np(err);
  return name != nullptr ? std::string(name) : "errno " + std::to_string(err);
}

static std::string message(int err, const std::string& syscall, const std::string& context,
                           const std::string& hint) {
  std::string m = context + ": " + syscall + " failed: " + strerror(err) + " (" + errnoName(err) + ")";
  if (!hint.empty()) m += "; " + hint;
  return m;
}

SysError::SysError(int err, std::string syscall, const std::string& context, const std::string& hint)
    : std::runtime_error(message(err, syscall, context, hint)),
      err_(err),
      code_(errnoName(err)),
      syscall_(std::move(syscall)) {}

}  // namespace mup
