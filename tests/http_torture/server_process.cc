// tests/http_torture/server_process.cc: see server_process.h.
#include "server_process.h"

#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>

#include "raw_http.h"

namespace kvw::torture {
namespace {

std::string g_kvwarden_bin;

// fork + exec rather than posix_spawn so the child can ask to be killed with us: a test killed
// by a CTest timeout must not leave a server holding a port and a core.
pid_t spawn(const std::vector<std::string>& argv, int out_fd) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid != 0) return pid;  // parent (or -1)
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(127);  // the parent died before prctl took effect
  int null_fd = ::open("/dev/null", O_RDWR);
  ::dup2(null_fd, 0);
  ::dup2(out_fd >= 0 ? out_fd : null_fd, 1);
  ::dup2(out_fd >= 0 ? out_fd : null_fd, 2);
  ::execv(args[0], args.data());
  ::_exit(127);
}

}  // namespace

const std::string& kvwarden_bin() {
  return g_kvwarden_bin;
}
void set_kvwarden_bin(std::string path) {
  g_kvwarden_bin = std::move(path);
}

int run_command(const std::vector<std::string>& argv) {
  pid_t pid = spawn(argv, -1);
  if (pid < 0) return -1;
  int status = 0;
  if (::waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TempDir::TempDir() {
  std::string tmpl = (std::filesystem::temp_directory_path() / "kvw-torture-XXXXXX").string();
  path_ = ::mkdtemp(tmpl.data()) ? tmpl : std::string();
}

TempDir::~TempDir() {
  std::error_code ec;
  if (!path_.empty()) std::filesystem::remove_all(path_, ec);
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exit_status_) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    ::waitpid(pid_, &status, 0);
  }
  if (reader_.joinable()) reader_.join();
}

std::optional<std::string> ServerProcess::start(const std::string& model,
                                                const std::vector<std::string>& extra,
                                                std::chrono::seconds timeout) {
  port_ = free_port();
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return "pipe failed";
  std::vector<std::string> argv = {kvwarden_bin(), "serve",     "--model", model,
                                   "--host",       "127.0.0.1", "--port",  std::to_string(port_)};
  argv.insert(argv.end(), extra.begin(), extra.end());
  pid_ = spawn(argv, fds[1]);
  ::close(fds[1]);
  out_fd_ = fds[0];
  if (pid_ < 0) return "could not spawn " + kvwarden_bin();
  reader_ = std::thread([this] {
    char buf[4096];
    for (;;) {
      ssize_t n = ::read(out_fd_, buf, sizeof(buf));
      if (n < 0 && errno == EINTR) continue;
      std::lock_guard lock(mu_);
      if (n <= 0) {
        output_closed_ = true;
        cv_.notify_all();
        break;
      }
      output_.append(buf, static_cast<size_t>(n));
      cv_.notify_all();
    }
    ::close(out_fd_);
  });
  std::unique_lock lock(mu_);
  bool ready = cv_.wait_for(lock, timeout, [&] {
    return output_closed_ || output_.find("kvwarden serving ") != std::string::npos;
  });
  size_t at = output_.find("kvwarden serving ");
  if (!ready || at == std::string::npos || output_.find(" on http://", at) == std::string::npos) {
    return "no ready line from kvwarden serve; output:\n" + output_;
  }
  return std::nullopt;
}

void ServerProcess::reap(int status) {
  exit_status_ = status;
}

bool ServerProcess::alive() {
  if (pid_ <= 0 || exit_status_) return false;
  int status = 0;
  if (::waitpid(pid_, &status, WNOHANG) == pid_) {
    reap(status);
    return false;
  }
  return true;
}

int ServerProcess::stop(std::chrono::seconds grace) {
  if (!alive()) return exit_status_.value_or(-1);
  ::kill(pid_, SIGTERM);
  const auto end = Clock::now() + grace;
  while (Clock::now() < end) {
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) {
      reap(status);
      return status;
    }
    std::this_thread::sleep_for(Millis{50});
  }
  ::kill(pid_, SIGKILL);
  int status = 0;
  ::waitpid(pid_, &status, 0);
  reap(status);
  return -1;
}

std::string ServerProcess::output() {
  std::lock_guard lock(mu_);
  return output_;
}

}  // namespace kvw::torture
