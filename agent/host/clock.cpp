#include "agent/host/clock.hpp"

#include <chrono>
#include <thread>

#include <time.h>

#include "policy/types.hpp"

namespace kvtier::agent {

TimeNs monotonic_now() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

void sleep_for_ns(TimeNs ns) {
  std::this_thread::sleep_for(std::chrono::nanoseconds(ns));
}

TimeNs thread_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

TimeNs process_cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<TimeNs>(ts.tv_sec) * 1'000'000'000ULL + static_cast<TimeNs>(ts.tv_nsec);
}

double process_cpu_seconds() {
  return static_cast<double>(process_cpu_now()) / 1e9;
}

}  // namespace kvtier::agent
