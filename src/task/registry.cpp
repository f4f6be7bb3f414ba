// The function registry: name -> invoker, filled at static-init time by HERD_TASK (and by
// dlopen of task libraries). One instance per process, in libherd.so.
#include <dlfcn.h>

#include <mutex>
#include <shared_mutex>
#include <unordered_map>

#include "common/util.hpp"
#include "herd/error.hpp"
#include "herd/remote.hpp"
#include "herd/shell.hpp"

namespace herd::detail {
namespace {

class Registry {
 public:
  static Registry& instance() {
    static Registry r;
    return r;
  }
  bool add(const char* name, const void* address, InvokeFn invoke, std::size_t arity) {
    std::unique_lock lock(mu_);
    by_name_[name] = FunctionEntry{name, invoke, arity};
    by_address_[address] = name;
    return true;
  }
  const FunctionEntry* find(const std::string& name) {
    std::shared_lock lock(mu_);
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : &it->second;
  }
  const std::string* name_of(const void* address) {
    std::shared_lock lock(mu_);
    auto it = by_address_.find(address);
    return it == by_address_.end() ? nullptr : &it->second;
  }
  std::vector<std::string> names() {
    std::shared_lock lock(mu_);
    std::vector<std::string> out;
    for (const auto& [name, entry] : by_name_) out.push_back(name);
    return out;
  }

 private:
  Registry() {
    // Built-ins are registered here rather than by a static object in their own file, which the
    // linker could drop.
    by_name_["herd::shell"] = FunctionEntry{"herd::shell", &invoke<&herd::shell>, 1};
    by_address_[reinterpret_cast<const void*>(&herd::shell)] = "herd::shell";
  }
  std::shared_mutex mu_;
  // unordered_map nodes are stable, so pointers handed out stay valid as entries are added.
  std::unordered_map<std::string, FunctionEntry> by_name_;
  std::unordered_map<const void*, std::string> by_address_;
};

}  // namespace

bool register_function(const char* name, const void* address, InvokeFn invoke, std::size_t arity) {
  return Registry::instance().add(name, address, invoke, arity);
}

const FunctionEntry* find_function(const std::string& name) { return Registry::instance().find(name); }

const std::string& function_name(const void* address, const char* signature) {
  if (const std::string* name = Registry::instance().name_of(address)) return *name;
  std::string symbol;
  Dl_info info{};
  if (::dladdr(address, &info) != 0 && info.dli_sname != nullptr) symbol = util::demangle(info.dli_sname);
  std::string what = "function ";
  what += symbol.empty() ? "of type " + util::demangle(signature) : "'" + symbol + "'";
  what += " was never registered: add HERD_TASK(";
  what += symbol.empty() ? "fn" : symbol.substr(0, symbol.find('('));
  what += ") at namespace scope, next to its definition";
  throw FunctionNotFound(what);
}

std::vector<std::string> registered_functions() { return Registry::instance().names(); }

void throw_arity_mismatch(std::size_t expected, std::size_t got) {
  throw std::invalid_argument("task takes " + std::to_string(expected) + " arguments, got " +
                              std::to_string(got));
}

}  // namespace herd::detail
