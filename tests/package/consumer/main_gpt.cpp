// A downstream program that links shardalg::compiled: the GPT's code, the thread world and the
// ledger come from the installed static library (SHARDALG_EXTERN_TEMPLATES), one step of a tiny
// model at TP 2 on a ledgered group.
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
  std::size_t collectives = 0;
  run_ranks(2, [&](ThreadComm& comm) {
    Ledger ledger;
    auto model = nn::Gpt<double>::init(c, ledgered(comm, ledger));
    nn::Adam<double> adam({1e-3, 0.9, 0.999, 1e-8, 0.0});
    const double l = model.forward_backward(x, y);
    model.step(adam, 1.0);
    if (comm.rank() == 0) loss = l, collectives = ledger.count();
  });
  std::cout << "consumer_compiled: loss " << loss << ", " << collectives << " collectives recorded\n";
  return std::isfinite(loss) && loss > 0 && collectives > 0 ? 0 : 1;
}
