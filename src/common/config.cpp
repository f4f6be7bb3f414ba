#include "common/config.hpp"

#include "common/env.hpp"

#include <cstdlib>
#include <sstream>
#include <stdexcept>

namespace herd {

Config Config::from_env() {
  Config c;
#define HERD_CONFIG(name, type, def, variable, doc)                                          \
  if (const char* v = env::get(variable); v != nullptr && *v != '\0') {                     \
    try {                                                                                   \
      c.name = static_cast<type>(std::stoll(v));                                            \
    } catch (const std::exception&) {                                                       \
      throw std::invalid_argument(std::string(variable) + "=" + v + " is not an integer");  \
    }                                                                                       \
  }
#include "common/config_def.hpp"
#undef HERD_CONFIG
  return c;
}

std::string Config::describe() {
  std::ostringstream out;
#define HERD_CONFIG(name, type, def, env, doc) out << "  " << env << " (default " << def << "): " << doc << "\n";
#include "common/config_def.hpp"
#undef HERD_CONFIG
  return out.str();
}

}  // namespace herd
