// The CPU pool's channels-first loops alone, float32 with int32 indices, windows of 2 with
// stride 2, on one thread: no XLA, no thread pool, so that a change to ffi/cpu/max_pool.cc
// can be judged by its instruction count, which does not move with the machine's load
// (issue 47: docs/performance.md, "The 3-D channels-first pool").
//
//   g++ -std=c++17 -O3 -falign-loops=64 -w -Iffi -Iffi/third_party \
//       -o /tmp/pool_rows benchmarks/pool_rows.cc
//   /tmp/pool_rows 3 1 64 16 28 28 20    # rank, N, C, spatial sizes, calls: the fastest call
//   valgrind --tool=cachegrind --cache-sim=no /tmp/pool_rows 3 1 64 16 28 28 1
//
// Instructions per input element: run cachegrind with 1 and with 3 calls, and divide the
// difference of their "I refs" by 2 and by the element count.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "cpu/max_pool.cc"

int main(int argc, char** argv) {
  using jax_unpool::Geometry;
  const int k = argc > 4 ? std::atoi(argv[1]) : 0;
  if (k < 1 || k > 3 || argc != 5 + k) {
    std::fprintf(stderr, "usage: pool_rows RANK N C SIZE... CALLS\n");
    return 2;
  }
  Geometry g;
  g.k = k;
  g.N = std::atoll(argv[2]);
  g.C = std::atoll(argv[3]);
  for (int a = 3 - k; a < 3; ++a) {
    g.in[a] = std::atoll(argv[4 + a - (3 - k)]);
    g.kernel[a] = g.stride[a] = 2;
    g.out[a] = g.in[a] / 2;
  }
  const int calls = std::atoi(argv[4 + k]);
  const int64_t n = g.planes() * g.in_plane(), m = g.planes() * g.out_plane();
  std::vector<float> x(n), values(m);
  std::vector<int32_t> indices(m);
  std::mt19937 rng(0);
  std::normal_distribution<float> normal;
  for (float& e : x) e = normal(rng);
  const jax_unpool::Pool<jax_unpool::NativeOrder<float>, int32_t> pool(
      g, {}, x.data(), values.data(), indices.data());
  double fastest = 1e9;
  for (int c = 0; c < calls; ++c) {
    const auto start = std::chrono::steady_clock::now();
    pool.Rows(0, g.planes() * g.out[0] * g.out[1]);
    fastest = std::min(fastest, std::chrono::duration<double>(
                                    std::chrono::steady_clock::now() - start).count());
  }
  // Checked against a plain scan of each window in (d, h, w) order (no NaN in x).
  int64_t wrong = 0;
  for (int64_t p = 0; p < g.planes(); ++p) {
    for (int64_t o = 0; o < g.out_plane(); ++o) {
      const int64_t od = o / (g.out[1] * g.out[2]), oh = o / g.out[2] % g.out[1],
                    ow = o % g.out[2];
      int64_t best = -1;
      for (int64_t t = 0; t < g.kernel[0] * g.kernel[1] * g.kernel[2]; ++t) {
        const int64_t i = ((od * g.stride[0] + t / (g.kernel[1] * g.kernel[2])) * g.in[1] +
                           oh * g.stride[1] + t / g.kernel[2] % g.kernel[1]) * g.in[2] +
                          ow * g.stride[2] + t % g.kernel[2];
        if (best < 0 || x[p * g.in_plane() + i] > x[p * g.in_plane() + best]) best = i;
      }
      const int64_t at = p * g.out_plane() + o;
      wrong += indices[at] != best || values[at] != x[p * g.in_plane() + best];
    }
  }
  const double bytes = 4.0 * static_cast<double>(n + 2 * m);  // x, values, indices
  std::printf("%.3f ms, %.1f ns per KB moved, %lld of %lld results unlike a plain scan\n",
              1e3 * fastest, 1e12 * fastest / bytes, static_cast<long long>(wrong),
              static_cast<long long>(m));
  return wrong == 0 ? 0 : 1;
}
