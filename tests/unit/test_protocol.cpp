// Protocol round trips and the decoder's defences against malformed input.
#include <doctest/doctest.h>

#include <cstring>
#include <type_traits>

#include "protocol/codec.hpp"

using namespace herd::protocol;

namespace {
/// A body alone, without a header.
template <typename T>
zmq::message_t pack(const T& in) {
  msgpack::sbuffer b;
  msgpack::pack(b, in);
  return zmq::message_t(b.data(), b.size());
}

/// A message of nothing but a header.
zmq::message_t make_header(MessageType type) {
  zmq::message_t m(kHeaderSize);
  write_header(static_cast<char*>(m.data()), type);
  return m;
}

/// The body of a whole message (header and body).
Bytes body_of(const zmq::message_t& m) {
  REQUIRE(m.size() >= kHeaderSize);
  return {static_cast<const char*>(m.data()) + kHeaderSize, m.size() - kHeaderSize};
}

template <typename T>
T round_trip(const T& in) {
  zmq::message_t m = pack(in);
  T out;
  std::string error;
  REQUIRE_MESSAGE(decode(m, out, error), error);
  return out;
}
}  // namespace

TEST_CASE("Protocol.Header.RoundTrip") {
  zmq::message_t h = make_header(MessageType::submit_tasks);
  CHECK(h.size() == kHeaderSize);
  CHECK(std::memcmp(h.data(), "HERD", 4) == 0);
  std::string error;
  auto type = parse_header(h, error);
  REQUIRE(type.has_value());
  CHECK(*type == MessageType::submit_tasks);
}

TEST_CASE("Protocol.Message.HeaderAndBodyInOneFrame") {
  // Wire protocol 7: one frame per message, its first six bytes the header.
  KeysEvent ev{{1, 2, 1ull << 45}};
  zmq::message_t m = encode<MessageType::release_keys>(ev);
  std::string error;
  REQUIRE(parse_header(m, error) == MessageType::release_keys);
  const zmq::message_t alone = pack(ev);
  REQUIRE(m.size() == kHeaderSize + alone.size());
  CHECK(std::memcmp(static_cast<const char*>(m.data()) + kHeaderSize, alone.data(), alone.size()) == 0);
  Received r;
  r.message = std::move(m);
  KeysEvent back;
  REQUIRE_MESSAGE(decode<MessageType::release_keys>(r, back, error), error);
  CHECK(back.ids == ev.ids);
  // A header with no body.
  r.message = make_header(MessageType::release_keys);
  CHECK_FALSE(decode<MessageType::release_keys>(r, back, error));
  CHECK(error == "release_keys without a body");
  r.message = zmq::message_t(3);
  CHECK(r.body().size == 0);
}

TEST_CASE("Protocol.Header.Rejects") {
  std::string error;
  zmq::message_t short_frame(3);
  CHECK_FALSE(parse_header(short_frame, error));
  CHECK(error.find("no herd header") != std::string::npos);

  zmq::message_t h = make_header(MessageType::heartbeat);
  static_cast<unsigned char*>(h.data())[4] = 99;  // version
  CHECK_FALSE(parse_header(h, error));
  CHECK(error.find("protocol version 99") != std::string::npos);

  zmq::message_t u = make_header(MessageType::heartbeat);
  static_cast<unsigned char*>(u.data())[5] = 77;  // type
  CHECK_FALSE(parse_header(u, error));
  CHECK(error.find("unknown message type 77") != std::string::npos);
}

TEST_CASE("Protocol.Hello.RoundTrip") {
  HelloRequest h;
  h.role = static_cast<std::uint8_t>(Role::worker);
  h.name = "w1";
  h.nthreads = 4;
  h.data_address = "tcp://127.0.0.1:5555";
  h.resources = {{"gpu", 2.0}};
  const HelloRequest out = round_trip(h);
  CHECK(out.protocol == kProtocolVersion);
  CHECK(out.name == "w1");
  CHECK(out.nthreads == 4);
  CHECK(out.data_address == h.data_address);
  CHECK(out.resources.at("gpu") == 2.0);
}

TEST_CASE("Protocol.SubmitTasks.RoundTrip") {
  SubmitTasksRequest req;
  for (int i = 0; i < 3; ++i) {
    TaskSpec t;
    t.id = (1ull << 40) | static_cast<unsigned>(i);
    t.function = "add";
    t.args = {'\x92', '\x01', '\x02'};
    t.refs = {{7, 1, -1}};
    t.priority = i;
    t.resources = {{"gpu", 1}};
    req.tasks.push_back(t);
  }
  const auto out = round_trip(req);
  REQUIRE(out.tasks.size() == 3);
  CHECK(out.tasks[2].id == ((1ull << 40) | 2u));
  CHECK(out.tasks[2].priority == 2);
  CHECK(out.tasks[1].args == req.tasks[1].args);
  CHECK(out.tasks[0].refs[0].id == 7);
  CHECK(out.tasks[0].refs[0].arg == 1);
  CHECK(out.tasks[0].refs[0].elem == -1);
}

namespace {
// TaskSpec as senders before TaskOptions::isolated() wrote it (the fields up to `pool`).
struct TaskSpecBeforeIsolated {
  TaskId id = 0;
  std::string function;
  std::vector<char> args;
  std::vector<ArgRef> refs;
  std::string key;
  std::int32_t priority = 0;
  std::uint32_t retries = 0;
  std::map<std::string, double> resources;
  bool want_result = true;
  std::uint32_t duration_s = 0;
  TaskId gang = 0;
  std::uint32_t gang_rank = 0, gang_size = 0, timeout_ms = 0;
  std::vector<std::string> workers;
  bool allow_other_workers = false;
  std::string pool;
  MSGPACK_DEFINE(id, function, args, refs, key, priority, retries, resources, want_result, duration_s,
                 gang, gang_rank, gang_size, timeout_ms, workers, allow_other_workers, pool);
};

template <typename To, typename From>
To reencode(const From& in) {
  msgpack::sbuffer buf;
  msgpack::pack(buf, in);
  zmq::message_t m(buf.data(), buf.size());
  To out;
  std::string error;
  REQUIRE_MESSAGE(decode(m, out, error), error);
  return out;
}
}  // namespace

TEST_CASE("Protocol.Isolated.RoundTrip") {
  SubmitTasksRequest req;
  TaskSpec t;
  t.id = 42;
  t.function = "crashy";
  t.timeout_ms = 1500;
  t.pool = "cpu";
  t.isolated = true;
  t.isolated_memory = 256ull << 20;
  req.tasks.push_back(t);
  TaskSpec plain;
  plain.id = 43;
  req.tasks.push_back(plain);
  const auto out = round_trip(req);
  REQUIRE(out.tasks.size() == 2);
  CHECK(out.tasks[0].isolated);
  CHECK(out.tasks[0].isolated_memory == (256ull << 20));
  CHECK(out.tasks[0].timeout_ms == 1500);
  CHECK(out.tasks[0].pool == "cpu");
  CHECK_FALSE(out.tasks[1].isolated);
  CHECK(out.tasks[1].isolated_memory == 0);

  ExecuteTasksEvent ev;
  ExecuteTask e;
  e.id = 42;
  e.function = "crashy";
  e.timeout_ms = 1500;
  e.isolated = true;
  e.isolated_memory = 5ull << 30;  // past 32 bits
  ev.tasks.push_back(e);
  ev.tasks.emplace_back();
  const auto eout = round_trip(ev);
  REQUIRE(eout.tasks.size() == 2);
  CHECK(eout.tasks[0].isolated);
  CHECK(eout.tasks[0].isolated_memory == (5ull << 30));
  CHECK(eout.tasks[0].timeout_ms == 1500);
  CHECK_FALSE(eout.tasks[1].isolated);
  CHECK(eout.tasks[1].isolated_memory == 0);
}

TEST_CASE("Protocol.Isolated.OlderAndNewerSenders") {
  // A spec from a sender without the fields: not isolated, no cap.
  TaskSpecBeforeIsolated old;
  old.id = 7;
  old.function = "add";
  old.timeout_ms = 300;
  old.pool = "gpu";
  const auto now = reencode<TaskSpec>(old);
  CHECK(now.id == 7);
  CHECK(now.function == "add");
  CHECK(now.timeout_ms == 300);
  CHECK(now.pool == "gpu");
  CHECK_FALSE(now.isolated);
  CHECK(now.isolated_memory == 0);
  // A receiver without them reads the rest of a newer spec.
  TaskSpec t;
  t.id = 8;
  t.pool = "cpu";
  t.isolated = true;
  t.isolated_memory = 1;
  const auto back = reencode<TaskSpecBeforeIsolated>(t);
  CHECK(back.id == 8);
  CHECK(back.pool == "cpu");
}

TEST_CASE("Protocol.SubmitTasks.BatchWriterMatchesEncode") {
  // The client packs tasks one by one into a reused BatchWriter; the scheduler reads them one
  // by one with decode_each. Both must agree with the plain struct encoding.
  BatchWriter batch;
  SubmitTasksRequest req;
  for (int round = 0; round < 2; ++round) {  // the second round reuses the cleared buffer
    batch.clear();
    req.tasks.clear();
    for (int i = 0; i < 300; ++i) {  // > 65535 bytes of names: past array16 and str8
      TaskSpec t;
      t.id = (1ull << 40) | static_cast<unsigned>(i + round * 1000);
      t.function = std::string(static_cast<std::size_t>(i), 'f');
      t.args = {'\x91', static_cast<char>(i & 0x7f)};
      if (i % 3 == 0) t.refs = {{static_cast<TaskId>(i), 0, -1}};
      t.key = i % 2 == 0 ? "" : "k" + std::to_string(i);
      batch.add(t);
      req.tasks.push_back(t);
    }
    CHECK(batch.count() == 300);
    zmq::message_t m = batch.message();
    SubmitTasksRequest whole;
    std::string error;
    REQUIRE(parse_header(m, error) == MessageType::submit_tasks);
    REQUIRE_MESSAGE(decode(body_of(m), whole, error), error);
    REQUIRE(whole.tasks.size() == req.tasks.size());
    std::size_t seen = 0;
    CHECK(decode_each<TaskSpec>(body_of(m), [&](const TaskSpec& t) {
      const TaskSpec& want = req.tasks[seen];
      CHECK(t.id == want.id);
      CHECK(t.function == want.function);
      CHECK(t.args == want.args);
      CHECK(t.refs.size() == want.refs.size());  // reset between elements, not carried over
      CHECK(t.key == want.key);
      CHECK(whole.tasks[seen].function == want.function);
      ++seen;
      return true;
    }, error));
    CHECK(seen == req.tasks.size());
  }

  // Releases riding along as the second field: read by decode (the struct) and by decode_each
  // (first, so that a visitor stopping early does not lose them); the buffer is left as it was.
  const std::vector<TaskId> released = {7, 1ull << 41, 0xffffffffffffull};
  {
    SubmitTasksRequest whole;
    std::string error;
    const zmq::message_t with = batch.message(released);
    REQUIRE(parse_header(with, error) == MessageType::submit_tasks);
    REQUIRE_MESSAGE(decode(body_of(with), whole, error), error);
    CHECK(whole.tasks.size() == 300);
    CHECK(whole.released == released);
    std::vector<TaskId> second;
    std::size_t seen = 0;
    CHECK(decode_each<TaskSpec>(body_of(with), [&](const TaskSpec&) { return ++seen < 2; }, error, {}, &second));
    CHECK(seen == 2);
    CHECK(second == released);
    SubmitTasksRequest plain;
    const zmq::message_t without = batch.message();
    REQUIRE(decode(body_of(without), plain, error));
    CHECK(plain.tasks.size() == 300);
    CHECK(plain.released.empty());
  }

  // Stopping early, and an empty batch.
  std::size_t visited = 0;
  std::string error;
  const zmq::message_t all = batch.message();
  CHECK(decode_each<TaskSpec>(body_of(all), [&](const TaskSpec&) { return ++visited < 5; }, error));
  CHECK(visited == 5);
  batch.clear();
  SubmitTasksRequest empty;
  const zmq::message_t none = batch.message();
  REQUIRE(decode(body_of(none), empty, error));
  CHECK(empty.tasks.empty());
}

TEST_CASE("Protocol.SubmitTasks.DecodeEachRejectsBadElements") {
  std::string error;
  auto visit = [](const TaskSpec&) { return true; };
  // Not [[...]]: a bare string, and an array whose first field is not an array.
  CHECK_FALSE(decode_each<TaskSpec>(pack(std::string("tasks")), visit, error));
  CHECK(error.find("does not match") != std::string::npos);
  CHECK_FALSE(decode_each<TaskSpec>(pack(std::vector<int>{1, 2}), visit, error));
  CHECK(error.find("does not match") != std::string::npos);
  // A good element, then one that is a number: the error names the element.
  BatchWriter batch;
  batch.add(TaskSpec{});
  batch.add(42);
  std::size_t seen = 0;
  const zmq::message_t bad = batch.message();
  CHECK_FALSE(decode_each<TaskSpec>(body_of(bad), [&](const TaskSpec&) { return ++seen > 0; }, error));
  CHECK(seen == 1);
  CHECK(error.find("element 1") != std::string::npos);
  // Truncated bytes.
  zmq::message_t m = batch.message();
  const zmq::message_t cut(m.data(), m.size() - 1);
  CHECK_FALSE(decode_each<TaskSpec>(body_of(cut), visit, error));
  CHECK(error.find("truncated") != std::string::npos);
}

TEST_CASE("Protocol.Results.RoundTrip") {
  TaskResultsEvent ev;
  TaskResult ok;
  ok.id = 5;
  ok.ok = true;
  ok.nbytes = 1;
  ok.inline_data = {'\x05'};
  TaskResult bad;
  bad.id = 6;
  bad.error = {"std::runtime_error", "boom", "f-6", "w"};
  ev.results = {ok, bad};
  ev.acquired = {9};
  const auto out = round_trip(ev);
  REQUIRE(out.results.size() == 2);
  CHECK(out.results[0].inline_data == ok.inline_data);
  CHECK(out.results[1].error.message == "boom");
  CHECK(out.acquired == std::vector<TaskId>{9});
}

TEST_CASE("Protocol.Decode.Malformed") {
  std::string error;
  SubmitTasksRequest out;

  // Not msgpack at all / truncated.
  const char garbage[] = {'\xc1'};  // 0xc1 is never used in msgpack
  CHECK_FALSE(decode(zmq::message_t(garbage, 1), out, error));
  zmq::message_t whole = pack(SubmitTasksRequest{{TaskSpec{}}, {}});
  zmq::message_t cut(whole.data(), whole.size() - 2);
  CHECK_FALSE(decode(cut, out, error));
  CHECK(error.find("truncated") != std::string::npos);

  // Wrong shape: a string where a struct is expected.
  zmq::message_t str = pack(std::string("hello"));
  CHECK_FALSE(decode(str, out, error));
  CHECK(error.find("does not match") != std::string::npos);

  // A huge declared length with no bytes behind it (array32 of 2^32-1 elements).
  const unsigned char huge[] = {0xdd, 0xff, 0xff, 0xff, 0xff};
  CHECK_FALSE(decode(zmq::message_t(huge, sizeof huge), out, error));
  CHECK(error.find("limit") != std::string::npos);

  // Deep nesting beyond the depth limit.
  std::string nested(100, '\x91');  // 100 nested fixarrays of one element
  nested.push_back('\x00');
  CHECK_FALSE(decode(zmq::message_t(nested.data(), nested.size()), out, error));
  CHECK(error.find("nested") != std::string::npos);
}

TEST_CASE("Protocol.Status.RoundTrip") {
  for (MessageType t : {MessageType::status_request, MessageType::status_reply}) {
    std::string error;
    auto parsed = parse_header(make_header(t), error);
    REQUIRE_MESSAGE(parsed.has_value(), error);
    CHECK(*parsed == t);
  }
  CHECK(to_string(MessageType::status_reply) == "status_reply");
  StatusReply s;
  s.request_id = 7;
  s.workers.push_back({});
  s.workers[0].name = "w-1";
  s.workers[0].resources = {{"gpu", 2}};
  s.tasks = {{"memory", 3}};
  s.functions["add"]["finished_total"] = 5;
  s.pools.push_back({});
  s.pools[0].pending_reasons = {{"Priority", 2}};
  s.jobs.push_back({"cpu", "12_3", "pending", "PENDING", "Priority", "", "", {}});
  s.events.push_back({"add-1", "add", "w-1", 1000, 1500, false});
  const StatusReply out = round_trip(s);
  CHECK(out.request_id == 7);
  CHECK(out.workers.at(0).name == "w-1");
  CHECK(out.workers.at(0).resources.at("gpu") == 2);
  CHECK(out.tasks.at("memory") == 3);
  CHECK(out.functions.at("add").at("finished_total") == 5);
  CHECK(out.pools.at(0).pending_reasons.at("Priority") == 2);
  CHECK(out.jobs.at(0).reason == "Priority");
  CHECK(out.events.at(0).end_ms == 1500);
  CHECK_FALSE(out.events.at(0).ok);
  StatusRequest request;
  request.request_id = 3;
  request.max_events = 100;
  CHECK(round_trip(request).max_events == 100);
  // `herd explain`: the key asked about, and the explanation back.
  request.explain = true;
  request.explain_key = "train-7";
  const StatusRequest explain = round_trip(request);
  CHECK(explain.explain);
  CHECK(explain.explain_key == "train-7");
  StatusReply reply;
  reply.explanation.found = true;
  reply.explanation.key = "train-7";
  reply.explanation.workers = {"w1: busy"};
  reply.explanation.never = true;
  const StatusReply reply_back = round_trip(reply);
  CHECK(reply_back.explanation.key == "train-7");
  CHECK(reply_back.explanation.workers == std::vector<std::string>{"w1: busy"});
  CHECK(reply_back.explanation.never);
}

TEST_CASE("Protocol.Logs.RoundTrip") {
  CHECK(to_string(MessageType::logs_request) == "logs_request");
  CHECK(to_string(MessageType::logs_fetch) == "logs_fetch");
  CHECK(to_string(MessageType::worker_logs_reply) == "worker_logs_reply");
  CHECK(to_string(MessageType::logs_reply) == "logs_reply");
  std::string error;
  CHECK(parse_header(make_header(MessageType::logs_reply), error) == MessageType::logs_reply);
  LogsRequest req;
  req.request_id = 4;
  req.kind = static_cast<std::uint8_t>(LogsKind::task);
  req.target = "train-3";
  req.task = 99;
  req.lines = 20;
  const LogsRequest r = round_trip(req);
  CHECK(r.kind == static_cast<std::uint8_t>(LogsKind::task));
  CHECK(r.target == "train-3");
  CHECK(r.task == 99);
  CHECK(r.lines == 20);
  LogsReply reply;
  reply.request_id = 4;
  reply.ok = true;
  reply.sources.push_back({});
  reply.sources[0].kind = "task";
  reply.sources[0].lines.push_back({1700000000000, 1, "epoch 1"});
  reply.sources[0].dropped = 3;
  const LogsReply out = round_trip(reply);
  CHECK(out.ok);
  CHECK(out.sources.at(0).lines.at(0).text == "epoch 1");
  CHECK(out.sources.at(0).lines.at(0).stream == 1);
  CHECK(out.sources.at(0).dropped == 3);
}

TEST_CASE("Protocol.Campaign.RoundTrip") {
  TaskSpec t;
  t.id = (2ull << 40) | 5u;
  t.function = "sim";
  t.campaign = "nightly";
  SubmitTasksRequest sub;
  sub.tasks.push_back(t);
  CHECK(round_trip(sub).tasks.at(0).campaign == "nightly");

  CampaignRequest req;
  req.request_id = 9;
  req.op = static_cast<std::uint8_t>(CampaignOp::attach);
  req.name = "nightly";
  const CampaignRequest req_back = round_trip(req);
  CHECK(req_back.request_id == 9);
  CHECK(req_back.op == static_cast<std::uint8_t>(CampaignOp::attach));
  CHECK(req_back.name == "nightly");

  CampaignReply reply;
  reply.request_id = 9;
  reply.ok = true;
  reply.campaigns.push_back({"nightly", 4, 2, 1, 1, "login-1:77"});
  reply.tasks.push_back({t.id, "", "sim"});
  reply.tasks.push_back({t.id + 1, "seed-1", "sim"});
  reply.current.addresses = {"tcp://n1:4000"};
  TaskUpdate u;
  u.id = t.id;
  u.state = static_cast<std::uint8_t>(TaskState::memory);
  u.location = 0;
  u.nbytes = 8;
  reply.current.updates.push_back(u);
  const CampaignReply back = round_trip(reply);
  CHECK(back.ok);
  REQUIRE(back.campaigns.size() == 1);
  CHECK(back.campaigns[0].name == "nightly");
  CHECK(back.campaigns[0].total == 4);
  CHECK(back.campaigns[0].done == 2);
  CHECK(back.campaigns[0].failed == 1);
  CHECK(back.campaigns[0].pending == 1);
  CHECK(back.campaigns[0].client == "login-1:77");
  REQUIRE(back.tasks.size() == 2);
  CHECK(back.tasks[1].key == "seed-1");
  CHECK(back.tasks[1].id == t.id + 1);
  REQUIRE(back.current.updates.size() == 1);
  CHECK(back.current.updates[0].location == 0);
  CHECK(back.current.addresses[0] == "tcp://n1:4000");

  StatusReply s;
  s.campaigns.push_back({"nightly", 4, 2, 1, 1, ""});
  CHECK(round_trip(s).campaigns.at(0).total == 4);
}

TEST_CASE("Protocol.Retiring.RoundTrip") {
  CHECK(static_cast<int>(MessageType::retiring) == 45);  // numbers are never reused or changed
  CHECK(to_string(MessageType::retiring) == "retiring");
  std::string error;
  CHECK(parse_header(make_header(MessageType::retiring), error) == MessageType::retiring);
  static_assert(std::is_same_v<Body<MessageType::retiring>::type, RetiringEvent>);
  RetiringEvent ev;
  ev.reason = "pool local shrinks";
  ev.seconds = 27;
  const RetiringEvent back = round_trip(ev);
  CHECK(back.reason == "pool local shrinks");
  CHECK(back.seconds == 27);
}

TEST_CASE("Protocol.Encode.KeptBufferSmallAndBigMessages") {
  // encode() packs into a buffer kept per thread: a small message is copied out of it, a big one
  // (over 16 KiB) takes the buffer along. Each must decode whole, in any order.
  auto spec = [](std::size_t arg_bytes, TaskId id) {
    TaskSpec t;
    t.id = id;
    t.function = "f";
    t.args.assign(arg_bytes, static_cast<char>('a' + id % 26));
    return t;
  };
  for (std::size_t bytes : {10u, 100u << 10, 20u, 3u << 20, 0u, 40u}) {
    const TaskId id = bytes + 1;
    const zmq::message_t m = encode<MessageType::submit_tasks>(SubmitTasksRequest{{spec(bytes, id)}, {id}});
    SubmitTasksRequest out;
    std::string error;
    REQUIRE_MESSAGE(decode(body_of(m), out, error), error);
    REQUIRE(out.tasks.size() == 1);
    CHECK(out.tasks[0].id == id);
    CHECK(out.tasks[0].args == spec(bytes, id).args);
    CHECK(out.released == std::vector<TaskId>{id});
  }
}

TEST_CASE("Protocol.Encode.ScratchInUseGivesAnotherBuffer") {
  // A message encoded while this thread's buffer holds one half made (a body whose packing
  // encodes another) gets a buffer of its own: neither is written into the other.
  EncodeScratch outer;
  outer.buffer().write("outer", 5);
  zmq::message_t inner_message;
  {
    EncodeScratch inner;
    CHECK(&inner.buffer() != &outer.buffer());
    inner.buffer().write("inner", 5);
    inner_message = inner.finish();
  }
  outer.buffer().write("!", 1);
  const zmq::message_t outer_message = outer.finish();
  CHECK(inner_message.to_string() == "inner");
  CHECK(outer_message.to_string() == "outer!");
  EncodeScratch again;  // the kept buffer, empty again
  CHECK(again.buffer().size() == 0);
}

TEST_CASE("Protocol.ScratchZone.KeptParserUnpacksAgainAfterAnError") {
  // ScratchZone::unpack keeps msgpack-c's parser per thread: a truncated or malformed input
  // throws as msgpack::unpack does, and the next input parses as if nothing happened.
  msgpack::sbuffer good;
  msgpack::pack(good, std::make_tuple(std::string(40, 'x'), 7, std::vector<int>{1, 2, 3}));
  auto check_good = [&](bool reference) {
    herd::detail::ScratchZone zone;
    const msgpack::object o = zone.unpack(good.data(), good.size(), reference);
    const auto t = o.as<std::tuple<std::string, int, std::vector<int>>>();
    CHECK(std::get<0>(t) == std::string(40, 'x'));
    CHECK(std::get<1>(t) == 7);
    CHECK(std::get<2>(t) == std::vector<int>{1, 2, 3});
    // Referenced: the string points into the input; copied: into the zone.
    const char* s = o.via.array.ptr[0].via.str.ptr;
    CHECK((s >= good.data() && s < good.data() + good.size()) == reference);
  };
  for (bool reference : {false, true}) {
    check_good(reference);
    {
      herd::detail::ScratchZone zone;
      CHECK_THROWS_AS(zone.unpack(good.data(), good.size() - 3, reference), msgpack::insufficient_bytes);
      CHECK_THROWS_AS(zone.unpack(good.data(), 0, reference), msgpack::insufficient_bytes);
      const char bad[] = {static_cast<char>(0xc1)};  // never used by msgpack
      CHECK_THROWS_AS(zone.unpack(bad, 1, reference), msgpack::parse_error);
    }
    check_good(reference);
  }
}
