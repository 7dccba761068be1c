// The README's twenty-line program's math in plain Eigen + std::thread (4 ranks, column/row split, one all-reduce).
#include <Eigen/Core>
#include <iostream>
#include <thread>
#include <vector>
#include <mutex>
#include <barrier>
using M = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
int main() {
  const M X = M::Random(8, 16), W1 = M::Random(16, 64), W2 = M::Random(64, 16);
  const int P = 4;
  std::vector<M> partial(P);
  std::barrier sync(P);
  M y;
  std::vector<std::thread> ts;
  for (int r = 0; r < P; ++r)
    ts.emplace_back([&, r] {
      const Eigen::Index w = 64 / P;
      M h = X * W1.middleCols(r * w, w);
      M a = h.unaryExpr([](double v) { return v > 0 ? v : 0.0; });
      partial[r] = a * W2.middleRows(r * w, w);
      sync.arrive_and_wait();
      if (r == 0) {
        y = partial[0];
        for (int s = 1; s < P; ++s) y += partial[s];
        const M ref = (X * W1).cwiseMax(0.0) * W2;
        std::cout << "max rel error " << (y - ref).cwiseAbs().maxCoeff() / ref.cwiseAbs().maxCoeff() << "\n";
      }
    });
  for (auto& t : ts) t.join();
}
