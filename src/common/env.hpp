// The one way herd reads its environment: every HERD_* variable is registered (numeric knobs in
// config_def.hpp, the others in env_def.hpp), and this is the only file that calls getenv.
// Reading a HERD_* name the registry lacks is a bug, caught here at run time and by
// tests/unit/test_knobs.cpp before (which also checks README's table against the registry).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace herd::env {

enum class Var {
#define HERD_ENV(id, name, who, def, doc) id,
#include "common/env_def.hpp"
#undef HERD_ENV
};

/// The variable's name ("HERD_AUTH"; a prefix ends in '_').
const char* name(Var v);
/// Its value, or nullptr when it is not set.
const char* get(Var v);
/// Its value when set and not empty, else `fallback`.
std::string get_or(Var v, std::string fallback);
/// The value of `name` <suffix> for a prefix variable (HERD_PARAM_ + "lr"), or nullptr.
const char* get(Var prefix, std::string_view suffix);

/// Any other variable, by name: another program's (SLURM_JOB_ID, CUDA_VISIBLE_DEVICES, PATH,
/// HOME) or a registered HERD_* one. @throws std::logic_error for a HERD_* name the registry
/// lacks (a variable herd reads must be in it).
const char* get(const char* name);

/// Whether `name` is a registered variable (or a registered prefix's variable).
bool registered(std::string_view name);

/// One knob as `herd config` shows it.
struct Knob {
  std::string name;
  std::string value;   // what this process would use
  std::string source;  // "environment" or "default"
  std::string doc;
  bool internal = false;  // set by herd for the processes it starts
  bool numeric = false;   // a Config field (config_def.hpp): the scheduler's value wins in its peers
};
/// Every knob of both registries, numeric first, in registry order.
std::vector<Knob> knobs();

}  // namespace herd::env
