// The wire snapshot (protocol::StatusReply) as the public herd::ClusterStatus: one conversion
// shared by Client::status() and the scheduler's dashboard, so both show the same numbers.
#pragma once

#include "herd/status.hpp"
#include "protocol/messages.hpp"

namespace herd::detail {

PoolInfo to_pool_info(const protocol::PoolStatus& p);
ClusterStatus to_cluster_status(const protocol::StatusReply& r);
TaskExplanation to_task_explanation(const protocol::TaskExplanation& e);
CampaignInfo to_campaign_info(const protocol::CampaignInfo& c);
PoolChange to_pool_change(const protocol::ScalePoolReply& r);

}  // namespace herd::detail
