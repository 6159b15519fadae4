#include "test_util.h"

#include <httplib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "obs/routes.h"

namespace kvw::obs::test {

bool skip_allowed(const std::string& name) {
  const char* env = std::getenv("KVW_ALLOW_SKIP");
  if (env == nullptr) return false;
  std::stringstream ss(env);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item == name) return true;
  }
  return false;
}

void serve_routes(httplib::Server& server, ObservabilityContext& ctx) {
  register_observability_routes(
      [&server](const std::string& path, http::Handler h, bool) {
        server.Get(path, [h](const httplib::Request& in, httplib::Response& out) {
          http::HttpRequest req;
          req.method = in.method;
          req.path = in.path;
          for (const auto& [k, v] : in.headers) req.headers.emplace_back(k, v);
          http::HttpResponse res;
          h(req, res);
          out.status = res.status;
          for (const auto& [k, v] : res.headers) out.set_header(k, v);
          out.set_content(res.body, res.content_type);
        });
      },
      ctx);
}

KvSnapshot make_snapshot(uint32_t num_blocks, int32_t block_size) {
  KvSnapshot s;
  s.step = 1000;
  s.taken_ns = 123456789;
  s.blocks.resize(num_blocks);
  for (uint32_t i = 0; i < num_blocks; ++i) {
    BlockRecord& r = s.blocks[i];
    r.block_id = BlockId{i};
    r.alloc_step = i % 1000;
    r.last_access_step = i % 1000;
    if (i % 3 == 0) {
      r.state = BlockState::kFree;
      ++s.stats.num_free_blocks;
    } else if (i % 5 == 0) {
      r.state = BlockState::kCached;
      r.num_tokens = block_size;
      ++s.stats.num_cached_blocks;
    } else {
      r.state = BlockState::kUsed;
      r.owner = SeqId{i / 7 + 1};
      r.ref_count = 1;
      r.num_tokens = block_size - int32_t(i % 2);
      ++s.stats.num_used_blocks;
      s.stats.num_used_token_slots += uint64_t(r.num_tokens);
      s.stats.num_waste_slots += uint64_t(block_size - r.num_tokens);
    }
  }
  s.stats.num_blocks = num_blocks;
  s.stats.block_size = block_size;
  s.stats.num_token_slots = uint64_t(num_blocks) * uint64_t(block_size);
  s.stats.largest_free_run = num_blocks ? 1 : 0;
  s.stats.num_free_runs = s.stats.num_free_blocks;
  return s;
}

EngineStats make_stats() {
  EngineStats s;
  s.num_steps = 77;
  s.num_generated_tokens = 4321;
  s.spec.num_drafts = 40;
  s.spec.num_draft_tokens = 130;
  s.spec.num_accepted_tokens = 70;
  s.spec.num_accepted_tokens_per_pos[0] = 38;
  s.spec.num_accepted_tokens_per_pos[1] = 32;
  s.num_numerics_errors = 2;
  s.num_preemptions = 9;
  s.num_preemptions_swap = 4;
  s.num_preemptions_recompute = 5;
  s.num_computed_tokens = 9000;
  s.forward_tokens_finished[size_t(FinishReason::kLength)] = 6000;
  s.forward_tokens_finished[size_t(FinishReason::kCancelled)] = 1500;
  s.num_recomputed_tokens = 700;
  s.swap_out_bytes = 1 << 20;
  s.swap_in_bytes = 1 << 19;
  s.num_alloc_failures = 3;
  s.num_admission_deferrals = 8;
  s.num_running = 6;
  s.num_waiting = 11;
  s.num_swapped = 2;
  s.prefix.num_query_tokens = 1000;
  s.prefix.num_hit_tokens = 250;
  s.prefix.num_evictions = 17;
  s.kv = make_snapshot(300).stats;
  s.last_step_seqs = 6;
  s.last_step_tokens = 6;
  s.schedule_ns = 250'000'000;
  s.forward_ns = 7'500'000'000;
  s.sample_ns = 1'250'000'000;
  return s;
}

planner::BudgetTable make_budget(uint64_t num_blocks) {
  planner::BudgetTable b;
  b.weights_bytes = 300 << 20;
  b.workspace_bytes = 20 << 20;
  b.kv_bytes_per_token = 4096;
  b.kv_bytes_per_block = 16 * 4096;
  b.num_blocks = num_blocks;
  b.kv_pool_bytes = num_blocks * b.kv_bytes_per_block;
  b.reserve_bytes = 64 << 20;
  b.total_bytes = b.weights_bytes + b.workspace_bytes + b.kv_pool_bytes + b.reserve_bytes;
  return b;
}

int run_command(const std::string& cmd, std::string* out) {
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0)
    if (out) out->append(buf, n);
  const int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

bool have_program(const std::string& path) {
  return access(path.c_str(), X_OK) == 0;
}

std::string temp_dir(const std::string& tag) {
  std::string tmpl = "/tmp/kvw-obs-" + tag + "-XXXXXX";
  char* d = mkdtemp(tmpl.data());
  return d ? std::string(d) : std::string();
}

void write_file(const std::string& path, const std::string& body) {
  std::ofstream(path, std::ios::binary) << body;
}

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace kvw::obs::test
