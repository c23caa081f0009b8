#include "agent/sources/latest_job_thread.hpp"

#include <pthread.h>
#include <spdlog/spdlog.h>

#include <exception>
#include <functional>
#include <mutex>
#include <utility>

namespace kvtier::agent {

LatestJobThread::~LatestJobThread() {
  {
    const std::scoped_lock lock(mu_);
    quit_ = true;
    if (waiting_) ++replaced_;
    waiting_ = nullptr;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LatestJobThread::post(std::function<void()> job) {
  {
    const std::scoped_lock lock(mu_);
    if (waiting_) ++replaced_;
    waiting_ = std::move(job);
    if (!thread_.joinable()) {
      thread_ = std::thread([this] { run(); });
      pthread_setname_np(thread_.native_handle(), name_.substr(0, 15).c_str());
    }
  }
  cv_.notify_all();
}

void LatestJobThread::drop_waiting() {
  const std::scoped_lock lock(mu_);
  if (waiting_) ++replaced_;
  waiting_ = nullptr;
  cv_.notify_all();
}

void LatestJobThread::wait_idle() {
  std::unique_lock lock(mu_);
  cv_.wait(lock, [this] { return !running_ && !waiting_; });
}

bool LatestJobThread::idle() const {
  const std::scoped_lock lock(mu_);
  return !running_ && !waiting_;
}

std::uint64_t LatestJobThread::ran() const {
  const std::scoped_lock lock(mu_);
  return ran_;
}

std::uint64_t LatestJobThread::replaced() const {
  const std::scoped_lock lock(mu_);
  return replaced_;
}

void LatestJobThread::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [this] { return quit_ || waiting_; });
    if (quit_) return;
    std::function<void()> job = std::exchange(waiting_, nullptr);
    running_ = true;
    lock.unlock();
    try {
      job();
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", name_, e.what());
    }
    lock.lock();
    running_ = false;
    ++ran_;
    cv_.notify_all();
  }
}

}  // namespace kvtier::agent
