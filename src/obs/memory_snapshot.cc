#include "obs/memory_snapshot.h"

#include <algorithm>
#include <vector>

#include "obs/pickle_writer.h"

namespace kvw::obs {

namespace {

constexpr uint64_t kBase = 0x10000000;
constexpr uint64_t kSegmentAlign = uint64_t{2} << 20;

struct Block {
  uint64_t address = 0, size = 0;
  bool active = false;
  const char* kv_state = nullptr;  // KV arena runs only
  uint64_t alloc_step = 0;
};

struct Segment {
  const char* name;
  uint64_t address = 0, total_size = 0;
  std::vector<Block> blocks;
};

const char* kv_state_name(BlockState s) {
  switch (s) {
    case BlockState::kUsed:
      return "used";
    case BlockState::kCached:
      return "cached";
    case BlockState::kFree:
      return "free";
  }
  return "free";
}

// Coalesces consecutive KV blocks of one state into a block of the segment.
std::vector<Block> kv_runs(uint64_t base, uint64_t bytes_per_block, const KvSnapshot& kv) {
  std::vector<Block> out;
  for (size_t i = 0; i < kv.blocks.size(); ++i) {
    const BlockRecord& r = kv.blocks[i];
    const char* st = kv_state_name(r.state);
    if (!out.empty() && out.back().kv_state == st) {
      out.back().size += bytes_per_block;
      out.back().alloc_step = std::min(out.back().alloc_step, r.alloc_step);
      continue;
    }
    out.push_back(Block{.address = base + i * bytes_per_block,
                        .size = bytes_per_block,
                        .active = r.state == BlockState::kUsed,
                        .kv_state = st,
                        .alloc_step = r.alloc_step});
  }
  return out;
}

std::vector<Segment> layout(const planner::BudgetTable& b, const KvSnapshot* kv) {
  std::vector<Segment> segs;
  uint64_t addr = kBase;
  auto add = [&](const char* name, uint64_t size, std::vector<Block> blocks) {
    if (size == 0) return;
    segs.push_back(Segment{name, addr, size, std::move(blocks)});
    addr = (addr + size + kSegmentAlign - 1) / kSegmentAlign * kSegmentAlign;
  };
  auto whole = [&](uint64_t size) {
    return std::vector<Block>{Block{.address = addr, .size = size, .active = true}};
  };
  add("weights", b.weights_bytes, whole(b.weights_bytes));
  add("workspace", b.workspace_bytes, whole(b.workspace_bytes));
  add("reserve", b.reserve_bytes, whole(b.reserve_bytes));
  if (kv && !kv->blocks.empty() && b.kv_bytes_per_block > 0) {
    const uint64_t size = b.kv_bytes_per_block * kv->blocks.size();
    add("kv_pool", size, kv_runs(addr, b.kv_bytes_per_block, *kv));
    // Hybrid window models: the windowed layers' slots follow the blocks (kv/window_slots.h).
    const uint64_t slots = b.num_window_slots * b.kv_window_bytes_per_block;
    add("kv_window", slots, whole(slots));
  } else if (b.kv_pool_bytes > 0) {
    add("kv_pool", b.kv_pool_bytes,
        {Block{.address = addr, .size = b.kv_pool_bytes, .kv_state = "free"}});
  }
  return segs;
}

void write_frames(PickleWriter& w) {
  w.key("frames");
  w.begin_list();
  w.end_list();
}

void write_segment(PickleWriter& w, const Segment& s) {
  uint64_t active = 0;
  for (const Block& b : s.blocks) active += b.active ? b.size : 0;
  w.begin_dict();
  w.key("device");
  w.integer(0);
  w.key("address");
  w.integer(int64_t(s.address));
  w.key("total_size");
  w.integer(int64_t(s.total_size));
  w.key("allocated_size");
  w.integer(int64_t(active));
  w.key("active_size");
  w.integer(int64_t(active));
  w.key("requested_size");
  w.integer(int64_t(active));
  w.key("stream");
  w.integer(0);
  w.key("segment_type");
  w.str("large");
  w.key("kvwarden_component");
  w.str(s.name);
  w.key("blocks");
  w.begin_list();
  for (const Block& b : s.blocks) {
    w.begin_dict();
    w.key("address");
    w.integer(int64_t(b.address));
    w.key("size");
    w.integer(int64_t(b.size));
    w.key("requested_size");
    w.integer(int64_t(b.active ? b.size : 0));
    w.key("state");
    w.str(b.active ? "active_allocated" : "inactive");
    if (b.kv_state) {
      w.key("kv_state");
      w.str(b.kv_state);
    }
    write_frames(w);
    w.end_dict();
  }
  w.end_list();
  w.end_dict();
}

void write_event(PickleWriter& w, const char* action, uint64_t addr, uint64_t size,
                 uint64_t time_us) {
  w.begin_dict();
  w.key("action");
  w.str(action);
  w.key("addr");
  w.integer(int64_t(addr));
  w.key("size");
  w.integer(int64_t(size));
  w.key("stream");
  w.integer(0);
  w.key("time_us");
  w.integer(int64_t(time_us));
  write_frames(w);
  w.end_dict();
}

void write_trace(PickleWriter& w, const std::vector<Segment>& segs) {
  std::vector<const Block*> allocs;
  for (const Segment& s : segs)
    for (const Block& b : s.blocks)
      if (b.active) allocs.push_back(&b);
  // Segment-wide blocks (weights, workspace) have alloc_step 0 and so come first.
  std::stable_sort(allocs.begin(), allocs.end(),
                   [](const Block* a, const Block* b) { return a->alloc_step < b->alloc_step; });
  w.begin_list();  // one list per device
  w.begin_list();
  uint64_t t = 0;
  for (const Segment& s : segs) write_event(w, "segment_alloc", s.address, s.total_size, t++);
  for (const Block* b : allocs) write_event(w, "alloc", b->address, b->size, t++);
  w.end_list();
  w.end_list();
}

}  // namespace

std::string memory_snapshot_pickle(const planner::BudgetTable& budget, const KvSnapshot* kv) {
  const std::vector<Segment> segs = layout(budget, kv);
  PickleWriter w;
  w.begin_dict();
  w.key("segments");
  w.begin_list();
  for (const Segment& s : segs) write_segment(w, s);
  w.end_list();
  w.key("device_traces");
  write_trace(w, segs);
  w.end_dict();
  return w.finish();
}

}  // namespace kvw::obs
