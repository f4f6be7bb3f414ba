#include "common/env.hpp"

#include <cstdlib>
#include <stdexcept>

#include "common/config.hpp"

namespace herd::env {

namespace {

struct Entry {
  const char* name;
  bool internal;
  const char* def;
  const char* doc;
};

constexpr bool kUser = false, kInternal = true;
#define user kUser
#define internal kInternal
constexpr Entry kEntries[] = {
#define HERD_ENV(id_, name_, who_, default_, doc_) {name_, who_, default_, doc_},
#include "common/env_def.hpp"
#undef HERD_ENV
};
#undef user
#undef internal

constexpr const char* kNumeric[] = {
#define HERD_CONFIG(field_, type_, default_, variable_, doc_) variable_,
#include "common/config_def.hpp"
#undef HERD_CONFIG
};

const Entry& entry(Var v) { return kEntries[static_cast<std::size_t>(v)]; }

bool is_prefix(const char* name) {
  const std::string_view n(name);
  return !n.empty() && n.back() == '_';
}

}  // namespace

const char* name(Var v) { return entry(v).name; }

const char* get(Var v) { return std::getenv(entry(v).name); }

std::string get_or(Var v, std::string fallback) {
  const char* value = get(v);
  return value != nullptr && *value != '\0' ? std::string(value) : std::move(fallback);
}

const char* get(Var prefix, std::string_view suffix) {
  return std::getenv((std::string(entry(prefix).name) + std::string(suffix)).c_str());
}

bool registered(std::string_view n) {
  for (const Entry& e : kEntries) {
    if (is_prefix(e.name) ? n.substr(0, std::string_view(e.name).size()) == e.name : n == e.name) return true;
  }
  for (const char* numeric : kNumeric) {
    if (n == numeric) return true;
  }
  return false;
}

const char* get(const char* n) {
  if (std::string_view(n).substr(0, 5) == "HERD_" && !registered(n)) {
    throw std::logic_error(std::string("herd reads ") + n + ", which is not in its registry of variables "
                           "(src/common/env_def.hpp or config_def.hpp)");
  }
  return std::getenv(n);
}

std::vector<Knob> knobs() {
  std::vector<Knob> out;
  const Config config = Config::from_env();
#define HERD_CONFIG(field_, type_, default_, variable_, doc_)                        \
  {                                                                                  \
    Knob k;                                                                          \
    k.name = variable_;                                                              \
    k.value = std::to_string(config.field_);                                         \
    const char* set = std::getenv(variable_);                                        \
    k.source = set != nullptr && *set != '\0' ? "environment" : "default";           \
    k.doc = doc_;                                                                    \
    k.numeric = true;                                                                \
    out.push_back(std::move(k));                                                     \
  }
#include "common/config_def.hpp"
#undef HERD_CONFIG
  for (const Entry& e : kEntries) {
    Knob k;
    k.name = e.name;
    k.internal = e.internal;
    k.doc = e.doc;
    const char* set = is_prefix(e.name) ? nullptr : std::getenv(e.name);
    if (set != nullptr) {
      k.value = set;
      k.source = "environment";
    } else {
      k.value = e.def;
      k.source = "default";
    }
    out.push_back(std::move(k));
  }
  return out;
}

}  // namespace herd::env
