// A downstream program that links shardalg::compiled: the GPT's code comes from the installed
// static library (SHARDALG_EXTERN_TEMPLATES), one step of a tiny model at TP 2.
#include <shardalg/nn.hpp>

#include <cmath>
#include <cstdint>
#include <iostream>
#include <vector>

int main() {
  using namespace shardalg;
  nn::GptConfig c;
  c.vocab = 32;
  c.hidden = 16;
  c.heads = 2;
  c.layers = 1;
  c.seq = 4;
  c.batch = 2;
  std::vector<std::int64_t> x(8), y(8);
  for (int i = 0; i < 8; ++i) x[i] = i % c.vocab, y[i] = (i + 1) % c.vocab;
  double loss = 0;
  run_ranks(2, [&](ThreadComm& comm) {
    auto model = nn::Gpt<double>::init(c, Group(comm));
    nn::Adam<double> adam({1e-3, 0.9, 0.999, 1e-8, 0.0});
    const double l = model.forward_backward(x, y);
    model.step(adam, 1.0);
    if (comm.rank() == 0) loss = l;
  });
  std::cout << "consumer_compiled: loss " << loss << "\n";
  return std::isfinite(loss) && loss > 0 ? 0 : 1;
}
