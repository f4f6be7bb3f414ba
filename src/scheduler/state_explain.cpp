// `herd explain` / Client::explain(), the core's part: a task's state, the inputs it waits
// for, and each connected worker's reason for not running it (as HyperQueue's task explain).
// The pools' part (what their jobs would offer, paused, pending reasons) is the server's:
// Scheduler::explain_pools (scheduler.cpp's neighbour, status.cpp).
#include <algorithm>
#include <sstream>

#include "scheduler/state.hpp"

namespace herd::scheduler {
namespace {

std::string amounts(const std::map<std::string, double>& r) {
  if (r.empty()) return "nothing";
  std::ostringstream s;
  s << '{';
  bool first = true;
  for (const auto& [name, amount] : r) {
    s << (first ? "" : ", ") << name << ": " << amount;
    first = false;
  }
  s << '}';
  return s.str();
}

constexpr std::size_t kMaxInputsListed = 20;

}  // namespace

const Task* SchedulerState::find_by_key(const std::string& key) const {
  for (const auto& [id, t] : graph_.tasks()) {
    if ((t.status != TaskStatus::released || t.wanted) && graph_.key_of(t) == key) return &t;
  }
  return nullptr;
}

protocol::TaskExplanation SchedulerState::explain(const Task& t, const Now& now) const {
  protocol::TaskExplanation e;
  e.found = true;
  e.key = graph_.key_of(t);
  e.function = graph_.function_name(t);
  e.state = to_string(t.status);
  e.resources = resources_of(t);
  e.duration_s = t.duration_s;
  switch (t.status) {
    case TaskStatus::waiting: {
      std::size_t listed = 0, missing = 0;
      for (TaskId d : t.deps) {
        const Task* dep = graph_.find(d);
        if (dep != nullptr && dep->in_memory()) continue;
        ++missing;
        if (listed++ < kMaxInputsListed) {
          e.inputs.push_back(dep == nullptr ? "task " + TaskGraph::display_key("", d).substr(1) + " (gone)"
                                            : graph_.key_of(*dep) + " (" + to_string(dep->status) + ")");
        }
      }
      if (missing > kMaxInputsListed) e.inputs.push_back("... and " + std::to_string(missing - kMaxInputsListed) + " more");
      e.summary = "waiting for " + std::to_string(missing) + " of its " + std::to_string(t.deps.size()) +
                  " input(s) to be computed";
      if (missing == 0) e.summary = "waiting: its inputs are being fetched or restored (journal)";
      return e;
    }
    case TaskStatus::processing: {
      const WorkerRec* w = worker(t.worker);
      e.summary = "running on worker " + (w != nullptr ? w->name : std::to_string(t.worker));
      if (t.deaths > 0) e.summary += " (" + std::to_string(t.deaths) + " worker(s) died while it ran there before)";
      return e;
    }
    case TaskStatus::memory: {
      e.summary = "finished: its result is held by " + std::to_string(t.who_has.size()) + " worker(s)";
      std::string names;
      for (std::uint32_t h : t.who_has) {
        const WorkerRec* w = worker(h);
        names += (names.empty() ? "" : ", ") + (w != nullptr ? w->name : std::to_string(h));
      }
      if (!names.empty()) e.summary += " (" + names + ")";
      if (t.safe_elsewhere()) {
        e.summary += "; its client holds the value too, so no worker is kept for it";
      } else if (t.who_has.size() == 1) {
        if (const WorkerRec* w = worker(t.who_has.front()); w != nullptr && w->kept_for_data) {
          e.summary += "; worker " + w->name + " is kept for data: its pool would let it go, but it holds results "
                       "only it has (" + kept_for_data_text(*w) + ")";
        }
      }
      return e;
    }
    case TaskStatus::erred:
      e.summary = "failed: " + (t.error ? t.error->type + ": " + t.error->message : std::string("(no error recorded)"));
      return e;
    case TaskStatus::cancelled:
      e.summary = "cancelled";
      return e;
    case TaskStatus::released:
      e.summary = t.wanted ? "finished: its client holds the value and no worker keeps it (computed again only if a "
                             "task takes it as input)"
                           : "released: no client holds it any more";
      return e;
    case TaskStatus::ready:
      break;
  }
  // Ready: why not on each worker.
  const Shape& s = shapes_[t.shape];
  std::size_t could_now = 0, could_ever = 0;
  std::vector<std::pair<std::string, std::string>> lines;
  for (const auto& [id, w] : workers_) {
    std::string why;
    if (!offers(w, s)) {
      why = "offers " + amounts(w.resources) + ", the task needs " + amounts(s.need);
    } else if (t.duration_s > 0 && w.end_time > 0 && now.unix_s() + static_cast<std::int64_t>(t.duration_s) > w.end_time) {
      why = "has " + std::to_string(std::max<std::int64_t>(0, w.end_time - now.unix_s())) +
            " s of walltime left, the task needs " + std::to_string(t.duration_s) + " s (TaskOptions::duration)";
    } else {
      ++could_ever;
      if (w.retiring) {
        why = "is retiring (takes nothing new)";
      } else if (w.job_suspended) {
        why = "its batch job is suspended";
      } else if (w.suspect != 0) {
        why = "runs a suspect task alone (one that was on a worker that died)";
      } else if (w.reserved_for != 0) {
        why = "drains to run a suspect task alone";
      } else if (w.reserved_gang != 0) {
        why = "drains for a gang";
      } else if (w.held_by != 0 && w.held_by != t.id) {
        why = "its node is held for a multi-node task (TaskOptions::nodes)";
      } else if (w.memory_limit > 0 && w.memory_rss > w.memory_limit / 10 * 9) {
        why = "paused: its memory (" + std::to_string(w.memory_rss >> 20) + " MiB) is above 90% of its limit (" +
              std::to_string(w.memory_limit >> 20) + " MiB)";
      } else if (!can_take(w, s)) {
        why = "busy: " + std::to_string(w.processing.size()) + " task(s) on " + std::to_string(w.nthreads) +
              " slot(s), or their resources in use";
      } else if (avoided(t, id)) {
        why = "free, but the task failed to fetch its inputs there: another worker is preferred";
        ++could_now;
      } else {
        why = "free: the task goes there on the scheduler's next turn";
        ++could_now;
      }
    }
    lines.emplace_back(w.name, why);
  }
  std::sort(lines.begin(), lines.end());
  for (auto& [name, why] : lines) e.workers.push_back(name + ": " + why);
  e.never = could_ever == 0;  // so far: the server adds whether a pool could bring one
  if (t.gang != 0) {
    if (auto g = gangs_.find(t.gang); g != gangs_.end()) {
      if (!g->second.never.empty()) {
        e.summary = "gang of " + std::to_string(g->second.size) + ": " + g->second.never;
        return e;
      }
      if (!g->second.waiting) {
        e.summary = "gang member: waiting for the other members of its gang (" + std::to_string(g->second.ready) +
                    " of " + std::to_string(g->second.size) + " ready)";
        return e;
      }
      e.summary = "gang of " + std::to_string(g->second.size) + ": waiting for that many workers free at once";
      return e;
    }
  }
  if (multinode(t.id) && !workers_.empty()) {
    const std::string never = why_multinode_waits(t);
    e.never = e.never || !never.empty();
    e.summary = !never.empty() ? never
                               : "multi-node task of " + std::to_string(nodes_of_.at(t.id)) +
                                     " node(s): waiting for that many hosts of one allocation idle at once";
    return e;
  }
  if (workers_.empty()) {
    e.summary = "no worker is connected";
  } else if (could_ever == 0) {
    e.summary = why_no_worker(t);
    if (e.summary.empty()) e.summary = "no connected worker can run it (see each worker's reason)";
  } else if (could_now > 0) {
    e.summary = "ready: a worker is free for it; it is placed on the scheduler's next turn";
  } else {
    e.summary = "ready: waiting for a free slot on one of the " + std::to_string(could_ever) +
                " worker(s) that can run it";
  }
  return e;
}

}  // namespace herd::scheduler
