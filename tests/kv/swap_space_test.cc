#include "kv/swap_space.h"

#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <csignal>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <vector>

namespace kvw {
namespace {

// First-tier double: num_blocks blocks of bytes_per_block bytes in one vector.
class FakeKvStorage final : public KvStorage {
 public:
  FakeKvStorage(uint32_t num_blocks, uint64_t bytes_per_block)
      : num_blocks_(num_blocks), bpb_(bytes_per_block), data_(num_blocks * bytes_per_block) {}
  uint32_t num_blocks() const override { return num_blocks_; }
  uint64_t bytes_per_block() const override { return bpb_; }
  void copy_block(BlockId src, BlockId dst) override {
    std::memcpy(block(dst).data(), block(src).data(), bpb_);
  }
  void read_block(BlockId b, std::span<uint8_t> out) const override {
    ASSERT_EQ(out.size(), bpb_);
    std::memcpy(out.data(), data_.data() + index_of(b) * bpb_, bpb_);
  }
  void write_block(BlockId b, std::span<const uint8_t> in) override {
    ASSERT_EQ(in.size(), bpb_);
    std::memcpy(block(b).data(), in.data(), bpb_);
  }
  std::span<uint8_t> block(BlockId b) { return {data_.data() + index_of(b) * bpb_, bpb_}; }
  void fill_random(BlockId b, std::mt19937& rng) {
    for (uint8_t& x : block(b)) x = static_cast<uint8_t>(rng());
  }

 private:
  uint32_t num_blocks_;
  uint64_t bpb_;
  std::vector<uint8_t> data_;
};

// In-memory backing store with injectable faults and a gate that holds the worker inside I/O.
class FaultyBlockFile final : public BlockFile {
 public:
  struct Knobs {
    std::atomic<bool> fail_writes{false};
    std::atomic<bool> fail_reads{false};
    std::atomic<int> delay_ms{0};
    std::atomic<int> num_started{0};
    std::mutex mu;
    std::condition_variable cv;
    bool gate_open = true;  // guarded by mu
    void close_gate() {
      std::lock_guard<std::mutex> l(mu);
      gate_open = false;
    }
    void open_gate() {
      {
        std::lock_guard<std::mutex> l(mu);
        gate_open = true;
      }
      cv.notify_all();
    }
  };
  FaultyBlockFile(uint64_t size, Knobs* knobs) : bytes_(size), knobs_(knobs) {}

  Status write_at(uint64_t offset, std::span<const uint8_t> data) override {
    enter();
    if (knobs_->fail_writes) return Error{"swap file fake: write failed: No space left on device"};
    if (offset + data.size() > bytes_.size()) return Error{"write past end"};
    std::memcpy(bytes_.data() + offset, data.data(), data.size());
    return Status::ok_status();
  }
  Status read_at(uint64_t offset, std::span<uint8_t> data) override {
    enter();
    if (knobs_->fail_reads) return Error{"swap file fake: read failed: Input/output error"};
    if (offset + data.size() > bytes_.size()) return Error{"read past end"};
    std::memcpy(data.data(), bytes_.data() + offset, data.size());
    return Status::ok_status();
  }

 private:
  void enter() {
    ++knobs_->num_started;
    std::unique_lock<std::mutex> l(knobs_->mu);
    knobs_->cv.wait(l, [&] { return knobs_->gate_open; });
    l.unlock();
    if (int ms = knobs_->delay_ms; ms > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    }
  }
  std::vector<uint8_t> bytes_;
  Knobs* knobs_;
};

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "kvw_swap_" + std::to_string(::getpid()) + "_" + name;
}

// Odd block size on purpose: slots must not assume page alignment.
constexpr uint64_t kBpb = 4096 + 40;

std::unique_ptr<SwapSpace> open_fake(FakeKvStorage* storage, FaultyBlockFile::Knobs* knobs,
                                     uint32_t num_slots, uint32_t max_inflight_blocks) {
  SwapConfig config{.path = "fake",
                    .swap_bytes = num_slots * kBpb,
                    .max_inflight_bytes = max_inflight_blocks * kBpb};
  auto file = std::make_unique<FaultyBlockFile>(config.swap_bytes, knobs);
  auto swap = SwapSpace::open_with_file(config, storage, std::move(file));
  EXPECT_TRUE(swap.ok()) << swap.message();
  return std::move(swap).value();
}

// Submits until accepted, polling between tries the way the engine does once per step.
SwapSubmission submit_out(SwapSpace& swap, BlockId b, std::vector<SwapCompletion>* done) {
  while (true) {
    SwapSubmission s = swap.swap_out(b);
    if (s.outcome != SwapSubmit::kBusy) return s;
    for (auto& c : swap.poll()) done->push_back(std::move(c));
  }
}

TEST(SwapSpace, RoundTripManyBlocksThroughRealFileIsByteIdentical) {
  constexpr uint32_t kN = 48;
  FakeKvStorage storage(2 * kN, kBpb);
  std::mt19937 rng(7);
  for (uint32_t b = 0; b < kN; ++b) storage.fill_random(BlockId{b}, rng);
  const std::vector<uint8_t> original(storage.block(BlockId{0}).data(),
                                      storage.block(BlockId{0}).data() + kN * kBpb);
  SwapConfig config{.path = temp_path("roundtrip"),
                    .swap_bytes = kN * kBpb + 100,
                    .max_inflight_bytes = 4 * kBpb};
  auto opened = SwapSpace::open(config, &storage);
  ASSERT_TRUE(opened.ok()) << opened.message();
  SwapSpace& swap = **opened;
  EXPECT_EQ(swap.counters().num_slots_total, kN);  // the extra 100 bytes make no slot

  std::vector<SwapSlot> slot_of(kN);
  std::vector<SwapCompletion> done;
  for (uint32_t b = 0; b < kN; ++b) {
    SwapSubmission s = submit_out(swap, BlockId{b}, &done);
    ASSERT_EQ(s.outcome, SwapSubmit::kOk);
    slot_of[b] = s.slot;
    // The engine may reuse the block at once: the bytes were staged at submission.
    storage.fill_random(BlockId{b}, rng);
    EXPECT_LE(swap.counters().num_inflight, 4u);
    swap.check_invariants();
  }
  while (swap.counters().num_inflight > 0) {
    for (auto& c : swap.poll()) done.push_back(std::move(c));
  }
  ASSERT_EQ(done.size(), kN);
  for (const auto& c : done) EXPECT_TRUE(c.status.ok()) << c.status.message();
  EXPECT_EQ(swap.counters().bytes_out, kN * kBpb);

  // Swap back in, into different blocks (kN + b), in reverse order.
  done.clear();
  for (uint32_t k = kN; k > 0; --k) {
    const uint32_t b = k - 1;
    while (swap.swap_in(slot_of[b], BlockId{kN + b}).outcome == SwapSubmit::kBusy) {
      for (auto& c : swap.poll()) done.push_back(std::move(c));
    }
  }
  while (swap.counters().num_inflight > 0) {
    for (auto& c : swap.poll()) done.push_back(std::move(c));
  }
  ASSERT_EQ(done.size(), kN);
  for (uint32_t b = 0; b < kN; ++b) {
    auto restored = storage.block(BlockId{kN + b});
    ASSERT_EQ(std::memcmp(restored.data(), original.data() + b * kBpb, kBpb), 0) << "block " << b;
  }
  EXPECT_EQ(swap.counters().bytes_in, kN * kBpb);
  EXPECT_EQ(swap.counters().num_swap_in, kN);
  EXPECT_EQ(swap.counters().num_errors, 0u);
  for (SwapSlot s : slot_of) swap.free_slot(s);
  EXPECT_EQ(swap.counters().num_slots_used, 0u);
  swap.check_invariants();
}

TEST(SwapSpace, SwapFileExistsOnlyAsAnOpenDescriptor) {
  FakeKvStorage storage(1, kBpb);
  const std::string path = temp_path("unlinked");
  auto swap = SwapSpace::open({.path = path, .swap_bytes = 4 * kBpb}, &storage);
  ASSERT_TRUE(swap.ok()) << swap.message();
  struct stat st;
  EXPECT_NE(::stat(path.c_str(), &st), 0) << path << " should be unlinked after open";
}

TEST(SwapSpace, SubmissionBeyondInflightBoundReturnsBusy) {
  FakeKvStorage storage(8, kBpb);
  FaultyBlockFile::Knobs knobs;
  knobs.close_gate();  // the worker blocks inside its first write
  auto swap = open_fake(&storage, &knobs, /*num_slots=*/8, /*max_inflight_blocks=*/3);
  std::vector<SwapTicket> tickets;
  for (uint32_t b = 0; b < 3; ++b) {
    SwapSubmission s = swap->swap_out(BlockId{b});
    ASSERT_EQ(s.outcome, SwapSubmit::kOk);
    EXPECT_EQ(index_of(s.slot), b);
    tickets.push_back(s.ticket);
  }
  EXPECT_EQ(swap->swap_out(BlockId{3}).outcome, SwapSubmit::kBusy);
  EXPECT_EQ(swap->counters().num_busy, 1u);
  EXPECT_EQ(swap->counters().num_slots_used, 3u);  // a busy refusal takes no slot
  EXPECT_TRUE(swap->poll().empty());
  swap->check_invariants();

  knobs.open_gate();
  SwapCompletion c = swap->wait(tickets[1]);
  EXPECT_EQ(c.ticket, tickets[1]);
  EXPECT_TRUE(c.status.ok());
  EXPECT_EQ(swap->swap_out(BlockId{3}).outcome, SwapSubmit::kOk);  // one op freed by wait()
  while (swap->counters().num_inflight > 0) {
    for (const auto& d : swap->poll()) EXPECT_NE(d.ticket, tickets[1]);  // not reported twice
  }
  EXPECT_EQ(swap->counters().num_swap_out, 4u);
  swap->check_invariants();
}

TEST(SwapSpace, SlotExhaustionReturnsNoSlotsUntilASlotIsFreed) {
  FakeKvStorage storage(8, kBpb);
  FaultyBlockFile::Knobs knobs;
  auto swap = open_fake(&storage, &knobs, /*num_slots=*/4, /*max_inflight_blocks=*/8);
  std::vector<SwapTicket> tickets;
  for (uint32_t b = 0; b < 4; ++b) tickets.push_back(swap->swap_out(BlockId{b}).ticket);
  EXPECT_EQ(swap->swap_out(BlockId{4}).outcome, SwapSubmit::kNoSlots);
  EXPECT_EQ(swap->counters().num_no_slots, 1u);
  for (SwapTicket t : tickets) ASSERT_TRUE(swap->wait(t).status.ok());
  EXPECT_EQ(swap->swap_out(BlockId{4}).outcome, SwapSubmit::kNoSlots);  // stored slots stay used
  swap->free_slot(SwapSlot{2});
  SwapSubmission s = swap->swap_out(BlockId{4});
  EXPECT_EQ(s.outcome, SwapSubmit::kOk);
  EXPECT_EQ(index_of(s.slot), 2u);
  EXPECT_TRUE(swap->wait(s.ticket).status.ok());
  EXPECT_EQ(swap->num_free_slots(), 0u);
  swap->check_invariants();
}

TEST(SwapSpace, UnwritablePathGivesCleanErrorNamingThePath) {
  FakeKvStorage storage(1, kBpb);
  const std::string missing_dir = "/nonexistent-kvw-dir/sub/swap.bin";
  auto r = SwapSpace::open({.path = missing_dir, .swap_bytes = 4 * kBpb}, &storage);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "swap file " + missing_dir + ": cannot create: No such file or directory");

  const std::string under_file = "/dev/null/swap.bin";
  r = SwapSpace::open({.path = under_file, .swap_bytes = 4 * kBpb}, &storage);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.message(), "swap file " + under_file + ": cannot create: Not a directory");

  if (::geteuid() != 0) {  // root ignores directory permissions
    const std::string dir = temp_path("readonly_dir");
    ASSERT_EQ(::mkdir(dir.c_str(), 0500), 0);
    r = SwapSpace::open({.path = dir + "/swap.bin", .swap_bytes = 4 * kBpb}, &storage);
    ::rmdir(dir.c_str());
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.message(), "swap file " + dir + "/swap.bin: cannot create: Permission denied");
  }
}

TEST(SwapSpace, ConfigWithoutRoomForOneBlockIsRejected) {
  FakeKvStorage storage(1, kBpb);
  auto r = SwapSpace::open({.path = temp_path("tiny"), .swap_bytes = kBpb - 1}, &storage);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("holds no block"), std::string::npos) << r.message();
  r = SwapSpace::open(
      {.path = temp_path("tiny2"), .swap_bytes = 4 * kBpb, .max_inflight_bytes = kBpb / 2},
      &storage);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("max in-flight bytes"), std::string::npos) << r.message();
}

// A real file-system refusal at start-up: RLIMIT_FSIZE below the swap size makes
// posix_fallocate fail with EFBIG, as a full disk would with ENOSPC. Run in a child process so
// the limit does not leak into other tests.
// Child-process body: prints the open() error and exits 0 only if open failed and left no file.
[[noreturn]] void open_under_file_size_limit(const std::string& path) {
  std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
  rlimit lim{.rlim_cur = 64 * 1024, .rlim_max = 64 * 1024};
  if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) std::_Exit(2);
  FakeKvStorage storage(1, kBpb);
  auto r = SwapSpace::open({.path = path, .swap_bytes = 256 * kBpb}, &storage);
  struct stat st;
  const bool left_behind = ::stat(path.c_str(), &st) == 0;
  std::fprintf(stderr, "%s\n", r.ok() ? "opened" : r.message().c_str());
  std::_Exit(!r.ok() && !left_behind ? 0 : 1);
}

TEST(SwapSpace, PreallocationBeyondFileSizeLimitFailsAtOpen) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // re-exec: no fork of a threaded process
  EXPECT_EXIT(open_under_file_size_limit(temp_path("fsize")), ::testing::ExitedWithCode(0),
              "swap file .*fsize: cannot preallocate 1058816 bytes: File too large");
}

TEST(SwapSpace, WriteErrorCompletesTicketWithErrorAndFreesSlot) {
  FakeKvStorage storage(4, kBpb);
  std::mt19937 rng(3);
  storage.fill_random(BlockId{0}, rng);
  FaultyBlockFile::Knobs knobs;
  auto swap = open_fake(&storage, &knobs, /*num_slots=*/4, /*max_inflight_blocks=*/4);
  SwapSubmission good = swap->swap_out(BlockId{0});
  ASSERT_TRUE(swap->wait(good.ticket).status.ok());

  knobs.fail_writes = true;
  SwapSubmission bad = swap->swap_out(BlockId{1});
  ASSERT_EQ(bad.outcome, SwapSubmit::kOk);
  EXPECT_EQ(swap->counters().num_slots_used, 2u);
  std::vector<SwapCompletion> done;
  while (done.empty()) done = swap->poll();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].ticket, bad.ticket);
  EXPECT_EQ(done[0].block, BlockId{1});
  EXPECT_FALSE(done[0].status.ok());
  EXPECT_NE(done[0].status.message().find("No space left on device"), std::string::npos);
  EXPECT_EQ(swap->counters().num_errors, 1u);
  EXPECT_EQ(swap->counters().num_slots_used, 1u);  // the failed slot is released
  EXPECT_EQ(swap->counters().num_swap_out, 1u);
  swap->check_invariants();

  // Nothing else is affected: the earlier slot still restores byte-identical data.
  knobs.fail_writes = false;
  SwapSubmission in = swap->swap_in(good.slot, BlockId{3});
  ASSERT_TRUE(swap->wait(in.ticket).status.ok());
  EXPECT_EQ(std::memcmp(storage.block(BlockId{3}).data(), storage.block(BlockId{0}).data(), kBpb),
            0);
  SwapSubmission again = swap->swap_out(BlockId{1});
  EXPECT_EQ(again.slot, bad.slot);  // the freed slot is reused
  EXPECT_TRUE(swap->wait(again.ticket).status.ok());
  swap->check_invariants();
}

TEST(SwapSpace, ReadErrorReleasesSlotAndLeavesDestinationUntouched) {
  FakeKvStorage storage(2, kBpb);
  std::mt19937 rng(5);
  storage.fill_random(BlockId{0}, rng);
  storage.fill_random(BlockId{1}, rng);
  const std::vector<uint8_t> dst_before(storage.block(BlockId{1}).begin(),
                                        storage.block(BlockId{1}).end());
  FaultyBlockFile::Knobs knobs;
  auto swap = open_fake(&storage, &knobs, /*num_slots=*/2, /*max_inflight_blocks=*/2);
  SwapSubmission out = swap->swap_out(BlockId{0});
  ASSERT_TRUE(swap->wait(out.ticket).status.ok());
  knobs.fail_reads = true;
  SwapSubmission in = swap->swap_in(out.slot, BlockId{1});
  SwapCompletion c = swap->wait(in.ticket);
  EXPECT_FALSE(c.status.ok());
  EXPECT_EQ(c.op, SwapOp::kIn);
  EXPECT_NE(c.status.message().find("Input/output error"), std::string::npos);
  EXPECT_TRUE(std::equal(dst_before.begin(), dst_before.end(), storage.block(BlockId{1}).begin()));
  EXPECT_EQ(swap->counters().num_slots_used, 0u);
  EXPECT_EQ(swap->num_free_slots(), 2u);
  swap->check_invariants();
}

TEST(PosixBlockFile, ReadPastPreallocatedSizeIsAShortReadError) {
  const std::string path = temp_path("short");
  auto file = open_posix_block_file(path, 2 * kBpb);
  ASSERT_TRUE(file.ok()) << file.message();
  std::vector<uint8_t> buf(kBpb, 0xab);
  ASSERT_TRUE((*file)->write_at(kBpb, buf).ok());
  std::vector<uint8_t> back(kBpb);
  ASSERT_TRUE((*file)->read_at(kBpb, back).ok());
  EXPECT_EQ(back, buf);
  Status st = (*file)->read_at(2 * kBpb - 8, back);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.message(), "swap file " + path + ": read of 4136 bytes at offset 8264 failed: " +
                              "short read (end of file)");
}

TEST(SwapSpace, DestructionWithCopiesInFlightJoinsCleanly) {
  FakeKvStorage storage(16, kBpb);
  FaultyBlockFile::Knobs knobs;
  knobs.delay_ms = 20;
  {
    auto swap = open_fake(&storage, &knobs, /*num_slots=*/16, /*max_inflight_blocks=*/16);
    for (uint32_t b = 0; b < 16; ++b) {
      ASSERT_EQ(swap->swap_out(BlockId{b}).outcome, SwapSubmit::kOk);
    }
    while (knobs.num_started == 0) std::this_thread::yield();
  }  // joins after the current op; the 15 queued ops are dropped
  EXPECT_LT(knobs.num_started.load(), 16);

  // Same with a real file and no delay: queue, then destroy at once.
  const std::string path = temp_path("teardown");
  auto swap = SwapSpace::open({.path = path, .swap_bytes = 16 * kBpb}, &storage);
  ASSERT_TRUE(swap.ok()) << swap.message();
  for (uint32_t b = 0; b < 16; ++b) (void)(*swap)->swap_out(BlockId{b});
  swap.value().reset();
}

}  // namespace
}  // namespace kvw
