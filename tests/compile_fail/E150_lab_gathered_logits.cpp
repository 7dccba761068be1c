// Break-it lab 4 (docs/course/break_it/04_gathered_logits.md): gathered logits fed to the vocab-parallel
// cross-entropy. Its two all-reduces assume each rank holds its own vocabulary columns; with the
// whole logits on every rank the sum of exponentials is P times too big: loss = correct + log P.
// The loss takes logits[C]; an R there is E150.
#include <shardalg/autodiff.hpp>
#include <shardalg/shardalg.hpp>

using namespace shardalg;

int main() {
  Group g(SelfComm{});
  ad::Tape t;
  auto logits = t.input(shard<ColSharded>(CpuBackend::matrix<double>::Random(4, 16), g));
  const std::vector<std::int64_t> targets{1, 5, 9, 3};
  nn::VocabParallelCrossEntropy<double> ce(16);
#ifdef SHARDALG_EXPECT_FAIL
  auto loss = ad::cross_entropy(ad::all_gather(logits), targets, ce);
#else
  auto loss = ad::cross_entropy(logits, targets, ce);
#endif
  (void)loss;
}
