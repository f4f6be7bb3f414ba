// A task library for `herd worker --load`: the worker is the generic `herd` binary, which
// knows none of these functions until it loads this file.
#include <herd/herd.hpp>

#include <string>

std::string shout(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s + "!";
}
HERD_TASK(shout);
