// obs/memory_snapshot.h: /debug/memory_snapshot, kvwarden's memory as a PyTorch memory
// snapshot pickle (the format of torch.cuda.memory._snapshot(), opened by pytorch.org/memory_viz
// and torch.cuda._memory_viz):
//   {'segments': [{device, address, total_size, allocated_size, active_size, requested_size,
//                  stream, segment_type, blocks: [{address, size, requested_size, state,
//                  frames: []}]}],
//    'device_traces': [[{action, addr, size, stream, time_us, frames: []}]]}
// Segments: weights, workspace, reserve (one block each) and the KV arena, whose blocks are the
// runs of consecutive KV blocks in the same state (used -> 'active_allocated'; free and cached
// -> 'inactive', with an extra 'kv_state' key). Addresses are synthetic (a stable virtual layout
// from 0x10000000, segments 2 MiB aligned): the viewer needs consistent addresses, not pointers.
// The trace replays segment_alloc for every segment, then an 'alloc' per active block (KV runs
// ordered by allocation step), so trace views end in the state the segments show.
// Pure function; thread-safe.
#pragma once

#include <string>

#include "engine/queues.h"
#include "planner/engine_budget.h"

namespace kvw::obs {

// `kv` may be null (no engine yet): then the KV arena is one inactive block of kv_pool_bytes.
std::string memory_snapshot_pickle(const planner::BudgetTable& budget, const KvSnapshot* kv);

}  // namespace kvw::obs
