// tern: command-line entry point.
#include <cstdio>

int main() {
  std::puts("tern " TERN_VERSION);
  return 0;
}
