// tests/http_torture/torture_main.cc: gtest main for the torture and load suites. Takes
// --kvwarden=PATH (the binary under test) and raises the open-file limit so 1000 client sockets
// plus the server's own fit (the server child inherits the raised limit).
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <string>

#include "server_process.h"

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const std::string flag = "--kvwarden=";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind(flag, 0) == 0) kvw::torture::set_kvwarden_bin(a.substr(flag.size()));
  }
  if (kvw::torture::kvwarden_bin().empty()) {
    std::fprintf(stderr, "usage: %s --kvwarden=PATH [gtest flags]\n", argv[0]);
    return 2;
  }
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) == 0 && lim.rlim_cur < 4096) {
    lim.rlim_cur = std::min<rlim_t>(4096, lim.rlim_max);
    ::setrlimit(RLIMIT_NOFILE, &lim);
  }
  return RUN_ALL_TESTS();
}
