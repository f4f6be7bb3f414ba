// Detached campaigns: tasks submitted under a name (TaskOptions::campaign) outlive their client.
//
// As HyperQueue's jobs or Dask's published datasets: the scheduler holds the campaign's tasks
// for it, so a client's release (its futures dropped) and its departure (an ssh session that
// dropped) leave them running and their results kept. A campaign task whose client is gone has
// client 0: its updates go nowhere until a client attaches, takes the tasks over (their updates
// go to it from then on) and is told at once where each finished one stands. Releasing the
// campaign cancels what has not finished and lets everything go as dropped futures do.
//
// With the journal on, a campaign outlives the scheduler too: each task's membership is
// journaled with its recipe (the task's spec, its inputs named by key: task ids do not survive
// a restart, keys do), each final error with the task's key, each result as any keyed result.
// A scheduler started again on the journal restores every campaign in order: finished tasks
// with their results or errors, unfinished ones from their recipes, to run again.
#include <utility>

#include <msgpack.hpp>

#include "common/logging.hpp"
#include "protocol/codec.hpp"
#include "scheduler/journal.hpp"
#include "scheduler/state.hpp"
#include "net/buffer.hpp"

namespace herd::scheduler {

namespace {
const std::string kNoCampaign;

/// What the journal keeps of a campaign task to run it again after a restart.
struct Recipe {
  protocol::TaskSpec spec;
  std::vector<std::string> inputs;  // the key of refs[i]'s task (key_of)
  MSGPACK_DEFINE(spec, inputs);
};

/// Larger recipes (arguments inlined into the task) are not journaled: the task comes back
/// as herd::LostInRestart. The journal loads records up to 16 MiB in one read.
constexpr std::size_t kMaxRecipeBytes = std::size_t{8} << 20;

}  // namespace

std::size_t SchedulerState::campaign_size(const std::string& name) const {
  auto it = campaigns_.find(name);
  return it == campaigns_.end() ? 0 : it->second.tasks.size();
}

void SchedulerState::campaign_task_added(const std::string& name, TaskId id, ClientId client,
                                         const protocol::TaskSpec* journal) {
  Task* t = graph_.find(id);
  if (t == nullptr || t->campaign || campaign_of_.count(id)) return;  // a resend
  t->campaign = true;
  // With the journal on, membership is recorded with the recipe (in order with the results),
  // so a restarted scheduler knows its campaigns and can run again what had not finished.
  if (journal != nullptr && options_.full_results) {
    Recipe r;
    r.spec = *journal;
    r.inputs.reserve(r.spec.refs.size());
    for (const protocol::ArgRef& ref : r.spec.refs) {
      const Task* dep = graph_.find(ref.id);
      // Its key (a display key for an unnamed task: never restored, but named in the error).
      r.inputs.push_back(dep != nullptr ? graph_.key_of(*dep) : std::string());
    }
    std::vector<char> recipe = protocol::pack_bytes(r);
    if (recipe.size() > kMaxRecipeBytes) {
      HERD_LOG(warning) << "campaign " << name << ": the recipe of " << graph_.user_key(*t) << " ("
                        << recipe.size() << " bytes) is too large to journal; if the scheduler restarts before "
                        << "it finishes, it fails with herd::LostInRestart";
      recipe.clear();
    }
    out_.journal.emplace_back(campaign_record_key(name, graph_.user_key(*t)), std::move(recipe));
  }
  Campaign& c = campaigns_[name];
  if (c.tasks.empty()) HERD_LOG(info) << "campaign " << name << " started by client #" << client;
  c.tasks.push_back(id);
  c.client = client;
  campaign_of_.emplace(id, name);
}

void SchedulerState::journal_campaign_error(const Task& t) {
  if (!t.error) return;
  out_.journal.emplace_back(campaign_error_key(graph_.user_key(t)), protocol::pack_bytes(*t.error));
}

const std::string& SchedulerState::campaign_of(TaskId id) const {
  auto it = campaign_of_.find(id);
  return it == campaign_of_.end() ? kNoCampaign : it->second;
}

protocol::CampaignInfo SchedulerState::campaign_info(const std::string& name) const {
  protocol::CampaignInfo info;
  info.name = name;
  auto it = campaigns_.find(name);
  if (it == campaigns_.end()) return info;
  const Campaign& c = it->second;
  info.total = c.tasks.size();
  for (TaskId id : c.tasks) {
    const Task* t = graph_.find(id);
    if (t == nullptr) ++info.failed;
    else if (t->in_memory()) ++info.done;
    else if (t->unfinished() || t->status == TaskStatus::released) ++info.pending;
    else ++info.failed;
  }
  if (auto cl = clients_.find(c.client); cl != clients_.end()) info.client = cl->second.name;
  return info;
}

std::vector<protocol::CampaignInfo> SchedulerState::campaigns() const {
  std::vector<protocol::CampaignInfo> out;
  out.reserve(campaigns_.size());
  for (const auto& [name, c] : campaigns_) out.push_back(campaign_info(name));
  return out;
}

bool SchedulerState::attach_campaign(ClientId id, const std::string& name, protocol::CampaignReply& reply) {
  auto it = campaigns_.find(name);
  if (it == campaigns_.end()) {
    reply.ok = false;
    reply.error = "no campaign named '" + name + "'";
    if (!campaigns_.empty()) {
      reply.error += " (campaigns:";
      for (const auto& [n, c] : campaigns_) reply.error += " " + n;
      reply.error += ")";
    }
    return false;
  }
  if (clients_.count(id) == 0) {
    reply.ok = false;
    reply.error = "client #" + std::to_string(id) + " is not connected";
    return false;
  }
  Campaign& c = it->second;
  c.client = id;
  std::unordered_map<WorkerId, std::int32_t> address_index;
  reply.tasks.reserve(c.tasks.size());
  for (TaskId tid : c.tasks) {
    Task* t = graph_.find(tid);
    if (t == nullptr) continue;
    t->client = id;  // its updates come here from now on
    t->wanted = true;
    protocol::CampaignTask& ct = reply.tasks.emplace_back();
    ct.id = tid;
    ct.key = graph_.user_key(*t);
    ct.function = graph_.function_name(*t);
    if (t->unfinished() || t->status == TaskStatus::released) continue;  // it hears when it finishes
    protocol::TaskUpdate& u = reply.current.updates.emplace_back();
    u.id = tid;
    u.state = static_cast<std::uint8_t>(wire_state(t->status));
    u.nbytes = t->nbytes;
    if (t->in_memory() && !t->who_has.empty()) {
      const WorkerId holder = t->who_has.front();
      auto found = address_index.find(holder);
      if (found == address_index.end()) {
        const WorkerRec* hw = worker(holder);
        found = address_index.emplace(holder, static_cast<std::int32_t>(reply.current.addresses.size())).first;
        reply.current.addresses.push_back(hw != nullptr ? hw->address : std::string());
      }
      u.location = found->second;
    }
    if (t->error) u.error = *t->error;
  }
  reply.ok = true;
  reply.campaigns.push_back(campaign_info(name));
  HERD_LOG(info) << "client #" << id << " attached to campaign " << name << " (" << reply.tasks.size() << " tasks, "
                 << reply.current.updates.size() << " finished)";
  check();
  return true;
}

TaskId SchedulerState::restore_campaign_task(const std::string& campaign, const std::string& key,
                                             const std::vector<char>* bytes, bool on_disk,
                                             const std::vector<char>* error, const std::vector<char>& recipe) {
  const TaskId id = ++next_restored_;  // client index 0: no client's ids
  restoring_ = true;
  auto lost = [&](const std::string& why) {
    graph_.add_scattered(id, key, 0);
    campaign_task_added(campaign, id, 0, nullptr);
    graph_.fail(id, {"herd::LostInRestart", "task " + key + " of campaign " + campaign + " " + why, key, ""}, fx_);
  };
  if (bytes != nullptr || on_disk) {
    graph_.add_scattered(id, key, 0);
    campaign_task_added(campaign, id, 0, nullptr);
    if (bytes != nullptr) dispatch_scatter(id, net::copy_payload(bytes->data(), bytes->size()));
    else held_.insert(id);
  } else if (error != nullptr) {
    protocol::ErrorInfo e;
    try {
      msgpack::object_handle oh = msgpack::unpack(error->data(), error->size());
      oh.get().convert(e);
    } catch (const std::exception& ex) {
      e = {"herd::LostInRestart", "task " + key + " of campaign " + campaign +
                                      " failed before the scheduler stopped; its journaled error is unreadable (" +
                                      ex.what() + ")",
           key, ""};
    }
    graph_.add_scattered(id, key, 0);
    campaign_task_added(campaign, id, 0, nullptr);
    graph_.fail(id, e, fx_);
  } else if (recipe.empty()) {
    lost("had not finished when the scheduler stopped, and its recipe was too large to journal: submit it again");
  } else {
    Recipe r;
    std::string why;
    try {
      msgpack::object_handle oh = msgpack::unpack(recipe.data(), recipe.size());
      oh.get().convert(r);
      if (r.inputs.size() != r.spec.refs.size()) why = "has a damaged recipe in the journal (inputs do not match)";
    } catch (const std::exception& ex) {
      why = std::string("has an unreadable recipe in the journal (") + ex.what() + ")";
    }
    protocol::TaskSpec& spec = r.spec;
    for (std::size_t i = 0; why.empty() && i < spec.refs.size(); ++i) {
      auto it = restored_by_key_.find(r.inputs[i]);
      if (it == restored_by_key_.end()) {
        why = "had not finished when the scheduler stopped, and its input " +
              (r.inputs[i].empty() ? std::string("(unnamed)") : r.inputs[i]) +
              " was not part of a campaign (the journal keeps only campaigns' recipes): submit it again";
      } else {
        spec.refs[i].id = it->second;
      }
    }
    // A gang runs whole, and some of its ranks may have finished before the stop: it is not
    // put together again from what is left.
    if (why.empty() && spec.gang != 0) {
      why = "had not finished when the scheduler stopped, and it is a gang's rank (a gang is not run again after "
            "a restart: some of its ranks may have finished): submit the gang again";
    }
    if (!why.empty()) {
      lost(why);
    } else {
      // Runs again, as its client submitted it (retries, resources and all).
      spec.id = id;
      spec.key = key;
      spec.campaign = campaign;
      graph_.add(spec, 0, shape_of(spec.resources, spec.workers, spec.pool, spec.allow_other_workers), fx_);
      campaign_task_added(campaign, id, 0, nullptr);
    }
  }
  restored_by_key_[key] = id;
  apply(fx_);
  restoring_ = false;
  check();
  return id;
}

bool SchedulerState::release_campaign(const std::string& name) {
  auto it = campaigns_.find(name);
  if (it == campaigns_.end()) return false;
  if (options_.full_results) out_.journal.emplace_back(campaign_record_key(name, ""), std::vector<char>{});
  const std::vector<TaskId> tasks = std::move(it->second.tasks);
  campaigns_.erase(it);
  for (TaskId tid : tasks) {
    campaign_of_.erase(tid);
    Task* t = graph_.find(tid);
    if (t == nullptr) continue;
    t->campaign = false;
  }
  // What has not finished is cancelled (a client holding its future hears why), then every
  // task is let go as a dropped future is: results freed, recipes kept while dependents need them.
  for (TaskId tid : tasks) {
    const Task* t = graph_.find(tid);
    if (t == nullptr || !t->unfinished()) continue;
    if (t->gang != 0) cancel_gang(t->gang, "campaign " + name + " was released");
    else graph_.cancel(tid, fx_);
  }
  apply(fx_);
  for (TaskId tid : tasks) graph_.release(tid, fx_);
  apply(fx_);
  HERD_LOG(info) << "campaign " << name << " released (" << tasks.size() << " tasks)";
  check();
  return true;
}

std::string SchedulerState::validate_campaigns() const {
  std::size_t listed = 0;
  for (const auto& [name, c] : campaigns_) {
    for (TaskId id : c.tasks) {
      ++listed;
      auto of = campaign_of_.find(id);
      if (of == campaign_of_.end() || of->second != name) return "campaign " + name + " lists a task not mapped to it";
      const Task* t = graph_.find(id);
      if (t != nullptr && !t->campaign) return "campaign " + name + "'s task " + graph_.key_of(*t) + " is not flagged";
    }
  }
  if (listed != campaign_of_.size()) return "campaign_of_ maps tasks no campaign lists";
  for (const auto& [id, t] : graph_.tasks()) {
    if (t.campaign && campaign_of_.count(id) == 0) return "task " + graph_.key_of(t) + " is flagged in no campaign";
  }
  return {};
}

}  // namespace herd::scheduler
