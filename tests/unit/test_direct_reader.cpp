// protocol::DirectReader, the fast path of decode() for the round trip's messages, against
// msgpack-c's own path (decode_msgpack, decode_each_msgpack: unpack into a zone, then
// convert): the same values for what both accept, the same errors (the fallback's) for what
// msgpack-c refuses, on well-formed messages and on many thousands of corrupted ones.
#include <doctest/doctest.h>

#include <cstring>
#include <random>

#include "protocol/codec.hpp"

using namespace herd::protocol;

namespace {

std::string packed(const auto& value) {
  msgpack::sbuffer b;
  msgpack::pack(b, value);
  return std::string(b.data(), b.size());
}

/// What msgpack-c alone makes of `body` (decode_each_msgpack); `seen` collects each element f was
/// given.
template <typename T>
bool reference_decode_each(const std::string& body, std::vector<std::string>& seen, std::vector<TaskId>& second,
                           std::string& error) {
  return decode_each_msgpack<T>(
      Bytes(body.data(), body.size()),
      [&](const T& t) {
        seen.push_back(packed(t));
        return true;
      },
      error, {}, &second);
}

/// The reader alone took the whole body (so the tests below do test the fast path).
template <typename T>
bool direct_alone(const std::string& body, T& out) {
  DirectReader reader = direct_reader(Bytes(body.data(), body.size()), UnpackLimits{});
  reader.read(out);
  return reader.ok() && reader.at_end();
}

TaskSpec spec(TaskId id, int variant) {
  TaskSpec t;
  t.id = id;
  t.function = variant % 2 ? "a_function_name_longer_than_fifteen" : "add";
  t.args = {'\x92', '\x01', '\x02'};
  if (variant % 3 == 0) t.refs = {{id - 1, 0, -1}, {1ull << 40, 2, 7}};
  t.key = variant % 4 ? "" : "train-" + std::to_string(id);
  t.priority = variant % 5 - 2;
  t.retries = static_cast<std::uint32_t>(variant);
  if (variant % 2) t.resources = {{"gpu", 1}, {"memory", 2.5e9}, {"x", -0.125}};
  t.want_result = variant % 7 != 0;
  t.duration_s = 3600;
  if (variant % 6 == 1) {
    t.gang = id;
    t.gang_rank = 1;
    t.gang_size = 4;
  }
  t.timeout_ms = variant % 2 ? 0 : 70000;
  if (variant % 3 == 1) t.workers = {"w-1", "node7"};
  t.allow_other_workers = variant % 3 == 2;
  t.pool = variant % 2 ? "gpu" : "";
  t.campaign = variant % 5 ? "" : "nightly";
  t.isolated = variant % 4 == 3;
  t.isolated_memory = variant % 4 == 3 ? (3ull << 32) : 0;
  return t;
}

ExecuteTasksEvent execute(int n) {
  ExecuteTasksEvent ev;
  for (int i = 0; i < n; ++i) {
    const TaskSpec s = spec(100 + i, i);
    ExecuteTask t;
    t.id = s.id;
    t.function = s.function;
    t.args = s.args;
    t.refs = s.refs;
    if (i % 2) t.inputs = {{99, {"tcp://10.0.0.2:4000", "tcp://10.0.0.3:4000"}}};
    t.key = s.key;
    t.resources = s.resources;
    t.full_result = i % 3 == 0;
    t.gang = s.gang;
    t.gang_attempt = static_cast<std::uint32_t>(i);
    t.timeout_ms = s.timeout_ms;
    t.isolated = s.isolated;
    t.isolated_memory = s.isolated_memory;
    ev.tasks.push_back(t);
  }
  ev.free = {1, 2, 1ull << 63};
  return ev;
}

TaskResultsEvent results(int n) {
  TaskResultsEvent ev;
  for (int i = 0; i < n; ++i) {
    TaskResult r;
    r.id = 500 + static_cast<TaskId>(i);
    r.ok = i % 2 == 0;
    r.nbytes = static_cast<std::uint64_t>(i) * 1000;
    r.inline_data.assign(static_cast<std::size_t>(i * 7), static_cast<char>(i));
    if (!r.ok) r.error = {"std::runtime_error", "boom " + std::to_string(i), "f-" + std::to_string(i), "w-2"};
    r.duration_us = 123456789;
    r.missing_input = i % 3 == 1;
    r.handed_back = i % 5 == 4;
    if (r.missing_input) r.unreachable = {{7, {"tcp://h:1"}}};
    ev.results.push_back(r);
  }
  ev.acquired = {3, 4};
  ev.acquire_failed = {{8, {}}};
  return ev;
}

TaskUpdatesEvent updates(int n) {
  TaskUpdatesEvent ev;
  ev.addresses = {"tcp://10.0.0.2:4000", ""};
  for (int i = 0; i < n; ++i) {
    TaskUpdate u;
    u.id = 900 + static_cast<TaskId>(i);
    u.state = static_cast<std::uint8_t>(i % 4);
    u.location = i % 2 ? -1 : 0;
    u.nbytes = 1ull << (i % 40);
    u.inline_data.assign(static_cast<std::size_t>(i), 'z');
    if (i % 3 == 2) u.error = {"herd::TaskCancelled", "cancelled", "k", ""};
    ev.updates.push_back(u);
  }
  return ev;
}

/// What a corrupted copy of `body` may look like: one change of a kind msgpack readers trip on.
std::string mutate(const std::string& body, std::mt19937& rng) {
  static const unsigned char interesting[] = {0x00, 0x01, 0x7f, 0x80, 0x81, 0x8f, 0x90, 0x91, 0x9f, 0xa0, 0xa5, 0xbf,
                                              0xc0, 0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6, 0xc7, 0xca, 0xcb, 0xcc, 0xcd,
                                              0xce, 0xcf, 0xd0, 0xd1, 0xd2, 0xd3, 0xd4, 0xd9, 0xda, 0xdb, 0xdc, 0xdd,
                                              0xde, 0xdf, 0xe0, 0xff};
  std::string m = body;
  auto at = [&] { return std::uniform_int_distribution<std::size_t>(0, m.size() - 1)(rng); };
  switch (rng() % 6) {
    case 0: m[at()] = static_cast<char>(rng()); break;
    case 1: m[at()] = static_cast<char>(interesting[rng() % sizeof interesting]); break;
    case 2: m.resize(at()); break;
    case 3: m.insert(m.begin() + static_cast<std::ptrdiff_t>(at()), static_cast<char>(interesting[rng() % sizeof interesting])); break;
    case 4: m.erase(at(), 1); break;
    default:
      m[at()] = static_cast<char>(interesting[rng() % sizeof interesting]);
      m[at()] = static_cast<char>(rng());
      break;
  }
  return m;
}

/// decode() and the reference agree on `body`: both fail with the same error, or both succeed
/// with the same value. Decoding starts from `start` (the worker decodes into a reused event).
template <typename T>
void agree(const std::string& body, const T& start = T{}) {
  T fast = start, slow = start;
  std::string fast_error, slow_error;
  const bool fast_ok = decode(Bytes(body.data(), body.size()), fast, fast_error);
  const bool slow_ok = decode_msgpack(Bytes(body.data(), body.size()), slow, slow_error);
  REQUIRE(fast_ok == slow_ok);
  if (fast_ok) {
    REQUIRE(packed(fast) == packed(slow));
  } else {
    REQUIRE(fast_error == slow_error);
  }
}

}  // namespace

TEST_CASE("Protocol.DirectReader.WellFormedMessagesTakeTheFastPathWithTheSameValues") {
  for (int n : {0, 1, 2, 5}) {
    const std::string e = packed(execute(n)), r = packed(results(n)), u = packed(updates(n));
    ExecuteTasksEvent ev;
    TaskResultsEvent rv;
    TaskUpdatesEvent uv;
    CHECK(direct_alone(e, ev));
    CHECK(direct_alone(r, rv));
    CHECK(direct_alone(u, uv));
    CHECK(packed(ev) == e);
    CHECK(packed(rv) == r);
    CHECK(packed(uv) == u);
    agree<ExecuteTasksEvent>(e);
    agree<TaskResultsEvent>(r);
    agree<TaskUpdatesEvent>(u);
  }
  for (int v = 0; v < 12; ++v) {
    const std::string s = packed(spec(1000 + static_cast<TaskId>(v), v));
    TaskSpec out;
    CHECK(direct_alone(s, out));
    CHECK(packed(out) == s);
  }
  const std::string k = packed(KeysEvent{{0, 127, 128, 65535, 65536, 1ull << 40}});
  KeysEvent keys;
  CHECK(direct_alone(k, keys));
  CHECK(keys.ids.back() == (1ull << 40));
}

TEST_CASE("Protocol.DirectReader.OtherEncodingsConvertAccepts") {
  // What another msgpack writer may send, and convert takes: a string as bin, bytes as str,
  // a double as an integer or a float32, a small unsigned as a signed format.
  msgpack::sbuffer b;
  msgpack::packer<msgpack::sbuffer> pk(b);
  pk.pack_array(2);                          // a TaskUpdatesEvent
  pk.pack_array(1).pack_bin(3).pack_bin_body("abc", 3);  // addresses: one, as bin
  pk.pack_array(1);
  pk.pack_array(6);
  pk.pack_int8(9);                           // id, as int8
  pk.pack_int16(2);                          // state
  pk.pack_int8(-1);                          // location
  pk.pack_uint8(5);                          // nbytes
  pk.pack_str(2).pack_str_body("hi", 2);     // inline_data, as str
  pk.pack_array(2).pack(std::string("T")).pack(std::string("M"));  // error: two of four fields
  const std::string u(b.data(), b.size());
  TaskUpdatesEvent out;
  REQUIRE(direct_alone(u, out));
  CHECK(out.addresses == std::vector<std::string>{"abc"});
  CHECK(out.updates.at(0).id == 9);
  CHECK(out.updates.at(0).location == -1);
  CHECK(std::string(out.updates.at(0).inline_data.begin(), out.updates.at(0).inline_data.end()) == "hi");
  CHECK(out.updates.at(0).error.message == "M");
  CHECK(out.updates.at(0).error.worker.empty());
  agree<TaskUpdatesEvent>(u);

  msgpack::sbuffer b2;
  msgpack::packer<msgpack::sbuffer> p2(b2);
  p2.pack_array(8);
  p2.pack_uint64(1);
  p2.pack(std::string("f"));
  p2.pack_bin(0);
  p2.pack_array(0);
  p2.pack(std::string(""));
  p2.pack_int32(-3);
  p2.pack_uint32(0);
  p2.pack_map(3).pack(std::string("a")).pack_int8(-2).pack(std::string("b")).pack_float(0.5f);
  p2.pack(std::string("c")).pack_uint64(7);
  const std::string s(b2.data(), b2.size());
  TaskSpec t;
  REQUIRE(direct_alone(s, t));
  CHECK(t.priority == -3);
  CHECK(t.resources.at("a") == -2.0);
  CHECK(t.resources.at("b") == 0.5);
  CHECK(t.resources.at("c") == 7.0);
  CHECK(t.want_result);  // not on the wire: the default stays
  agree<TaskSpec>(s);
}

TEST_CASE("Protocol.DirectReader.GivesUpWhereConvertWould") {
  // Each of these, msgpack-c refuses or the reader leaves to it: decode() must then say what
  // msgpack-c says.
  std::vector<std::string> bodies;
  bodies.push_back(packed(std::string("hello")));                          // not a struct
  bodies.push_back(packed(std::vector<int>{-1}));                          // negative id
  bodies.push_back(packed(std::vector<std::vector<int>>{{1}}));            // a list where ids go
  bodies.push_back(std::string("\xdd\xff\xff\xff\xff", 5));               // a huge array, no bytes
  bodies.push_back(std::string(100, '\x91') + std::string(1, '\0'));      // too deep
  bodies.push_back(packed(KeysEvent{{1}}) + "x");                          // trailing bytes
  bodies.push_back(packed(std::make_tuple(std::vector<TaskId>{1}, 7)));    // a field this version lacks
  bodies.push_back(packed(std::vector<double>{1.5}));                      // a double for an id
  bodies.push_back(std::string("\x91\x91\xcf\xff\xff\xff\xff\xff\xff\xff\xff", 11));  // [[2^64-1]]
  for (const std::string& body : bodies) {
    agree<KeysEvent>(body);
    agree<TaskUpdatesEvent>(body);
    agree<ExecuteTasksEvent>(body);
  }
  // Numbers out of a field's range, which convert refuses: a uint8 given 256, an int32 given
  // 2^31 or one below its minimum, a uint64 given a negative number. And the extremes it takes.
  auto update = [](auto state, auto location, auto nbytes) {
    return packed(std::make_tuple(std::vector<std::string>{},
                                  std::vector<std::tuple<TaskId, decltype(state), decltype(location), decltype(nbytes)>>{
                                      {TaskId{1}, state, location, nbytes}}));
  };
  for (const std::string& body : {update(256, -1, 0), update(1, 1ll << 31, 0), update(1, -(1ll << 31) - 1, 0),
                                  update(1, 0, -1), update(-1, 0, 0)}) {
    TaskUpdatesEvent out;
    CHECK_FALSE(direct_alone(body, out));
    agree<TaskUpdatesEvent>(body);
  }
  const std::string extremes = update(255, -(1ll << 31), ~0ull);
  TaskUpdatesEvent out;
  REQUIRE(direct_alone(extremes, out));
  CHECK(out.updates.at(0).state == 255);
  CHECK(out.updates.at(0).location == std::numeric_limits<std::int32_t>::min());
  CHECK(out.updates.at(0).nbytes == ~0ull);
  agree<TaskUpdatesEvent>(extremes);
}

TEST_CASE("Protocol.DirectReader.CorruptedMessagesDecodeAsMsgpackWould") {
  std::mt19937 rng(20261127);
  const std::vector<std::string> execs = {packed(execute(1)), packed(execute(3))};
  const std::vector<std::string> res = {packed(results(1)), packed(results(4))};
  const std::vector<std::string> ups = {packed(updates(1)), packed(updates(3))};
  const ExecuteTasksEvent reused = execute(2);  // the worker's event, decoded into again
  int mutated = 0;
  for (int i = 0; i < 4000; ++i) {
    for (const auto& e : execs) {
      const std::string m = mutate(e, rng);
      agree<ExecuteTasksEvent>(m);
      agree<ExecuteTasksEvent>(m, reused);
      ++mutated;
    }
    for (const auto& r : res) agree<TaskResultsEvent>(mutate(r, rng)), ++mutated;
    for (const auto& u : ups) agree<TaskUpdatesEvent>(mutate(u, rng)), ++mutated;
  }
  CHECK(mutated == 4000 * 6);
}

TEST_CASE("Protocol.DirectReader.DecodeEachSeesWhatMsgpackWouldSee") {
  std::mt19937 rng(7);
  std::vector<std::string> batches;
  for (int n : {1, 2, 4}) {
    BatchWriter batch;
    for (int i = 0; i < n; ++i) batch.add(spec(10 + static_cast<TaskId>(i), i));
    const zmq::message_t plain = batch.message();
    const zmq::message_t with = batch.message({5, 6});
    batches.emplace_back(static_cast<const char*>(plain.data()) + kHeaderSize, plain.size() - kHeaderSize);
    batches.emplace_back(static_cast<const char*>(with.data()) + kHeaderSize, with.size() - kHeaderSize);
  }
  auto check = [](const std::string& body) {
    std::vector<std::string> fast_seen, slow_seen;
    std::vector<TaskId> fast_second, slow_second;
    std::string fast_error, slow_error;
    const bool fast_ok = decode_each<TaskSpec>(
        Bytes(body.data(), body.size()),
        [&](const TaskSpec& t) {
          fast_seen.push_back(packed(t));
          return true;
        },
        fast_error, {}, &fast_second);
    const bool slow_ok = reference_decode_each<TaskSpec>(body, slow_seen, slow_second, slow_error);
    REQUIRE(fast_ok == slow_ok);
    REQUIRE(fast_seen == slow_seen);  // the same elements, in order, also before an error
    if (fast_ok) {
      REQUIRE(fast_second == slow_second);
    } else {
      REQUIRE(fast_error == slow_error);
    }
  };
  for (const auto& b : batches) {
    check(b);
    // The fast path reads it: an element's spec comes back byte for byte.
    std::vector<std::string> seen;
    auto collect = [&](const TaskSpec& t) {
      seen.push_back(packed(t));
      return true;
    };
    REQUIRE(decode_each_direct<TaskSpec>(Bytes(b.data(), b.size()), collect, UnpackLimits{},
                                         static_cast<std::vector<TaskId>*>(nullptr)));
    CHECK(!seen.empty());
  }
  for (int i = 0; i < 3000; ++i) {
    for (const auto& b : batches) check(mutate(b, rng));
  }
}
