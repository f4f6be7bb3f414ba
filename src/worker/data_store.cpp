#include "worker/data_store.hpp"

namespace herd::worker {

void DataStore::put(protocol::TaskId id, data::PayloadPtr bytes) {
  std::lock_guard lock(mu_);
  auto& slot = data_[id];
  if (slot) total_ -= slot->size();
  total_ += bytes->size();
  slot = std::move(bytes);
}

data::PayloadPtr DataStore::get(protocol::TaskId id) const {
  std::lock_guard lock(mu_);
  auto it = data_.find(id);
  return it == data_.end() ? nullptr : it->second;
}

bool DataStore::contains(protocol::TaskId id) const {
  std::lock_guard lock(mu_);
  return data_.count(id) != 0;
}

void DataStore::erase(protocol::TaskId id) {
  std::lock_guard lock(mu_);
  auto it = data_.find(id);
  if (it == data_.end()) return;
  total_ -= it->second->size();
  data_.erase(it);
}

std::size_t DataStore::size() const {
  std::lock_guard lock(mu_);
  return data_.size();
}

std::uint64_t DataStore::bytes() const {
  std::lock_guard lock(mu_);
  return total_;
}

}  // namespace herd::worker
