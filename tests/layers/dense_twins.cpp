// tests/layers/dense_twins.cpp — the dense twins in double (dense_twins.hpp), compiled once here.
#include "dense_twins.hpp"

namespace ref {

template Mat<double> linear<double>(const Mat<double>&, const Mat<double>&, const Mat<double>&, Split);
template LinearGradsOf<double> linear_backward<double>(const Mat<double>&, const Mat<double>&, const Mat<double>&, Split);
template MlpOutOf<double> mlp_forward<double>(const MlpOf<double>&, const Mat<double>&);
template MlpGradsOf<double> mlp_backward<double>(const MlpOf<double>&, const Mat<double>&, const MlpOutOf<double>&,
                                                 const Mat<double>&);
template NormOutOf<double> norm_forward<double>(const NormOf<double>&, const Mat<double>&);
template NormGradsOf<double> norm_backward<double>(const NormOf<double>&, const NormOutOf<double>&, const Mat<double>&);
template AttnOutOf<double> attn_forward<double>(const AttnOf<double>&, const Mat<double>&);
template AttnGradsOf<double> attn_backward<double>(const AttnOf<double>&, const Mat<double>&, const AttnOutOf<double>&,
                                                   const Mat<double>&);
template Mat<double> dropout<double>(const Mat<double>&, double, std::uint64_t, std::uint64_t);
template BlockOutOf<double> block_forward<double>(const BlockOf<double>&, const Mat<double>&);
template BlockGradsOf<double> block_backward<double>(const BlockOf<double>&, const Mat<double>&, const BlockOutOf<double>&,
                                                     const Mat<double>&);

}  // namespace ref
