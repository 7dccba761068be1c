// src/moe.cpp — shardalg::compiled: nn::Moe<float | double, CpuBackend>, every member, and from_dense
// of Eigen::MatrixXd masters (the dense twin's, reference/moe.hpp).
#include <Eigen/Core>

#include "shardalg/nn/layers/moe.hpp"

#if !defined(SHARDALG_EXTERN_TEMPLATES)
#error "src/ is compiled by the shardalg_compiled target, which defines SHARDALG_EXTERN_TEMPLATES"
#endif

namespace shardalg::nn {
template class Moe<float, CpuBackend>;
template class Moe<double, CpuBackend>;
template Moe<float, CpuBackend> Moe<float, CpuBackend>::from_dense(const MoeConfig&, const MoeMasters<Eigen::MatrixXd>&,
                                                                   const Mesh&);
template Moe<double, CpuBackend> Moe<double, CpuBackend>::from_dense(const MoeConfig&,
                                                                     const MoeMasters<Eigen::MatrixXd>&, const Mesh&);
}  // namespace shardalg::nn
