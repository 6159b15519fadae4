#include "kv/swap_space.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/check.h"
#include "core/log.h"
#include "core/thread_name.h"

namespace kvw {
namespace {

std::string errno_text(int err) {
  return std::strerror(err);
}

// The swap file as a plain fd with pread/pwrite loops (retrying EINTR and partial transfers).
class PosixBlockFile final : public BlockFile {
 public:
  PosixBlockFile(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  ~PosixBlockFile() override { ::close(fd_); }

  Status write_at(uint64_t offset, std::span<const uint8_t> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n =
          ::pwrite(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("write", offset, data.size(), errno_text(errno));
      if (n == 0) return io_error("write", offset, data.size(), "short write");
      done += static_cast<size_t>(n);
    }
    return Status::ok_status();
  }

  Status read_at(uint64_t offset, std::span<uint8_t> data) override {
    size_t done = 0;
    while (done < data.size()) {
      ssize_t n =
          ::pread(fd_, data.data() + done, data.size() - done, static_cast<off_t>(offset + done));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return io_error("read", offset, data.size(), errno_text(errno));
      if (n == 0) return io_error("read", offset, data.size(), "short read (end of file)");
      done += static_cast<size_t>(n);
    }
    return Status::ok_status();
  }

 private:
  Error io_error(const char* what, uint64_t offset, size_t size, const std::string& why) const {
    return Error{"swap file " + path_ + ": " + what + " of " + std::to_string(size) +
                 " bytes at offset " + std::to_string(offset) + " failed: " + why};
  }

  std::string path_;
  int fd_;
};

Status validate_config(const SwapConfig& config, uint64_t bpb) {
  const std::string where = "swap file " + config.path + ": ";
  if (bpb == 0 || config.swap_bytes < bpb) {
    return Error{where + "swap space of " + std::to_string(config.swap_bytes) +
                 " bytes holds no block of " + std::to_string(bpb) + " bytes"};
  }
  if (config.max_inflight_bytes < bpb) {
    return Error{where + "max in-flight bytes " + std::to_string(config.max_inflight_bytes) +
                 " is below one block (" + std::to_string(bpb) + " bytes)"};
  }
  if (config.swap_bytes / bpb > UINT32_MAX) {
    return Error{where + std::to_string(config.swap_bytes / bpb) + " slots exceed 2^32"};
  }
  return Status::ok_status();
}

}  // namespace

Result<std::unique_ptr<BlockFile>> open_posix_block_file(const std::string& path,
                                                         uint64_t size_bytes) {
  const std::string where = "swap file " + path + ": ";
  // A private file even when two processes (servers, parallel tests) name the same path: a
  // unique suffix, mode 0600, unlinked below. Opening `path` itself let a second process open
  // the first one's inode before its unlink, and the two overwrote each other's swapped KV.
  std::string unique = path + ".XXXXXX";
  int fd = ::mkostemp(unique.data(), O_CLOEXEC);
  if (fd < 0) return Error{where + "cannot create: " + errno_text(errno)};
  // posix_fallocate returns the error number instead of setting errno.
  int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size_bytes));
  if (err != 0) {
    ::close(fd);
    ::unlink(unique.c_str());
    if (err == ENOSPC) {
      return Error{where + "no space left on device: needs " + std::to_string(size_bytes) +
                   " bytes"};
    }
    return Error{where + "cannot preallocate " + std::to_string(size_bytes) +
                 " bytes: " + errno_text(err)};
  }
  // Unlink now: the fd keeps the space, and nothing is left behind after a crash.
  if (::unlink(unique.c_str()) != 0) {
    LOG(WARN, kv) << where << "cannot unlink " << unique << ": " << errno_text(errno);
  }
  return std::unique_ptr<BlockFile>(std::make_unique<PosixBlockFile>(path, fd));
}

Result<std::unique_ptr<SwapSpace>> SwapSpace::open(const SwapConfig& config, KvStorage* storage) {
  CHECK(storage != nullptr);
  const uint64_t bpb = storage->bytes_per_block();
  KVW_RETURN_IF_ERROR(validate_config(config, bpb));
  // Preallocate only whole slots.
  auto file = open_posix_block_file(config.path, config.swap_bytes / bpb * bpb);
  if (!file.ok()) return file.error();
  return open_with_file(config, storage, std::move(file).value());
}

Result<std::unique_ptr<SwapSpace>> SwapSpace::open_with_file(const SwapConfig& config,
                                                             KvStorage* storage,
                                                             std::unique_ptr<BlockFile> file) {
  CHECK(storage != nullptr && file != nullptr);
  const uint64_t bpb = storage->bytes_per_block();
  KVW_RETURN_IF_ERROR(validate_config(config, bpb));
  const uint64_t num_slots = config.swap_bytes / bpb;
  const uint64_t num_ops = std::min<uint64_t>(config.max_inflight_bytes / bpb, num_slots);
  LOG(INFO, kv) << "swap space: " << num_slots << " slots x " << bpb << " bytes at " << config.path
                << ", " << num_ops << " staging buffers (" << ((num_ops * bpb) >> 10) << " KiB)";
  return std::make_unique<SwapSpace>(PassKey(), storage, std::move(file),
                                     static_cast<uint32_t>(num_slots),
                                     static_cast<uint32_t>(num_ops));
}

SwapSpace::SwapSpace(PassKey, KvStorage* storage, std::unique_ptr<BlockFile> file,
                     uint32_t num_slots, uint32_t num_ops)
    : storage_(storage),
      file_(std::move(file)),
      bytes_per_slot_(storage->bytes_per_block()),
      slot_state_(num_slots, SlotState::kFree),
      ops_(num_ops),
      // Zeroed, so its pages are touched now: the budget's swap_stage row is paid at start-up.
      staging_(std::make_unique<uint8_t[]>(num_ops * bytes_per_slot_)),
      queue_(num_ops) {
  // Pop order 0, 1, 2, ... so that tests see predictable slot ids.
  free_slots_.reserve(num_slots);
  for (uint32_t i = num_slots; i > 0; --i) free_slots_.push_back(i - 1);
  free_ops_.reserve(num_ops);
  for (uint32_t i = num_ops; i > 0; --i) free_ops_.push_back(i - 1);
  counters_.num_slots_total = num_slots;
  worker_ = std::thread([this] {
    set_thread_name("kvw-swap");
    worker_loop();
  });
}

SwapSpace::~SwapSpace() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  work_cv_.notify_one();
  worker_.join();
}

std::span<uint8_t> SwapSpace::staging(uint32_t op_index) {
  return {staging_.get() + op_index * bytes_per_slot_, bytes_per_slot_};
}

uint32_t SwapSpace::claim_op(SwapOp kind, SwapSlot slot, BlockId block) {
  uint32_t i = free_ops_.back();
  free_ops_.pop_back();
  Op& op = ops_[i];
  CHECK(!op.in_use) << "op " << i;
  op.kind = kind;
  op.ticket = SwapTicket{next_ticket_++};
  op.slot = slot;
  op.block = block;
  op.in_use = true;
  op.status = Status::ok_status();
  ++counters_.num_inflight;
  return i;
}

void SwapSpace::enqueue(uint32_t op_index) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CHECK(queue_size_ < queue_.size());
    ops_[op_index].done = false;
    queue_[(queue_head_ + queue_size_) % queue_.size()] = op_index;
    ++queue_size_;
  }
  work_cv_.notify_one();
}

SwapSubmission SwapSpace::swap_out(BlockId src) {
  if (free_slots_.empty()) {
    ++counters_.num_no_slots;
    return {.outcome = SwapSubmit::kNoSlots};
  }
  if (free_ops_.empty()) {
    ++counters_.num_busy;
    return {.outcome = SwapSubmit::kBusy};
  }
  const uint32_t s = free_slots_.back();
  free_slots_.pop_back();
  CHECK(slot_state_[s] == SlotState::kFree) << "slot " << s;
  slot_state_[s] = SlotState::kWriting;
  ++counters_.num_slots_used;
  const uint32_t i = claim_op(SwapOp::kOut, SwapSlot{s}, src);
  // Copy on the engine thread (one memcpy, ~0.1 ms per MiB) so the block is free to reuse at
  // once; letting the worker read it would need the block pinned until completion.
  storage_->read_block(src, staging(i));
  enqueue(i);
  return {.outcome = SwapSubmit::kOk, .ticket = ops_[i].ticket, .slot = SwapSlot{s}};
}

SwapSubmission SwapSpace::swap_in(SwapSlot slot, BlockId dst) {
  const uint32_t s = index_of(slot);
  CHECK(s < slot_state_.size()) << "slot " << s;
  CHECK(slot_state_[s] == SlotState::kStored)
      << "slot " << s << " is not stored (state " << static_cast<int>(slot_state_[s]) << ")";
  if (free_ops_.empty()) {
    ++counters_.num_busy;
    return {.outcome = SwapSubmit::kBusy};
  }
  slot_state_[s] = SlotState::kReading;
  const uint32_t i = claim_op(SwapOp::kIn, slot, dst);
  enqueue(i);
  return {.outcome = SwapSubmit::kOk, .ticket = ops_[i].ticket, .slot = slot};
}

void SwapSpace::free_slot(SwapSlot slot) {
  const uint32_t s = index_of(slot);
  CHECK(s < slot_state_.size()) << "slot " << s;
  CHECK(slot_state_[s] == SlotState::kStored)
      << "free_slot(" << s << ") in state " << static_cast<int>(slot_state_[s]);
  slot_state_[s] = SlotState::kFree;
  free_slots_.push_back(s);
  --counters_.num_slots_used;
}

// Applies a finished op on the engine thread and returns its op index to the pool.
SwapCompletion SwapSpace::finish_op(uint32_t op_index) {
  Op& op = ops_[op_index];
  const uint32_t s = index_of(op.slot);
  SwapCompletion c{.ticket = op.ticket,
                   .op = op.kind,
                   .slot = op.slot,
                   .block = op.block,
                   .status = std::move(op.status)};
  if (c.status.ok()) {
    slot_state_[s] = SlotState::kStored;
    if (op.kind == SwapOp::kOut) {
      counters_.bytes_out += bytes_per_slot_;
      ++counters_.num_swap_out;
    } else {
      storage_->write_block(op.block, staging(op_index));
      counters_.bytes_in += bytes_per_slot_;
      ++counters_.num_swap_in;
    }
  } else {
    // The slot's contents are unknown now: release it; the caller recomputes the block.
    ++counters_.num_errors;
    LOG(WARN, kv) << (op.kind == SwapOp::kOut ? "swap_out" : "swap_in") << " of block "
                  << index_of(op.block) << " (slot " << s << ") failed: " << c.status.message();
    slot_state_[s] = SlotState::kFree;
    free_slots_.push_back(s);
    --counters_.num_slots_used;
  }
  op.in_use = false;
  op.status = Status::ok_status();
  free_ops_.push_back(op_index);
  --counters_.num_inflight;
  return c;
}

std::vector<SwapCompletion> SwapSpace::poll() {
  std::vector<SwapCompletion> out;
  if (counters_.num_inflight == 0) return out;
  std::vector<std::pair<uint64_t, uint32_t>> finished;  // (ticket, op index)
  {
    std::lock_guard<std::mutex> lock(mutex_);
    for (uint32_t i = 0; i < ops_.size(); ++i) {
      if (ops_[i].in_use && ops_[i].done) finished.emplace_back(index_of(ops_[i].ticket), i);
    }
  }
  std::sort(finished.begin(), finished.end());
  out.reserve(finished.size());
  for (const auto& f : finished) out.push_back(finish_op(f.second));
  return out;
}

SwapCompletion SwapSpace::wait(SwapTicket ticket) {
  uint32_t i = 0;
  while (i < ops_.size() && !(ops_[i].in_use && ops_[i].ticket == ticket)) ++i;
  CHECK(i < ops_.size()) << "wait: ticket " << index_of(ticket) << " is not in flight";
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return ops_[i].done; });
  }
  return finish_op(i);
}

void SwapSpace::worker_loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || queue_size_ > 0; });
    if (stop_) return;  // queued ops are dropped: nobody will poll them
    const uint32_t i = queue_[queue_head_];
    queue_head_ = (queue_head_ + 1) % queue_.size();
    --queue_size_;
    lock.unlock();
    run_io(i);
    lock.lock();
    ops_[i].done = true;
    done_cv_.notify_all();
  }
}

// Worker thread: touches only the file, op i's staging buffer and op i's status.
void SwapSpace::run_io(uint32_t op_index) {
  Op& op = ops_[op_index];
  const uint64_t offset = uint64_t{index_of(op.slot)} * bytes_per_slot_;
  op.status = op.kind == SwapOp::kOut ? file_->write_at(offset, staging(op_index))
                                      : file_->read_at(offset, staging(op_index));
}

void SwapSpace::check_invariants() const {
  uint32_t used = 0;
  for (SlotState st : slot_state_) used += st != SlotState::kFree;
  CHECK(used == counters_.num_slots_used) << used << " vs " << counters_.num_slots_used;
  CHECK(used + free_slots_.size() == slot_state_.size())
      << used << " used + " << free_slots_.size() << " free != " << slot_state_.size();
  for (uint32_t s : free_slots_) CHECK(slot_state_[s] == SlotState::kFree) << "slot " << s;
  uint32_t inflight = 0;
  for (const Op& op : ops_) {
    if (!op.in_use) continue;
    ++inflight;
    const SlotState st = slot_state_[index_of(op.slot)];
    CHECK(st == (op.kind == SwapOp::kOut ? SlotState::kWriting : SlotState::kReading))
        << "ticket " << index_of(op.ticket) << " slot " << index_of(op.slot);
  }
  CHECK(inflight == counters_.num_inflight && inflight + free_ops_.size() == ops_.size());
}

}  // namespace kvw
