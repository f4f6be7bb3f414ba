// A cluster's CURVE keys made for a test (CURVE needs no files for them).
#pragma once

#include <doctest/doctest.h>

#include <zmq.h>

#include "common/security.hpp"

namespace herd::testing {

inline security::Keys make_keys() {
  security::Keys k;
  char pub[41], sec[41];
  REQUIRE(zmq_curve_keypair(pub, sec) == 0);
  k.server_public = pub;
  k.server_secret = sec;
  REQUIRE(zmq_curve_keypair(pub, sec) == 0);
  k.client_public = pub;
  k.client_secret = sec;
  return k;
}

}  // namespace herd::testing
