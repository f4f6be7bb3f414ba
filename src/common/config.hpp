#pragma once
#include <cstdint>
#include <string>

namespace herd {

/// Runtime knobs (see config_def.hpp); defaults overridden by environment variables.
struct Config {
#define HERD_CONFIG(name, type, def, env, doc) type name = def;
#include "common/config_def.hpp"
#undef HERD_CONFIG
  /// Defaults, then the environment.
  static Config from_env();
  /// "name = value  # description" lines, for --help and docs.
  static std::string describe();
};

}  // namespace herd
