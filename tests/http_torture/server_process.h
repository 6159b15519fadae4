// tests/http_torture/server_process.h: runs `kvwarden serve` as a child process for the torture
// tests: picks a free port, waits for the "kvwarden serving MODEL on http://HOST:PORT" line, keeps
// draining its output (so a chatty server never blocks on a full pipe), and stops it with SIGTERM.
// Owned by one test suite; a reader thread appends to the captured output under a mutex.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace kvw::torture {

// Path of the kvwarden binary (set by main from --kvwarden=PATH).
const std::string& kvwarden_bin();
void set_kvwarden_bin(std::string path);

// Runs a command to completion with stdout/stderr discarded; returns its exit status or -1.
int run_command(const std::vector<std::string>& argv);

// A fresh temporary directory, removed with its contents by the destructor.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

class ServerProcess {
 public:
  ServerProcess() = default;
  ~ServerProcess();  // SIGKILLs a server that is still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  // Starts `kvwarden serve --model MODEL --host 127.0.0.1 --port P EXTRA...`; returns an error
  // text (with the server's output) when it exits or prints no ready line within `timeout`.
  std::optional<std::string> start(const std::string& model, const std::vector<std::string>& extra,
                                   std::chrono::seconds timeout = std::chrono::seconds{60});
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }
  bool alive();  // the process has not exited
  // SIGTERM, then waits up to `grace` (SIGKILL after); returns the wait status, or -1 if killed.
  int stop(std::chrono::seconds grace = std::chrono::seconds{20});
  std::string output();

 private:
  void reap(int status);

  pid_t pid_ = -1;
  uint16_t port_ = 0;
  int out_fd_ = -1;
  std::thread reader_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::string output_;          // guarded by mu_
  bool output_closed_ = false;  // guarded by mu_
  std::optional<int> exit_status_;
};

}  // namespace kvw::torture
