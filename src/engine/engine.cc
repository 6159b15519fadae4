// Engine start-up (budget table, allocation), the client-facing calls and shutdown.
// The step loop is in engine_loop.cc.
#include "engine/engine.h"

#include <sys/mman.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <thread>

#include "core/check.h"
#include "core/log.h"
#include "core/thread_name.h"
#include "gguf/gguf_file.h"
#include "planner/memory_plan.h"
#include "planner/model_source.h"

namespace kvw {

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& cfg) {
  KVW_RETURN_IF_ERROR(cfg.validate());
  auto file = GgufFile::open(cfg.model_path);
  if (!file.ok()) return file.error();
  return create(cfg, std::move(*file));
}

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& cfg,
                                               std::unique_ptr<GgufFile> file) {
  CHECK(file != nullptr) << "Engine::create: no file for --model " << cfg.model_path;
  auto hp = hparams_from_gguf(*file);
  if (!hp.ok()) return hp.error();
  return create(cfg, std::move(file), std::move(*hp));
}

Result<std::unique_ptr<Engine>> Engine::create(const EngineConfig& cfg,
                                               std::unique_ptr<GgufFile> file, ModelHParams hp) {
  CHECK(file != nullptr && file->path() == cfg.model_path)
      << "Engine::create: the open file is not --model " << cfg.model_path;
  auto e = std::make_unique<Engine>(PassKey{});
  KVW_RETURN_IF_ERROR(e->init(cfg, std::move(file), std::move(hp)));
  e->thread_ = std::thread([raw = e.get()] {
    set_thread_name("kvw-engine");
    raw->run();
  });
  return e;
}

Status Engine::plan_budget(const GgufFile& file, const ModelHParams& hp, const GgufFile* draft_file,
                           const ModelHParams* draft_hp) {
  auto shape = planner::shape_from_gguf(file, hp);
  if (!shape.ok()) return shape.error();
  std::optional<planner::ModelShape> draft_shape;
  if (draft_file != nullptr) {
    auto ds = planner::shape_from_gguf(*draft_file, *draft_hp);
    if (!ds.ok()) return Error{"--draft-model: " + ds.message()};
    draft_shape = std::move(*ds);
  }
  const int64_t n_vocab = shape->n_vocab;
  const int64_t spec_rows = cfg_.sched.spec.max_draft_tokens_per_step();
  const int64_t prompt_rows = cfg_.sched.max_prompt_logit_rows;
  const int64_t logit_rows =
      std::min<int64_t>(cfg_.sched.max_num_seqs, cfg_.sched.max_num_batched_tokens) + spec_rows +
      prompt_rows;
  planner::EngineOptions opt;
  opt.max_num_batched_tokens = cfg_.sched.max_num_batched_tokens;
  opt.block_size = cfg_.block_size;
  opt.kv_dtype = cfg_.kv_dtype;
  opt.n_threads =
      cfg_.n_threads > 0 ? cfg_.n_threads : std::max(1u, std::thread::hardware_concurrency());
  opt.memory_budget_bytes = cfg_.memory_budget_bytes;
  opt.max_model_len = cfg_.sched.max_model_len;
  opt.max_num_seqs = cfg_.sched.max_num_seqs;
  opt.reserve_bytes = cfg_.reserve_bytes;  // the planner adds the logits buffer to this row
  opt.spec_draft_logit_rows = spec_rows;   // and the speculative drafts' rows
  opt.prompt_logit_rows = prompt_rows;     // and the prompt logprobs' rows
  opt.request_bytes = cfg_.request_bytes;
  opt.swap_staging_bytes = planner::swap_staging_bytes(cfg_.swap_bytes);
  opt.draft = draft_shape ? &*draft_shape : nullptr;
  opt.draft_logit_rows = cfg_.sched.spec.max_seqs;
  opt.swa_full = cfg_.swa_full;
  auto table = planner::plan_engine_budget(*shape, opt);
  if (!table.ok()) {
    // Show what the fixed rows need: the same plan without a budget, for one short sequence.
    planner::EngineOptions need = opt;
    need.memory_budget_bytes = 0;
    need.max_model_len = cfg_.block_size;
    need.max_num_seqs = 1;
    auto fixed = planner::plan_engine_budget(*shape, need);
    std::string msg = "memory budget too small: " + table.message();
    if (fixed.ok()) msg += "\nminimum (one KV block):\n" + fixed->to_string();
    msg += "raise --memory-budget (now " +
           planner::format_bytes((int64_t)cfg_.memory_budget_bytes) +
           "), or lower --max-num-batched-tokens / --max-num-seqs";
    return Error{msg};
  }
  budget_ = *table;
  if (budget_.num_blocks > UINT32_MAX - 1) budget_.num_blocks = UINT32_MAX - 1;
  KVW_RETURN_IF_ERROR(check_memory_available(logit_rows * n_vocab * sizeof(float)));
  LOG(INFO, engine) << "memory budget "
                    << (cfg_.memory_budget_bytes
                            ? planner::format_bytes((int64_t)cfg_.memory_budget_bytes)
                            : std::string("(none: max_num_seqs x min(max_model_len, 4096))"))
                    << " (reserve includes " << logit_rows << " x " << n_vocab << " f32 logits):\n"
                    << budget_.to_string();
  return Status::ok_status();
}

Status Engine::check_memory_available(uint64_t logits_bytes) const {
  // What init() allocates and touches at once; with --mlock the mapped weights stay resident
  // too. Failing here beats being killed by the OS halfway through the memset.
  uint64_t need = budget_.kv_pool_bytes + budget_.workspace_bytes + logits_bytes +
                  budget_.swap_staging_bytes + budget_.draft_kv_pool_bytes +
                  budget_.draft_workspace_bytes;
  if (cfg_.mlock) need += budget_.weights_bytes + budget_.draft_weights_bytes;
  const uint64_t avail =
      cfg_.available_memory_bytes > 0 ? cfg_.available_memory_bytes : available_memory_bytes();
  if (avail == 0 || need <= avail) return Status::ok_status();
  return Error{"cannot touch the memory budget at start-up: the KV pool (" +
               planner::format_bytes((int64_t)budget_.kv_pool_bytes) + "), workspace, logits" +
               (budget_.swap_staging_bytes > 0 ? ", swap staging" : "") +
               (cfg_.mlock ? " and locked weights" : "") + " need " +
               planner::format_bytes((int64_t)need) + " but only " +
               planner::format_bytes((int64_t)avail) +
               " is available (MemAvailable, cgroup memory.max); lower --memory-budget, "
               "--max-num-seqs or --max-model-len"};
}

Status Engine::lock_memory() const {
  if (!cfg_.mlock) return Status::ok_status();
  if (mlockall(MCL_CURRENT) == 0) {
    LOG(INFO, engine) << "--mlock: every mapped page is locked in RAM";
    return Status::ok_status();
  }
  const int err = errno;
  rlimit lim{};
  getrlimit(RLIMIT_MEMLOCK, &lim);
  const std::string limit = lim.rlim_cur == RLIM_INFINITY
                                ? std::string("unlimited")
                                : planner::format_bytes((int64_t)lim.rlim_cur);
  return Error{std::string("--mlock: cannot lock the process's memory in RAM: ") +
               std::strerror(err) + " (RLIMIT_MEMLOCK " + limit +
               "; raise it with `ulimit -l`, a container's memlock limit or CAP_IPC_LOCK, or "
               "start without --mlock)"};
}

Status Engine::init(const EngineConfig& cfg, std::unique_ptr<GgufFile> file, ModelHParams hp) {
  KVW_RETURN_IF_ERROR(cfg.validate());
  cfg_ = cfg;
  std::unique_ptr<GgufFile> draft_file;
  std::optional<ModelHParams> draft_hp;
  if (!cfg.sched.spec.draft_model.empty()) {
    auto df = GgufFile::open(cfg.sched.spec.draft_model);
    if (!df.ok()) return Error{"--draft-model: " + df.message()};
    draft_file = std::move(*df);
    KVW_RETURN_IF_ERROR(check_same_vocabulary(*file, *draft_file));
    auto dh = hparams_from_gguf(*draft_file);
    if (!dh.ok()) return Error{"--draft-model: " + dh.message()};
    draft_hp = std::move(*dh);
  }
  // Plan before allocating anything.
  KVW_RETURN_IF_ERROR(plan_budget(*file, hp, draft_file.get(), draft_hp ? &*draft_hp : nullptr));
  ModelOptions mo;
  mo.n_threads = cfg.n_threads;
  mo.max_batch_tokens = (int32_t)cfg.sched.max_num_batched_tokens;
  mo.activation_clamp = cfg.activation_clamp;
  mo.attention_bf16_dot = cfg.attention_bf16_dot;
  mo.rope = cfg.rope;
  mo.max_model_len = cfg.sched.max_model_len;  // phi3: LongRoPE long or short factors
  auto model = Model::load(std::move(file), std::move(hp), mo);
  if (!model.ok()) return model.error();
  model_ = std::move(*model);
  if (cfg.kernel_fault_hook) {
    model_->set_task_hook([this](int ith) {
      if (ith == 0) return;  // worker threads only: the engine thread is thread 0
      for (const auto& [id, max_tokens] : kernel_fault_pass_)
        cfg_.kernel_fault_hook(id, max_tokens);
    });
  }
  if (model_->workspace_bytes() != budget_.workspace_bytes) {
    LOG(WARN, engine) << "workspace " << model_->workspace_bytes() << " B, planned "
                      << budget_.workspace_bytes << " B";
  }
  auto tok = Tokenizer::from_gguf(model_->file());
  if (!tok.ok()) return tok.error();
  tokenizer_ = std::move(*tok);

  const auto num_blocks = (uint32_t)budget_.num_blocks;
  const auto num_window_slots = (uint32_t)budget_.num_window_slots;
  arena_ = std::make_unique<KvArena>(
      model_->kv_config(num_blocks, cfg.block_size, cfg.kv_dtype, num_window_slots));
  if (arena_->bytes() != budget_.kv_pool_bytes) {
    LOG(WARN, engine) << "KV arena " << arena_->bytes() << " B, planned " << budget_.kv_pool_bytes
                      << " B";
  }
  KvManagerConfig kc{.num_blocks = num_blocks,
                     .block_size = cfg.block_size,
                     .enable_prefix_caching = cfg.enable_prefix_caching,
                     .watermark_blocks = cfg.watermark_blocks,
                     // Blocks behind the model's window are released as sequences advance
                     // (only when every layer is windowed: Gemma's global layers read them all).
                     .sliding_window = model_->hparams().kv_window(),
                     // Hybrid (gemma2/3, gpt-oss): the windowed layers' KV sits in window slots
                     // released behind the window; the global layers keep every block.
                     .hybrid_window = (int32_t)budget_.hybrid_window,
                     .num_window_slots = num_window_slots};
  KVW_RETURN_IF_ERROR(kc.validate());
  kv_ = std::make_unique<KvManager>(kc, arena_.get());
  if (cfg.kv_event_sink) kv_->record_kv_events();
  if (cfg.swap_bytes > 0) {
    auto swap = SwapSpace::open(SwapConfig{.path = cfg.swap_path,
                                           .swap_bytes = cfg.swap_bytes,
                                           .max_inflight_bytes = planner::kSwapStagingBytes},
                                arena_.get());
    if (!swap.ok()) return swap.error();
    kv_->attach_swap(std::move(*swap));
    LOG(INFO, engine) << "swap tier " << planner::format_bytes((int64_t)cfg.swap_bytes) << " at "
                      << cfg.swap_path;
  }
  sched_ = std::make_unique<Scheduler>(cfg.sched, kv_.get());
  if (draft_file != nullptr) {
    KVW_RETURN_IF_ERROR(load_draft(std::move(draft_file), std::move(*draft_hp), mo));
  }
  limits_ = EngineLimits{.max_model_len = sched_->max_model_len(),
                         .n_vocab = model_->hparams().n_vocab,
                         .max_num_seqs = cfg.sched.max_num_seqs,
                         .overflow = cfg.sched.overflow};
  queue_ = std::make_unique<RequestQueue>(cfg.request_queue_capacity);
  const int64_t rows = std::min<int64_t>(cfg.sched.max_num_seqs, cfg.sched.max_num_batched_tokens);
  // Speculative decodes need a row per draft too: the scheduler drafts at most
  // max_draft_tokens_per_step tokens a step, sized here from the budget's reserve row.
  // Prompt logprobs need a row per prompt position, max_prompt_logit_rows a step.
  const int64_t spec_rows = cfg.sched.spec.max_draft_tokens_per_step();
  logits_.resize((size_t)((rows + cfg.sched.extra_logit_rows()) * model_->hparams().n_vocab));
  // Drafted decodes' inputs, and prefill chunks copied across a shared prompt's end: at most
  // the step's tokens (4 B each: 8 KiB at 2,048), so reserved whole.
  step_tokens_.reserve((size_t)std::max<int64_t>(spec_rows + cfg.sched.spec.max_seqs,
                                                 cfg.sched.max_num_batched_tokens));
  inputs_.reserve((size_t)rows);
  sampled_.reserve((size_t)rows);
  sample_jobs_.reserve((size_t)rows);
  KVW_RETURN_IF_ERROR(lock_memory());
  LOG(INFO, engine) << num_blocks << " KV blocks of " << cfg.block_size << " tokens, "
                    << kv_dtype_name(cfg.kv_dtype) << ", max_model_len " << limits_.max_model_len
                    << ", " << model_->num_threads() << " threads";
  if (kc.hybrid_window > 0) {
    LOG(INFO, engine) << "hybrid window " << kc.hybrid_window << ": " << num_window_slots
                      << " window slots for the windowed layers (--swa-full keeps full KV)";
  }
  if (kc.sliding_window > 0) {
    LOG(INFO, engine) << "sliding window " << kc.sliding_window << ": blocks behind it are freed, "
                      << kv_->max_window_blocks() << " blocks per decoding sequence at most";
  }
  return Status::ok_status();
}

Status Engine::load_draft(std::unique_ptr<GgufFile> file, ModelHParams hp,
                          const ModelOptions& target_options) {
  DraftModelOptions o{.model = target_options,
                      .num_blocks = (uint32_t)budget_.num_blocks,
                      .block_size = cfg_.block_size,
                      .kv_dtype = cfg_.kv_dtype,
                      .max_seqs = cfg_.sched.spec.max_seqs};
  o.model.max_model_len = cfg_.sched.max_model_len;
  if (cfg_.draft_fault_hook) {
    o.fault_hook = [this](SeqId id) {
      cfg_.draft_fault_hook(index_of(id), sched_->find(id)->max_tokens);
    };
  }
  auto d = DraftModelProposer::create(std::move(file), std::move(hp), o);
  if (!d.ok()) return d.error();
  draft_ = std::move(*d);
  const uint64_t draft_work =
      draft_->model().workspace_bytes() + draft_->logits_bytes() + draft_->catch_up_bytes();
  if (draft_work != budget_.draft_workspace_bytes ||
      draft_->kv_pool_bytes() != budget_.draft_kv_pool_bytes) {
    LOG(WARN, engine) << "draft model: workspace + logits + catch-up " << draft_work << " B, KV "
                      << draft_->kv_pool_bytes() << " B; planned " << budget_.draft_workspace_bytes
                      << " B, " << budget_.draft_kv_pool_bytes << " B";
  }
  sched_->set_draft_proposer(draft_.get());
  LOG(INFO, engine) << "draft model " << cfg_.sched.spec.draft_model << ": up to "
                    << cfg_.sched.spec.num_speculative_tokens << " drafts for up to "
                    << cfg_.sched.spec.max_seqs << " sequences a step";
  return Status::ok_status();
}

Engine::~Engine() {
  shutdown();
}

Result<std::shared_ptr<TokenChannel>> Engine::submit(GenerationRequest req) {
  if (req.prompt.empty()) return Error{"empty prompt"};
  if (req.max_tokens < 1) return Error{"max_tokens must be >= 1"};
  if (req.prompt_logprobs < -1 || req.prompt_logprobs > kMaxLogprobs) {
    return Error{"prompt_logprobs must be in [-1, " + std::to_string(kMaxLogprobs) + "]"};
  }
  if (!(req.max_queue_wait_s >= 0)) return Error{"max_queue_wait_s must be >= 0"};
  const int32_t n_vocab = limits_.n_vocab;
  for (int32_t t : req.prompt) {
    if (t < 0 || t >= n_vocab) {
      return Error{"prompt token " + std::to_string(t) + " outside the vocabulary [0, " +
                   std::to_string(n_vocab) + ")"};
    }
  }
  // Validates before queueing.
  auto sampler =
      SeqSampler::create(req.sampling, n_vocab,
                         SeqShape{.end_of_generation_ids = tokenizer_->end_of_generation_ids(),
                                  .max_seq_tokens = (int64_t)req.prompt.size() + req.max_tokens});
  if (!sampler.ok()) return sampler.error();
  const uint64_t id = next_request_id_.fetch_add(1);
  auto channel = std::make_shared<TokenChannel>(id, req.max_tokens);
  auto deadline = std::chrono::steady_clock::time_point::max();
  // Past ~10 years it is no limit (and the sum below cannot overflow).
  if (req.max_queue_wait_s > 0 && req.max_queue_wait_s < 3e8) {
    deadline = std::chrono::steady_clock::now() +
               std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                   std::chrono::duration<double>(req.max_queue_wait_s));
  }
  PendingRequest p{.request_id = id,
                   .request = std::move(req),
                   .channel = channel,
                   .sampler = std::move(*sampler),
                   .first_token_deadline = deadline};
  if (!queue_->try_push(std::move(p))) {
    if (queue_->closed()) return Error{"engine is shut down", ErrorKind::kUnavailable};
    return Error{
        "request queue full (" + std::to_string(queue_->capacity()) + " waiting): retry later",
        ErrorKind::kOverloaded};
  }
  return channel;
}

bool Engine::cancel(uint64_t request_id) {
  return queue_->push_cancel(request_id);
}

void Engine::shutdown() {
  if (joined_.exchange(true)) return;
  if (!queue_) return;  // create() failed before the queue and thread existed
  queue_->close();
  if (thread_.joinable()) thread_.join();
}

const KvManager& Engine::kv_manager() const {
  CHECK(joined_.load() && !thread_.joinable()) << "kv_manager() while the engine thread runs";
  return *kv_;
}

const Scheduler& Engine::scheduler() const {
  CHECK(joined_.load() && !thread_.joinable()) << "scheduler() while the engine thread runs";
  return *sched_;
}

std::shared_ptr<const KvSnapshot> Engine::kv_snapshot(std::chrono::milliseconds timeout) const {
  const uint64_t generation = snapshot_box_.request();
  queue_->wake();
  return snapshot_box_.wait_newer(generation, timeout);
}

}  // namespace kvw
