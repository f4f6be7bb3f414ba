#include "common/roles.hpp"
#include "common/env.hpp"

#include <cstdlib>
#include <iostream>

#include "herd/cluster.hpp"

namespace herd {
namespace detail {
namespace {
RoleEntry g_role_entry = nullptr;
}  // namespace

std::string join_role_args(const std::vector<std::string>& args) {
  std::string s;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (i) s += kRoleArgSeparator;
    s += args[i];
  }
  return s;
}

void set_role_entry(RoleEntry entry) { g_role_entry = entry; }

void enter_role_if_requested() {
  const char* role = env::get(env::Var::role);
  if (role == nullptr || *role == '\0') return;
  const std::string r = role;
  std::vector<std::string> args;
  if (const char* a = env::get(env::Var::role_args); a != nullptr && *a != '\0') {
    // Separated by the unit separator when herd wrote them, by spaces in a job script.
    const std::string s = a;
    const char sep = s.find(kRoleArgSeparator) != std::string::npos ? kRoleArgSeparator : ' ';
    std::string cur;
    for (char c : s) {
      if (c == sep) {
        if (!cur.empty() || sep == kRoleArgSeparator) args.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    if (!cur.empty() || sep == kRoleArgSeparator) args.push_back(cur);
  }
  // Not inherited by what the role starts (shell tasks, nested herd programs).
  ::unsetenv(kRoleEnv);
  ::unsetenv(kRoleArgsEnv);
  int rc = 2;
  if (g_role_entry == nullptr) {
    std::cerr << "herd: HERD_ROLE=" << r << " but this program has no role entry linked in\n";
  } else {
    rc = g_role_entry(r, args);
  }
  std::fflush(stdout);
  std::exit(rc);
}

}  // namespace detail

void init(int, char**) { detail::enter_role_if_requested(); }

}  // namespace herd
