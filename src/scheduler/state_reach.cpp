// SchedulerState and results out of reach: holders a worker could not fetch from (per task,
// and (worker, holder) cuts), a task's missing input, a client's failed fetch, and the copies
// made elsewhere (relocations) that answer them.
#include <algorithm>

#include "common/logging.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

// ---- results out of reach ----------------------------------------------------------------

bool SchedulerState::avoided(const Task& t, WorkerId w) const {
  if (trouble_.empty() && cuts_.empty()) return false;
  auto it = trouble_.find(t.id);
  if (it != trouble_.end() && std::find(it->second.avoid.begin(), it->second.avoid.end(), w) != it->second.avoid.end()) {
    return true;
  }
  if (cuts_.empty()) return false;
  // An input whose every holder this worker could not reach lately (and not its own copy).
  const auto horizon = std::chrono::milliseconds(3ULL * options_.timeout_ms);
  for (TaskId d : t.deps) {
    const Task* dep = graph_.find(d);
    if (dep == nullptr || dep->who_has.empty()) continue;
    bool all_cut = true;
    for (WorkerId h : dep->who_has) {
      auto c = cuts_.find({w, h});
      all_cut = all_cut && h != w && c != cuts_.end() && last_now_ - c->second <= horizon;
    }
    if (all_cut) return true;
  }
  return false;
}

std::string SchedulerState::holder_text(const std::string& address) const {
  auto h = by_address_.find(address);
  const WorkerRec* w = h == by_address_.end() ? nullptr : worker(h->second);
  if (w == nullptr) return address;
  return "worker " + w->name + " on " + w->host + " (" + address + ")";
}

void SchedulerState::drop_holder(TaskId id, WorkerId holder) {
  WorkerRec* h = find_worker(holder);
  if (h == nullptr || !h->has.count(id)) return;
  h->has.erase(id);
  out(holder).free.push_back(id);
  graph_.remove_holder(id, holder, fx_);  // the last copy gone: computed again from its recipe
}

void SchedulerState::missing_input(WorkerRec& w, protocol::TaskResult& r, const Now& now) {
  last_now_ = now.mono;
  Task* t = graph_.find(r.id);
  if (t == nullptr || t->status != TaskStatus::processing || t->worker != w.id) return;
  // Holders that said they no longer have it are holders no more.
  for (const auto& loc : r.not_held) {
    for (const auto& address : loc.holders) {
      if (auto h = by_address_.find(address); h != by_address_.end()) drop_holder(loc.id, h->second);
    }
  }
  if (!r.unreachable.empty()) {
    // Holders this worker could not reach (alive, as far as the scheduler hears): the task runs
    // elsewhere; a copy that two workers could not reach is given up on and computed again
    // where it can be fetched; after allowed_failures reports the task fails, naming them.
    FetchTrouble& tr = trouble_[r.id];
    ++tr.reports;
    if (std::find(tr.avoid.begin(), tr.avoid.end(), w.id) == tr.avoid.end()) tr.avoid.push_back(w.id);
    std::string holders;
    for (const auto& loc : r.unreachable) {
      for (const auto& address : loc.holders) holders += (holders.empty() ? "" : ", ") + holder_text(address);
    }
    const std::string tried = "on " + w.name + " (" + w.host + "), which could not reach " + holders;
    auto seen = std::find_if(tr.log.begin(), tr.log.end(), [&](const auto& l) { return l.first == tried; });
    if (seen == tr.log.end()) tr.log.push_back({tried, {1, r.error.message}});
    else ++seen->second.first;
    for (const auto& loc : r.unreachable) {
      for (const auto& address : loc.holders) {
        auto h = by_address_.find(address);
        if (h == by_address_.end()) continue;  // gone: the graph knows already
        cuts_[{w.id, h->second}] = now.mono;
        auto& who = unreachable_holders_[{loc.id, h->second}];
        if (std::find(who.begin(), who.end(), w.id) == who.end()) who.push_back(w.id);
        if (who.size() >= 2) {
          HERD_LOG(warning) << "input " << loc.id << " on " << address << " is out of reach of " << who.size()
                            << " workers: computing it again elsewhere";
          unreachable_holders_.erase({loc.id, h->second});
          drop_holder(loc.id, h->second);
        }
      }
    }
    if (tr.reports > options_.allowed_failures) {
      const std::string key = graph_.key_of(*t);
      std::string log;
      for (const auto& [line, said] : tr.log) {
        log += (log.empty() ? "" : "; ") + line + (said.first > 1 ? " (" + std::to_string(said.first) + " times)" : "") +
               ": " + said.second;
      }
      const std::uint32_t reports = tr.reports;
      trouble_.erase(r.id);
      graph_.fail(r.id, {"herd::MissingInput",
                         "task " + key + " could not fetch its inputs in " + std::to_string(reports) + " tries: " + log, key,
                         w.name},
                  fx_);
      return;
    }
  }
  graph_.input_missing(r.id, fx_);
}

void SchedulerState::tell_client(ClientId c, const Task& t, WorkerId holder) {
  const WorkerRec* hw = worker(holder);
  if (hw == nullptr || clients_.count(c) == 0) return;
  ClientOut& co = out_.clients[c];
  auto found = co.address_index.find(holder);
  if (found == co.address_index.end()) {
    found = co.address_index.emplace(holder, static_cast<std::int32_t>(co.updates.addresses.size())).first;
    co.updates.addresses.push_back(hw->address);
  }
  protocol::TaskUpdate u;
  u.id = t.id;
  u.state = static_cast<std::uint8_t>(protocol::TaskState::memory);
  u.nbytes = t.nbytes;
  u.location = found->second;
  co.updates.updates.push_back(std::move(u));
}

void SchedulerState::client_fetch_failed(ClientId c, const protocol::FetchFailedEvent& ev) {
  const auto bad = by_address_.find(ev.address);
  const WorkerId bad_id = bad == by_address_.end() ? kNoWorker : bad->second;
  for (TaskId id : ev.ids) {
    const Task* t = graph_.find(id);
    if (t == nullptr || t->client != c || !t->in_memory()) continue;  // it hears when it is back
    // Another holder: try there.
    WorkerId other = kNoWorker;
    for (WorkerId h : t->who_has) {
      if (h != bad_id) other = h;
    }
    if (other != kNoWorker) {
      tell_client(c, *t, other);
      continue;
    }
    Relocation& rel = relocations_[id];
    if (std::find(rel.clients.begin(), rel.clients.end(), c) == rel.clients.end()) rel.clients.push_back(c);
    rel.address = ev.address;
    rel.why = ev.why;
    if (++rel.attempts > 2) {
      relocation_failed(id, "it could not be copied to another worker the client reaches");
      continue;
    }
    // Another worker copies it; the client is pointed there once it has it.
    WorkerRec* via = nullptr;
    for (auto& [wid, w] : workers_) {
      if (wid == bad_id || w.retiring) continue;
      if (via == nullptr || w.has.size() < via->has.size()) via = &w;
    }
    if (via == nullptr) {
      relocation_failed(id, "no other worker is connected to copy it");
      continue;
    }
    out(via->id).acquire.push_back({id, {ev.address}});
  }
  apply(fx_);
  check();
}

void SchedulerState::relocated(TaskId id, WorkerId holder) {
  auto it = relocations_.find(id);
  if (it == relocations_.end()) return;
  const Task* t = graph_.find(id);
  if (t != nullptr) {
    for (ClientId c : it->second.clients) tell_client(c, *t, holder);
  }
  relocations_.erase(it);
}

void SchedulerState::relocation_failed(TaskId id, const std::string& why) {
  auto it = relocations_.find(id);
  if (it == relocations_.end()) return;
  const Relocation rel = std::move(it->second);
  relocations_.erase(it);
  const Task* t = graph_.find(id);
  if (t == nullptr) return;
  const WorkerRec* holder = nullptr;
  if (auto h = by_address_.find(rel.address); h != by_address_.end()) holder = worker(h->second);
  const std::string where = rel.address + (holder != nullptr ? " (worker " + holder->name + " on " + holder->host + ")" : "");
  for (ClientId c : rel.clients) {
    if (clients_.count(c) == 0) continue;
    protocol::TaskUpdate u;
    u.id = id;
    u.state = static_cast<std::uint8_t>(protocol::TaskState::erred);
    u.error = {"herd::ConnectionError", "the result of " + graph_.key_of(*t) + " could not be fetched from " + where + ": " +
                                            rel.why + "; " + why,
               graph_.key_of(*t), holder != nullptr ? holder->name : ""};
    out_.clients[c].updates.updates.push_back(std::move(u));
  }
}

}  // namespace herd::scheduler
