// The client's state machine alone, with no scheduler, socket or thread: user calls and
// scheduler messages in, the outbox, the futures and the request table read back (as the
// scheduler's and the worker's state tests do). validate() is checked after the steps.
#include <doctest/doctest.h>

#include <memory>
#include <string>
#include <vector>

#include "client/client_state.hpp"
#include "protocol/codec.hpp"

using namespace herd::client;
using herd::detail::CompletionQueue;
using herd::protocol::CampaignReply;
using herd::protocol::CampaignRequest;
using herd::protocol::ScalePoolReply;
using herd::protocol::ScalePoolRequest;
using herd::protocol::StatusReply;
using herd::protocol::StatusRequest;
using herd::protocol::TaskSpec;
using herd::protocol::TaskState;
using herd::protocol::TaskUpdate;
using herd::protocol::TaskUpdatesEvent;

namespace {

constexpr std::uint64_t kClient = 3;
constexpr TaskId kBase = kClient << 40;

class TestPayload : public herd::detail::Payload {
 public:
  explicit TestPayload(std::vector<char> v) : v_(std::move(v)) {}
  const char* data() const override { return v_.data(); }
  std::size_t size() const override { return v_.size(); }

 private:
  std::vector<char> v_;
};

/// A future as the shell makes it, owned by no client: its destructor leaves the state alone.
std::shared_ptr<FutureState> future() { return std::make_shared<FutureState>(); }

TaskSpec spec(const std::string& function, std::size_t arg_bytes = 2, const std::string& campaign = "") {
  TaskSpec s;
  s.function = function;
  s.args.assign(arg_bytes, '\x01');
  s.campaign = campaign;
  return s;
}

std::shared_ptr<FutureState> submit(ClientState& state, const std::string& function = "f", std::size_t arg_bytes = 2,
                                    const std::string& campaign = "") {
  auto f = future();
  TaskSpec s = spec(function, arg_bytes, campaign);
  REQUIRE(state.submit(f, s));
  CHECK(s.id == f->id);
  return f;
}

/// A state whose client the scheduler welcomed as client kClient.
struct Connected : ClientState {
  explicit Connected(std::size_t chunk_bytes = 1 << 20, std::uint64_t max_message_bytes = 0) : ClientState(chunk_bytes) {
    connected(kClient, max_message_bytes);
  }
};

/// The tasks and the released ids of one submit_tasks message, as the scheduler reads them.
herd::protocol::SubmitTasksRequest decode_batch(herd::protocol::BatchWriter& batch, const std::vector<TaskId>& after = {}) {
  const zmq::message_t m = batch.message(after);
  std::string error;
  REQUIRE(herd::protocol::parse_header(m, error) == herd::protocol::MessageType::submit_tasks);
  herd::protocol::SubmitTasksRequest req;
  const herd::protocol::Bytes body(static_cast<const char*>(m.data()) + herd::protocol::kHeaderSize,
                                   m.size() - herd::protocol::kHeaderSize);
  REQUIRE_MESSAGE(herd::protocol::decode(body, req, error), error);
  return req;
}

TaskUpdatesEvent update(TaskId id, TaskState st, std::vector<char> inline_data = {}, std::int32_t location = -1,
                        std::vector<std::string> addresses = {}) {
  TaskUpdatesEvent ev;
  ev.addresses = std::move(addresses);
  TaskUpdate u;
  u.id = id;
  u.state = static_cast<std::uint8_t>(st);
  u.inline_data = std::move(inline_data);
  u.location = location;
  if (st == TaskState::erred) u.error = {"std::runtime_error", "boom", "f-1", "w1"};
  if (st == TaskState::no_worker) u.error = {"herd::NoWorker", "no worker has a gpu", "", ""};
  ev.updates.push_back(std::move(u));
  return ev;
}

}  // namespace

TEST_CASE("ClientState.Submit.PackedIntoBatchesWithReleasesRiding") {
  Connected state;
  auto a = submit(state, "inc");
  auto b = submit(state, "inc");
  auto c = submit(state, "dec");
  CHECK(a->id == kBase + 1);
  CHECK(b->id == kBase + 2);
  CHECK(c->id == kBase + 3);
  CHECK(a->function == b->function);  // interned once
  CHECK(*c->function == "dec");
  CHECK(a->key() == "inc-30000000001");
  CHECK(state.futures() == 3);
  CHECK(state.find(b->id) == b.get());
  CHECK(state.next_seq() == 4);
  // An earlier future let go: its release rides inside the submissions' message.
  CHECK(state.dropped(a->id));
  CHECK(state.find(a->id) == nullptr);
  CHECK(state.validate() == "");
  {
    const Outbox& box = state.outbox();
    REQUIRE(box.submits.size() == 1);
    CHECK(box.releases == std::vector<TaskId>{kBase + 1});
    CHECK(box.releases_ride());
    CHECK(box.to_scheduler());
    CHECK_FALSE(state.io_only());  // a user thread may send it
  }
  Outbox out;
  state.take_outbox(out);
  CHECK_FALSE(state.outbox().to_scheduler());
  REQUIRE(out.submits.size() == 1);
  const auto req = decode_batch(out.submits[0], out.releases);
  REQUIRE(req.tasks.size() == 3);
  CHECK(req.tasks[0].id == kBase + 1);
  CHECK(req.tasks[2].function == "dec");
  CHECK(req.released == std::vector<TaskId>{kBase + 1});
  state.recycle(out.submits);

  // A cancel between them: the releases go in a message of their own.
  auto d = submit(state, "inc");
  CHECK(state.cancel(*b, false));
  CHECK(state.dropped(c->id));
  CHECK(state.outbox().submits.size() == 1);  // a spare batch, reused
  CHECK_FALSE(state.outbox().releases_ride());
  Outbox second;
  state.take_outbox(second);
  CHECK(decode_batch(second.submits[0]).tasks.size() == 1);
  CHECK(second.cancels == std::vector<TaskId>{b->id});
  CHECK(second.releases == std::vector<TaskId>{c->id});
  CHECK(state.validate() == "");
}

TEST_CASE("ClientState.Submit.BatchesSplitBySizeAndBigTasksAlone") {
  Connected state;
  std::vector<std::shared_ptr<FutureState>> fs;
  // 40 tasks of 2 KiB: past kSubmitBatchBytes (64 KiB) the next batch begins.
  for (int i = 0; i < 40; ++i) fs.push_back(submit(state, "f", 2048));
  REQUIRE(state.outbox().submits.size() == 2);
  const std::size_t first = state.outbox().submits[0].count();
  CHECK(first + state.outbox().submits[1].count() == 40);
  CHECK(state.outbox().submits[0].size() >= kSubmitBatchBytes);
  // A task bigger than a batch starts one of its own, and the next one goes after it.
  fs.push_back(submit(state, "big", kSubmitBatchBytes + 1));
  fs.push_back(submit(state, "f"));
  REQUIRE(state.outbox().submits.size() == 4);
  CHECK(state.outbox().submits[2].count() == 1);
  CHECK(state.outbox().submits[3].count() == 1);
  Outbox out;
  state.take_outbox(out);
  CHECK(decode_batch(out.submits[2]).tasks[0].function == "big");
}

TEST_CASE("ClientState.Submit.OverTheMessageLimitFailsAlone") {
  Connected state(1 << 20, 100'000);
  auto f = future();
  TaskSpec s = spec("f", 50'000);  // with the batch's margin, over 100,000 bytes
  CHECK_FALSE(state.submit(f, s));
  CHECK(f->status == Status::erred);
  REQUIRE(f->error);
  CHECK(f->error->type == "herd::MessageTooLarge");
  CHECK(f->error->message.find("was not sent") != std::string::npos);
  CHECK(state.find(f->id) == nullptr);
  CHECK_FALSE(state.outbox().to_scheduler());
  auto g = submit(state, "f", 100);  // the next one goes
  CHECK(g->id == f->id + 1);
}

TEST_CASE("ClientState.Updates.FinishTheFutureAndLeaveItsWatchersAndCallbacks") {
  Connected state;
  auto f = submit(state);
  auto g = submit(state);
  int called = 0;
  f->callbacks = std::make_unique<std::vector<std::function<void()>>>();
  f->callbacks->push_back([&] { ++called; });
  auto queue = std::make_shared<CompletionQueue>();
  f->watchers = std::make_unique<FutureState::Watchers>();
  f->watchers->emplace_back(queue, 7);

  // Not final: no worker can run it now (why kept), then it runs: still pending, nothing to tell.
  auto ev = update(f->id, TaskState::no_worker);
  state.apply_updates(ev);
  CHECK(f->status == Status::pending);
  REQUIRE(f->error);
  CHECK(f->error->type == "herd::NoWorker");
  CHECK(state.finished().empty());
  ev = update(f->id, TaskState::processing);
  state.apply_updates(ev);
  CHECK_FALSE(f->error);

  // In memory, inline: finished with its bytes and holder; its callback and watcher are left.
  ev = update(f->id, TaskState::memory, {'\x2a'}, 0, {"tcp://w1:5"});
  state.apply_updates(ev);
  CHECK(f->status == Status::finished);
  REQUIRE(f->data);
  CHECK(f->data->size() == 1);
  CHECK(f->data->data()[0] == '\x2a');
  CHECK(f->location == 1);
  CHECK(state.address(f->location) == "tcp://w1:5");
  CHECK_FALSE(f->callbacks);
  CHECK_FALSE(f->watchers);
  Finished& done = state.finished();
  REQUIRE(done.callbacks.size() == 1);
  REQUIRE(done.watchers.size() == 1);
  CHECK(done.watchers[0].first.lock() == queue);
  CHECK(done.watchers[0].second == 7);
  done.callbacks[0]();
  CHECK(called == 1);
  done.clear();
  CHECK(state.validate() == "");

  // Held elsewhere, no bytes: fetched from its holder once, on request.
  ev = update(g->id, TaskState::memory, {}, 1, {"tcp://w1:5", "tcp://w2:5"});
  state.apply_updates(ev);
  CHECK(g->status == Status::finished);
  CHECK(g->location == 2);
  CHECK(state.request_fetch(*g));
  CHECK_FALSE(state.request_fetch(*g));  // asked for already
  CHECK(state.io_only());                // fetches go from the I/O thread
  CHECK(state.outbox().fetches.at("tcp://w2:5") == std::vector<TaskId>{g->id});
  CHECK_FALSE(state.request_fetch(*f));  // here already
  CHECK(state.fetched(g->id, std::make_shared<TestPayload>(std::vector<char>{1, 2})));
  CHECK(g->data->size() == 2);
  CHECK_FALSE(g->fetching);
  CHECK_FALSE(state.fetched(kBase + 99, nullptr));  // nobody's

  // An update for an unknown task is ignored; an error finishes one as erred.
  auto h = submit(state);
  ev = update(kBase + 99, TaskState::memory);
  state.apply_updates(ev);
  ev = update(h->id, TaskState::erred);
  state.apply_updates(ev);
  CHECK(h->status == Status::erred);
  CHECK(h->error->message == "boom");
  CHECK(state.finished().empty());  // nobody watched it
  CHECK(state.validate() == "");
}

TEST_CASE("ClientState.Fetch.NotThereAndFailedHolders") {
  Connected state;
  auto f = submit(state);
  auto ev = update(f->id, TaskState::memory, {}, 0, {"tcp://a:1"});
  state.apply_updates(ev);
  REQUIRE(state.request_fetch(*f));
  // Another holder's late failure asks nothing; this holder's asks the scheduler anew.
  CHECK(state.fetch_failed("tcp://b:1", {f->id}).empty());
  CHECK(state.fetch_failed("tcp://a:1", {f->id, kBase + 99}) == std::vector<TaskId>{f->id});
  CHECK(f->location == 0);
  CHECK_FALSE(f->fetching);
  // Moved: pending again until the scheduler says where.
  ev = update(f->id, TaskState::memory, {}, 0, {"tcp://b:1"});
  state.apply_updates(ev);
  const FutureState* s = state.not_there(f->id);
  REQUIRE(s == f.get());
  CHECK(f->status == Status::pending);
  CHECK(f->location == 0);
  CHECK(state.not_there(kBase + 99) == nullptr);
}

TEST_CASE("ClientState.Requests.OneTableForEveryKind") {
  Connected state;
  StatusRequest status;
  status.max_events = 5;
  const std::uint64_t s = state.request(status);
  ScalePoolRequest scale;
  scale.target = 4;
  const std::uint64_t k = state.request(scale);
  CHECK(s != k);
  CHECK(state.outstanding() == 2);
  // Both go, in the order asked, their ids set.
  REQUIRE(state.outbox().requests.size() == 2);
  CHECK(std::get<StatusRequest>(state.outbox().requests[0]).request_id == s);
  CHECK(std::get<StatusRequest>(state.outbox().requests[0]).max_events == 5);
  CHECK(std::get<ScalePoolRequest>(state.outbox().requests[1]).request_id == k);
  CHECK(state.outbox().to_scheduler());
  CHECK(state.validate() == "");
  CHECK_FALSE(state.settled(s));
  CHECK_FALSE(state.settled(k));

  // Replies are matched by id, whatever order they come in.
  ScalePoolReply scaled;
  scaled.request_id = k;
  scaled.ok = true;
  CHECK(state.answer(scaled));
  CHECK(state.settled(k));
  CHECK_FALSE(state.settled(s));
  // A reply for an id nobody waits for, or of another kind than its request, is dropped.
  StatusReply stray;
  stray.request_id = 999;
  CHECK_FALSE(state.answer(stray));
  ScalePoolReply wrong;
  wrong.request_id = s;
  CHECK_FALSE(state.answer(wrong));
  CHECK_FALSE(state.settled(s));
  StatusReply answered;
  answered.request_id = s;
  answered.address = "tcp://sched:1";
  CHECK(state.answer(answered));
  CHECK(state.settled(s));

  Pending p = state.take(s);
  CHECK(p.failed.empty());
  CHECK(std::get<StatusReply>(p.reply).address == "tcp://sched:1");
  CHECK(state.outstanding() == 1);
  CHECK_FALSE(state.settled(s));  // taken
  Pending q = state.take(k);
  CHECK(std::get<ScalePoolReply>(q.reply).ok);
  CHECK(state.outstanding() == 0);
  // A caller that gave up: its late reply is dropped.
  const std::uint64_t late = state.request(StatusRequest{});
  CHECK(state.take(late).reply.index() == 0);
  StatusReply too_late;
  too_late.request_id = late;
  CHECK_FALSE(state.answer(too_late));
  CHECK(state.validate() == "");
}

TEST_CASE("ClientState.Lost.FailsEveryRequestAndFuture") {
  Connected state;
  auto pending = submit(state);
  auto held = submit(state);   // finished, bytes not here: lost too
  auto here = submit(state);   // finished with its bytes: kept
  auto ev = update(held->id, TaskState::memory, {}, 0, {"tcp://a:1"});
  state.apply_updates(ev);
  ev = update(here->id, TaskState::memory, {'x'});
  state.apply_updates(ev);
  const std::uint64_t a = state.request(StatusRequest{});
  const std::uint64_t b = state.request(CampaignRequest{});
  ScalePoolRequest scale;
  const std::uint64_t c = state.request(scale);
  ScalePoolReply answered;
  answered.request_id = c;
  answered.ok = true;
  REQUIRE(state.answer(answered));
  int called = 0;
  pending->callbacks = std::make_unique<std::vector<std::function<void()>>>();
  pending->callbacks->push_back([&] { ++called; });

  state.lose_all("scheduler lost: no message for 30000 ms");
  CHECK(state.lost());
  CHECK(state.lost_reason() == "scheduler lost: no message for 30000 ms");
  for (std::uint64_t id : {a, b, c}) {
    CHECK(state.settled(id));
    CHECK(state.take(id).failed == "scheduler lost: no message for 30000 ms");  // answered or not
  }
  CHECK(pending->status == Status::lost);
  CHECK(held->status == Status::lost);
  CHECK(here->status == Status::finished);
  REQUIRE(state.finished().callbacks.size() == 1);
  state.finished().callbacks[0]();
  CHECK(called == 1);
  // Nothing more is sent: no release, no cancel, nothing left to say goodbye with.
  CHECK_FALSE(state.dropped(here->id));
  CHECK_FALSE(state.cancel(*pending, false));  // lost is done
  CHECK(state.outbox().releases.empty());
  std::vector<herd::protocol::BatchWriter> submits;
  std::vector<TaskId> fire;
  state.take_for_goodbye(submits, fire);
  CHECK(submits.empty());
}

TEST_CASE("ClientState.Campaign.AttachGivesTheSameFutureTwice") {
  Connected state;
  auto mine = submit(state, "train", 2, "nightly");  // submitted into the campaign here
  auto attach = [&](const std::string& name) {
    CampaignRequest req;
    req.op = static_cast<std::uint8_t>(herd::protocol::CampaignOp::attach);
    req.name = name;
    const std::uint64_t id = state.request(req);
    CampaignReply reply;
    reply.request_id = id;
    reply.ok = true;
    reply.tasks = {{mine->id, "", "train"}, {kBase + 77, "eval-1", "eval"}};
    reply.current = update(kBase + 77, TaskState::memory, {'\x07'});
    REQUIRE(state.answer(reply));
    CHECK(state.settled(id));
    return state.take(id);
  };
  Pending first = attach("nightly");
  REQUIRE(first.futures.size() == 2);
  CHECK(first.futures[0] == mine);  // the one this client holds
  const auto other = first.futures[1];
  CHECK(other->id == kBase + 77);
  CHECK(other->key() == "eval-1");
  CHECK(*other->function == "eval");
  CHECK(other->status == Status::finished);  // its current state, applied with the reply
  CHECK(state.find(other->id) == other.get());
  Pending second = attach("nightly");
  REQUIRE(second.futures.size() == 2);
  CHECK(second.futures[0] == mine);
  CHECK(second.futures[1] == other);  // not a second state stealing the first's updates
  CHECK(state.validate() == "");

  // A refused attach makes no future.
  CampaignRequest req;
  req.op = static_cast<std::uint8_t>(herd::protocol::CampaignOp::attach);
  const std::uint64_t id = state.request(req);
  CampaignReply no;
  no.request_id = id;
  no.error = "no campaign 'x'";
  no.tasks = {{kBase + 78, "", "f"}};
  REQUIRE(state.answer(no));
  Pending refused = state.take(id);
  CHECK(refused.futures.empty());
  CHECK(std::get<CampaignReply>(refused.reply).error == "no campaign 'x'");
  CHECK(state.find(kBase + 78) == nullptr);
}

TEST_CASE("ClientState.Cancel.CancelsAndForceCancelsGoOut") {
  Connected state;
  auto a = submit(state);
  auto b = submit(state);
  auto done = submit(state);
  auto ev = update(done->id, TaskState::memory, {'1'});
  state.apply_updates(ev);
  auto queue = std::make_shared<CompletionQueue>();
  a->watchers = std::make_unique<FutureState::Watchers>();
  a->watchers->emplace_back(queue, 0);

  CHECK(state.cancel(*a, false));
  CHECK(a->status == Status::cancelled);
  CHECK(state.finished().watchers.size() == 1);  // a cancel finishes it here at once
  CHECK(state.cancel(*b, true));
  CHECK_FALSE(state.cancel(*a, false));     // once
  CHECK_FALSE(state.cancel(*done, false));  // finished already
  CHECK(state.outbox().cancels == std::vector<TaskId>{a->id});
  CHECK(state.outbox().force_cancels == std::vector<TaskId>{b->id});
  // The scheduler's late word on a cancelled task changes nothing.
  ev = update(a->id, TaskState::memory, {'2'});
  state.apply_updates(ev);
  CHECK(a->status == Status::cancelled);
  CHECK_FALSE(a->data);

  state.fire_and_forget(done->id);
  std::shared_ptr<FutureState> fs_keep;
  CHECK(state.outbox().fire_and_forget == std::vector<TaskId>{done->id});
  std::vector<herd::protocol::BatchWriter> submits;
  std::vector<TaskId> fire;
  fs_keep = submit(state);
  state.take_for_goodbye(submits, fire);  // at close: these still go
  CHECK(submits.size() == 1);
  CHECK(fire == std::vector<TaskId>{done->id});
  CHECK(state.validate() == "");
}

TEST_CASE("ClientState.Restart.CancelsTheFuturesMadeBefore") {
  Connected state;
  auto before = submit(state);
  auto finished = submit(state);
  auto ev = update(finished->id, TaskState::memory, {'1'});
  state.apply_updates(ev);
  const std::uint64_t boundary = state.next_seq();
  auto after = submit(state);
  state.cancel_restarted(boundary);
  CHECK(before->status == Status::cancelled);
  CHECK(finished->status == Status::cancelled);
  CHECK_FALSE(finished->data);
  CHECK(finished->error->message == "cancelled: the cluster was restarted by this client");
  CHECK(after->status == Status::pending);
}

TEST_CASE("ClientState.Scatter.BigValuesServedHereUntilAWorkerCannotReachUs") {
  Connected state(16);
  auto small = future();
  REQUIRE(state.scatter(small, std::vector<char>(8, 's')));
  auto big = future();
  REQUIRE(state.scatter(big, std::vector<char>(32, 'b')));
  CHECK(*big->function == "scatter");
  CHECK(state.io_only());  // scatters go from the I/O thread, before the tasks that use them
  REQUIRE(state.outbox().scatters.size() == 2);
  CHECK(state.outbox().scatters[0].first.nbytes == 0);  // through the scheduler
  CHECK(state.outbox().scatters[1].first.nbytes == 32);  // fetched from here
  REQUIRE(state.held_scatter(big->id));
  CHECK(state.held_scatter(small->id) == nullptr);
  CHECK(state.validate() == "");
  Outbox out;
  state.take_outbox(out);

  // The worker could not reach this client: the value goes through the scheduler, and so does
  // every big one after it.
  herd::protocol::ScatterInlineEvent ev;
  ev.ids = {big->id};
  ev.reason = "connection refused";
  CHECK(state.scatter_inline(ev));
  CHECK_FALSE(state.scatter_direct());
  CHECK(state.held_scatter(big->id) == nullptr);
  REQUIRE(state.outbox().scatters.size() == 1);
  CHECK(state.outbox().scatters[0].first.id == big->id);
  CHECK(state.outbox().scatters[0].first.nbytes == 0);
  CHECK(state.outbox().scatters[0].second->size() == 32);
  CHECK_FALSE(state.scatter_inline(ev));  // said once
  auto next = future();
  REQUIRE(state.scatter(next, std::vector<char>(32, 'n')));
  CHECK(state.outbox().scatters.back().first.nbytes == 0);
  // A worker holds it now: this client's copy goes.
  Connected direct(16);
  auto held = future();
  REQUIRE(direct.scatter(held, std::vector<char>(32, 'h')));
  auto mem = update(held->id, TaskState::memory, {}, 0, {"tcp://w:1"});
  direct.apply_updates(mem);
  CHECK(direct.held_scatter(held->id) == nullptr);
}
