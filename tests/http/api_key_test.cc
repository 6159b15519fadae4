// The --api-key check (issue 30): exact "Bearer <key>" only; no key set lets everything in.
#include "http/api_key.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <string>

namespace kvw::http {
namespace {

TEST(ApiKey, MatchesOnlyTheExactBearerHeader) {
  const ApiKey key("sk-abc");
  EXPECT_TRUE(key.required());
  EXPECT_TRUE(key.matches("Bearer sk-abc"));
  EXPECT_FALSE(key.matches(""));
  EXPECT_FALSE(key.matches("Bearer sk-ab"));    // a prefix
  EXPECT_FALSE(key.matches("Bearer sk-abcd"));  // longer
  EXPECT_FALSE(key.matches("Bearer sk-abC"));   // last byte differs
  EXPECT_FALSE(key.matches("bearer sk-abc"));   // scheme is compared as given
  EXPECT_FALSE(key.matches(std::string("Bearer sk-abc\0", 14)));
}

TEST(ApiKey, NoKeyLetsEverythingIn) {
  const ApiKey none("");
  EXPECT_FALSE(none.required());
  EXPECT_TRUE(none.matches(""));
  EXPECT_TRUE(none.matches("Bearer anything"));
}

TEST(ApiKey, ConstantTimeEqualsIsEquality) {
  EXPECT_TRUE(constant_time_equals("", ""));
  EXPECT_TRUE(constant_time_equals("abc", "abc"));
  EXPECT_FALSE(constant_time_equals("abc", "abd"));
  EXPECT_FALSE(constant_time_equals("abc", "ab"));
  EXPECT_FALSE(constant_time_equals("", "a"));
}

// The page a guess ends on is made unreadable; a read of it faults, and the handler notes the
// fault and makes the page readable so the read goes on.
char* g_guarded_page = nullptr;
size_t g_page_size = 0;
volatile sig_atomic_t g_tail_read = 0;

void on_segv(int, siginfo_t* info, void*) {
  char* addr = static_cast<char*>(info->si_addr);
  if (g_guarded_page == nullptr || addr < g_guarded_page || addr >= g_guarded_page + g_page_size) {
    signal(SIGSEGV, SIG_DFL);  // not ours: crash as usual
    return;
  }
  mprotect(g_guarded_page, g_page_size, PROT_READ);
  g_tail_read = 1;
}

// Whether key.matches(guess) reads the guess's last byte, for a guess laid out so that its
// last bytes sit on a page of their own.
bool reads_the_tail(const ApiKey& key, const std::string& guess) {
  g_page_size = (size_t)sysconf(_SC_PAGESIZE);
  const size_t pages = (guess.size() + 64) / g_page_size + 2;
  char* base = static_cast<char*>(mmap(nullptr, pages * g_page_size, PROT_READ | PROT_WRITE,
                                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  EXPECT_NE(base, MAP_FAILED);
  g_guarded_page = base + (pages - 1) * g_page_size;
  char* at = g_guarded_page + 16 - guess.size();  // its last 16 bytes on the guarded page
  std::memcpy(at, guess.data(), guess.size());
  struct sigaction sa {
  }, old{};
  sa.sa_sigaction = on_segv;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &old);
  g_tail_read = 0;
  mprotect(g_guarded_page, g_page_size, PROT_NONE);
  const bool matched = key.matches(std::string_view(at, guess.size()));
  sigaction(SIGSEGV, &old, nullptr);
  EXPECT_FALSE(matched);
  const bool read = g_tail_read != 0;
  g_guarded_page = nullptr;
  munmap(base, pages * g_page_size);
  return read;
}

// CWE-208: a guess wrong from its first byte is still compared to its last byte, so the time
// does not tell how many leading bytes were right. An early-exit comparison (==, memcmp,
// std::equal) stops within the first bytes and never touches the guarded page.
TEST(ApiKey, AWrongGuessIsReadToItsLastByte) {
  const std::string secret(5000, 'k');
  const ApiKey key(secret);
  EXPECT_TRUE(reads_the_tail(key, "Xearer " + secret)) << "same length, first byte wrong";
  EXPECT_TRUE(reads_the_tail(key, "Bearer " + secret.substr(1) + "X")) << "last byte wrong";
  EXPECT_TRUE(reads_the_tail(key, "X" + std::string(6000, 'k'))) << "longer than the key";
}

}  // namespace
}  // namespace kvw::http
