// kv/swap_space.h: the second KV tier. Blocks evicted or preempted from the first tier
// (KvStorage) are copied into fixed-size slots of a swap file on local disk and copied back later,
// asynchronously, on one worker thread, with a bounded number of bytes in flight.
// Owner: the KV manager. Thread safety: every public method is engine-thread-only. The worker
// touches only the BlockFile and the staging buffers of the ops it was handed; KvStorage is never
// touched off the engine thread. All mutex/condvar code of the swap tier lives in this class
// (swap_space.cc): one mutex guards the work queue and the per-op `done` flags, nothing else.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "core/ids.h"
#include "core/status.h"
#include "kv/kv_storage.h"

namespace kvw {

enum class SwapSlot : uint32_t {};    // a bytes_per_block region of the swap file
enum class SwapTicket : uint64_t {};  // one submitted copy; numbered from 1 in submission order

constexpr uint32_t index_of(SwapSlot s) {
  return static_cast<uint32_t>(s);
}
constexpr uint64_t index_of(SwapTicket t) {
  return static_cast<uint64_t>(t);
}

// Positional I/O on the backing store. Only the swap worker calls write_at/read_at, one call at a
// time. Abstract so that tests can inject disk faults (ENOSPC, EIO, short writes).
class BlockFile {
 public:
  virtual ~BlockFile() = default;
  // Writes/reads exactly data.size() bytes at `offset`, or returns an error naming the file.
  virtual Status write_at(uint64_t offset, std::span<const uint8_t> data) = 0;
  virtual Status read_at(uint64_t offset, std::span<uint8_t> data) = 0;
};

// Creates (or truncates) `path`, preallocates `size_bytes` with posix_fallocate so that a full
// disk shows up now rather than mid-run, then unlinks the path: the space lives exactly as long
// as the returned object, and a crash leaves no multi-GiB file behind.
// Errors: "swap file /x/y: cannot create: Permission denied",
//         "swap file /x/y: no space left on device: needs 1073741824 bytes".
Result<std::unique_ptr<BlockFile>> open_posix_block_file(const std::string& path,
                                                         uint64_t size_bytes);

struct SwapConfig {
  std::string path;         // swap file location (on local disk)
  uint64_t swap_bytes = 0;  // --swap-space: file budget, rounded down to whole slots
  uint64_t max_inflight_bytes = 64ull << 20;  // staging pool size = bound on bytes in flight
};

enum class SwapOp { kOut, kIn };

// Expected outcomes of a submission (return values, not errors): kBusy means the in-flight bound
// is reached (retry next step), kNoSlots means the swap file is full (recompute instead).
enum class SwapSubmit { kOk, kBusy, kNoSlots };

struct SwapSubmission {
  SwapSubmit outcome = SwapSubmit::kOk;
  SwapTicket ticket{0};  // valid only when outcome == kOk
  SwapSlot slot{0};      // swap_out: the slot the block goes to (owned by the caller once ok)
};

struct SwapCompletion {
  SwapTicket ticket{0};
  SwapOp op = SwapOp::kOut;
  SwapSlot slot{0};
  BlockId block = kNullBlock;  // swap_out: source block; swap_in: destination block
  Status status;               // error: the slot has been released; the caller recomputes
};

struct SwapCounters {
  uint64_t bytes_out = 0;       // successful swap_out bytes
  uint64_t bytes_in = 0;        // successful swap_in bytes
  uint64_t num_swap_out = 0;    // successful swap_out ops
  uint64_t num_swap_in = 0;     // successful swap_in ops
  uint64_t num_errors = 0;      // ops completed with a disk error
  uint64_t num_busy = 0;        // submissions refused by the in-flight bound
  uint64_t num_no_slots = 0;    // swap_out submissions refused because every slot is used
  uint32_t num_slots_used = 0;  // writing, stored or being read
  uint32_t num_slots_total = 0;
  uint32_t num_inflight = 0;  // submitted ops not yet returned by poll()/wait()
};

// Slot lifecycle (engine thread):
//
//   kFree --swap_out--> kWriting --ok--> kStored --swap_in--> kReading --ok--> kStored
//     ^                    |  error        |  ^                   |  error
//     +--------------------+---------------+--+-------------------+
//                                 free_slot()
//
// A slot leaves kWriting/kReading only when poll() or wait() returns its completion; any disk
// error returns the slot to kFree, so the caller must forget it and recompute that block.
class SwapSpace {
  struct PassKey {  // lets open() use make_unique while keeping construction private
    explicit PassKey() = default;
  };

 public:
  // `storage` must outlive the SwapSpace; its bytes_per_block() is the slot size.
  // Fails on a bad config or if the file cannot be created/preallocated (message names the path).
  static Result<std::unique_ptr<SwapSpace>> open(const SwapConfig& config, KvStorage* storage);
  // Same, over a caller-provided backing store of at least swap_bytes bytes (tests, fault
  // injection). config.path is used only in messages.
  static Result<std::unique_ptr<SwapSpace>> open_with_file(const SwapConfig& config,
                                                           KvStorage* storage,
                                                           std::unique_ptr<BlockFile> file);
  // Use open(); PassKey keeps this constructor private to it.
  SwapSpace(PassKey, KvStorage* storage, std::unique_ptr<BlockFile> file, uint32_t num_slots,
            uint32_t num_ops);
  // Stops the worker after its current op (queued ops are dropped, their results discarded) and
  // joins it; then the file is closed, which frees its disk space.
  ~SwapSpace();
  SwapSpace(const SwapSpace&) = delete;
  SwapSpace& operator=(const SwapSpace&) = delete;

  // Copies block `src` out to a newly allocated slot. The bytes are read from KvStorage into a
  // staging buffer before this returns, so `src` may be freed or overwritten immediately (what
  // eviction needs); the worker then writes the slot. Never allocates memory.
  SwapSubmission swap_out(BlockId src);
  // Copies stored slot `slot` into block `dst`: the worker reads into staging, and the poll()/
  // wait() that returns the completion writes `dst` through KvStorage (engine thread). `dst` must
  // stay reserved until then. The slot stays stored (free it with free_slot, or keep it as a
  // cached copy). CHECKs that `slot` is kStored. Outcome is kOk or kBusy.
  SwapSubmission swap_in(SwapSlot slot, BlockId dst);
  // Releases a stored slot. CHECKs that no copy of it is in flight.
  void free_slot(SwapSlot slot);

  // Returns every finished op in ticket order, after applying it (swap_in data written to its
  // block; failed ops' slots released). Never blocks; call once per engine step.
  std::vector<SwapCompletion> poll();
  // Blocks until `ticket` (submitted, not yet returned) finishes; returns and applies it. Other
  // finished ops stay for poll().
  SwapCompletion wait(SwapTicket ticket);

  uint64_t bytes_per_slot() const { return bytes_per_slot_; }
  uint32_t num_free_slots() const { return static_cast<uint32_t>(free_slots_.size()); }
  const SwapCounters& counters() const { return counters_; }
  // CHECKs free list + used slots == total and that every in-flight op owns a busy slot.
  void check_invariants() const;

 private:
  enum class SlotState : uint8_t { kFree, kWriting, kStored, kReading };
  struct Op {
    SwapOp kind = SwapOp::kOut;
    SwapTicket ticket{0};
    SwapSlot slot{0};
    BlockId block = kNullBlock;
    bool in_use = false;  // engine thread: submitted and not yet returned
    bool done = false;    // guarded by mutex_: the worker finished the I/O
    Status status;        // written by the worker before `done`, read by the engine after
  };

  std::span<uint8_t> staging(uint32_t op_index);
  uint32_t claim_op(SwapOp kind, SwapSlot slot, BlockId block);
  void enqueue(uint32_t op_index);
  SwapCompletion finish_op(uint32_t op_index);
  void worker_loop();
  void run_io(uint32_t op_index);

  KvStorage* storage_;
  std::unique_ptr<BlockFile> file_;
  uint64_t bytes_per_slot_;

  // Engine thread only.
  std::vector<SlotState> slot_state_;  // [num_slots]
  std::vector<uint32_t> free_slots_;   // stack of free slot indices: O(1) allocate and free
  std::vector<uint32_t> free_ops_;     // stack of unused op indices (= staging buffers)
  std::vector<Op> ops_;                // [num_ops]; op i owns staging buffer i
  uint64_t next_ticket_ = 1;
  SwapCounters counters_;

  // [num_ops][bytes_per_slot] u8, allocated once at open: no allocation per copy.
  std::unique_ptr<uint8_t[]> staging_;

  // Shared with the worker; guarded by mutex_.
  std::mutex mutex_;
  std::condition_variable work_cv_;  // worker: queue non-empty or stop_
  std::condition_variable done_cv_;  // wait(): some op finished
  std::vector<uint32_t> queue_;      // ring of op indices, capacity num_ops (never overflows)
  uint32_t queue_head_ = 0;
  uint32_t queue_size_ = 0;
  bool stop_ = false;

  std::thread worker_;  // last member: started after everything above is built
};

}  // namespace kvw
