#pragma once
// The one main() of the benchmark programs (kvsim, the oracle, the residency
// probe, the llama-server load generator): run the program's body and turn an
// exception that escapes it into one line, "PROGRAM: what", on stderr and the
// program's failure status, instead of std::terminate's abort and core.

#include <exception>
#include <iostream>
#include <string_view>

namespace kvtier::bench {

template <class Body>
int guarded_main(std::string_view program, int failure_status, Body&& body) {
  try {
    return body();
  } catch (const std::exception& e) {
    std::cerr << program << ": " << e.what() << '\n';
    return failure_status;
  }
}

}  // namespace kvtier::bench
