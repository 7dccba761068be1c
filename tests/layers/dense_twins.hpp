// tests/layers/dense_twins.hpp — the dense twins (shardalg/reference/dense_layers.hpp) in double,
// compiled once per executable: the files of layers_thread that use them include this header, and
// dense_twins.cpp instantiates them. (The block alone is about 135 MiB of a compiler's memory.)
#pragma once

#include "shardalg/reference/dense_layers.hpp"

namespace ref {

extern template Mat<double> linear<double>(const Mat<double>&, const Mat<double>&, const Mat<double>&, Split);
extern template LinearGradsOf<double> linear_backward<double>(const Mat<double>&, const Mat<double>&, const Mat<double>&,
                                                              Split);
extern template MlpOutOf<double> mlp_forward<double>(const MlpOf<double>&, const Mat<double>&);
extern template MlpGradsOf<double> mlp_backward<double>(const MlpOf<double>&, const Mat<double>&, const MlpOutOf<double>&,
                                                        const Mat<double>&);
extern template NormOutOf<double> norm_forward<double>(const NormOf<double>&, const Mat<double>&);
extern template NormGradsOf<double> norm_backward<double>(const NormOf<double>&, const NormOutOf<double>&, const Mat<double>&);
extern template AttnOutOf<double> attn_forward<double>(const AttnOf<double>&, const Mat<double>&);
extern template AttnGradsOf<double> attn_backward<double>(const AttnOf<double>&, const Mat<double>&, const AttnOutOf<double>&,
                                                          const Mat<double>&);
extern template Mat<double> dropout<double>(const Mat<double>&, double, std::uint64_t, std::uint64_t);
extern template BlockOutOf<double> block_forward<double>(const BlockOf<double>&, const Mat<double>&);
extern template BlockGradsOf<double> block_backward<double>(const BlockOf<double>&, const Mat<double>&, const BlockOutOf<double>&,
                                                            const Mat<double>&);

}  // namespace ref
