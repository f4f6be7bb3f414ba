// Detached campaigns: tasks submitted under a name (TaskOptions::campaign) outlive their client.
//
// As HyperQueue's jobs or Dask's published datasets: the scheduler holds the campaign's tasks
// for it, so a client's release (its futures dropped) and its departure (an ssh session that
// dropped) leave them running and their results kept. A campaign task whose client is gone has
// client 0: its updates go nowhere until a client attaches, takes the tasks over (their updates
// go to it from then on) and is told at once where each finished one stands. Releasing the
// campaign cancels what has not finished and lets everything go as dropped futures do.
#include <utility>

#include "common/logging.hpp"
#include "scheduler/journal.hpp"
#include "scheduler/state.hpp"

namespace herd::scheduler {

namespace {
const std::string kNoCampaign;
}  // namespace

std::size_t SchedulerState::campaign_size(const std::string& name) const {
  auto it = campaigns_.find(name);
  return it == campaigns_.end() ? 0 : it->second.tasks.size();
}

void SchedulerState::campaign_task_added(const std::string& name, TaskId id, ClientId client, bool journal) {
  Task* t = graph_.find(id);
  if (t == nullptr || t->campaign || campaign_of_.count(id)) return;  // a resend
  t->campaign = true;
  // With the journal on, membership is recorded (in order with the results), so a restarted
  // scheduler knows its campaigns.
  if (journal && options_.full_results) out_.journal.emplace_back(campaign_record_key(name, graph_.user_key(*t)), std::vector<char>{});
  Campaign& c = campaigns_[name];
  if (c.tasks.empty()) HERD_LOG(info) << "campaign " << name << " started by client #" << client;
  c.tasks.push_back(id);
  c.client = client;
  campaign_of_.emplace(id, name);
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
                                             const std::vector<char>* bytes, bool on_disk) {
  const TaskId id = ++next_restored_;  // client index 0: no client's ids
  graph_.add_scattered(id, key, 0);
  campaign_task_added(campaign, id, 0, false);
  if (bytes != nullptr) {
    dispatch_scatter(id, zmq::message_t(bytes->data(), bytes->size()));
  } else if (on_disk) {
    held_.insert(id);
  } else {
    graph_.fail(id, {"herd::LostInRestart",
                     "task " + key + " of campaign " + campaign +
                         " had not finished when the scheduler stopped; the journal keeps results, not recipes: "
                         "submit it again",
                     key, ""},
                fx_);
    apply(fx_);
  }
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
