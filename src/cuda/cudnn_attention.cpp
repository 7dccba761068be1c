// src/cuda/cudnn_attention.cpp — shardalg::cudnn: causal attention through cuDNN's scaled
// dot-product attention graphs (include/shardalg/backend/cuda/cudnn_attention.hpp says what and why).
//
// Per host thread: one cuDNN handle (bound to the caller's stream before each call) and the built
// graphs, keyed by the problem, so a training loop builds each graph once. Workspace comes from
// the device's memory pool (backend/cuda/allocator.hpp), stream-ordered.
#include <cstring>  // the frontend uses std::strlen without including it

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <array>
#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>

#include "shardalg/backend/cuda/allocator.hpp"
#include "shardalg/backend/cuda/cudnn_attention.hpp"
#include "shardalg/backend/cuda/error.hpp"

namespace shardalg::cuda::cudnn {
namespace {

namespace fe = cudnn_frontend;

enum Uid : std::int64_t { q_uid = 1, k_uid, v_uid, o_uid, lse_uid, do_uid, dq_uid, dk_uid, dv_uid };

[[noreturn]] void fail(const std::string& what) { throw CudaError("cuDNN attention: " + what); }

struct Handle {
  cudnnHandle_t h = nullptr;
  Handle() {
    if (const cudnnStatus_t s = cudnnCreate(&h); s != CUDNN_STATUS_SUCCESS)
      fail(std::string("cudnnCreate: ") + cudnnGetErrorString(s));
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() {
    if (h) cudnnDestroy(h);
  }
};

// Everything a graph depends on: device, direction, type, shape and every stride.
using Key = std::array<std::int64_t, 16>;
Key key_of(const AttnProblem& p, bool backward, int device) {
  return {device,      backward ? 1 : 0, p.bf16 ? 1 : 0, p.batch,      p.heads,      p.seq,
          p.head_dim,  p.qkv.batch,      p.qkv.head,     p.qkv.row,    p.out.batch,  p.out.head,
          p.out.row,   p.dqkv.batch,     p.dqkv.head,    p.dqkv.row};
}

struct Built {
  std::shared_ptr<fe::graph::Graph> graph;  // null: not supported (why says so)
  std::int64_t workspace = 0;
  std::string why;
};

struct ThreadState {
  std::unique_ptr<Handle> handle;
  std::map<Key, Built> graphs;
  cudnnHandle_t get(cudaStream_t stream) {
    if (!handle) handle = std::make_unique<Handle>();
    if (const cudnnStatus_t s = cudnnSetStream(handle->h, stream); s != CUDNN_STATUS_SUCCESS)
      fail(std::string("cudnnSetStream: ") + cudnnGetErrorString(s));
    return handle->h;
  }
};
ThreadState& state() {
  thread_local ThreadState s;
  return s;
}

std::vector<std::int64_t> dims(const AttnProblem& p) { return {p.batch, p.heads, p.seq, p.head_dim}; }
std::vector<std::int64_t> strides(const HeadsView& v) { return {v.batch, v.head, v.row, 1}; }

std::shared_ptr<fe::graph::Tensor_attributes> input(fe::graph::Graph& g, const char* name, std::int64_t uid,
                                                    const AttnProblem& p, const HeadsView& v) {
  return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(p)).set_stride(strides(v)));
}
std::shared_ptr<fe::graph::Tensor_attributes> lse_tensor(fe::graph::Graph& g, const AttnProblem& p) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name("L")
                      .set_uid(lse_uid)
                      .set_dim({p.batch, p.heads, p.seq, 1})
                      .set_stride({p.heads * p.seq, p.seq, 1, 1})
                      .set_data_type(fe::DataType_t::FLOAT));
}

std::shared_ptr<fe::graph::Graph> new_graph(const AttnProblem& p) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(p.bf16 ? fe::DataType_t::BFLOAT16 : fe::DataType_t::HALF)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}
float scale_of(const AttnProblem& p) { return 1.0f / std::sqrt(static_cast<float>(p.head_dim)); }

// Q·Kᵀ/√d, causal (query i sees keys 0…i), softmax, ·V; L for the backward.
std::shared_ptr<fe::graph::Graph> forward_graph(const AttnProblem& p) {
  auto g = new_graph(p);
  auto q = input(*g, "Q", q_uid, p, p.qkv), k = input(*g, "K", k_uid, p, p.qkv), v = input(*g, "V", v_uid, p, p.qkv);
  auto opts = fe::graph::SDPA_attributes()
                  .set_name("causal_attention")
                  .set_generate_stats(true)
                  .set_attn_scale(scale_of(p))
                  .set_causal_mask(true);
  auto [o, lse] = g->sdpa(q, k, v, opts);
  o->set_output(true).set_uid(o_uid).set_dim(dims(p)).set_stride(strides(p.out));
  lse->set_output(true).set_uid(lse_uid).set_data_type(fe::DataType_t::FLOAT).set_dim({p.batch, p.heads, p.seq, 1})
      .set_stride({p.heads * p.seq, p.seq, 1, 1});
  return g;
}

std::shared_ptr<fe::graph::Graph> backward_graph(const AttnProblem& p) {
  auto g = new_graph(p);
  auto q = input(*g, "Q", q_uid, p, p.qkv), k = input(*g, "K", k_uid, p, p.qkv), v = input(*g, "V", v_uid, p, p.qkv);
  auto o = input(*g, "O", o_uid, p, p.out), dout = input(*g, "dO", do_uid, p, p.out);
  auto lse = lse_tensor(*g, p);
  auto opts = fe::graph::SDPA_backward_attributes()
                  .set_name("causal_attention_backward")
                  .set_attn_scale(scale_of(p))
                  .set_causal_mask(true)
                  .set_deterministic_algorithm(true);
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, lse, opts);
  dq->set_output(true).set_uid(dq_uid).set_dim(dims(p)).set_stride(strides(p.dqkv));
  dk->set_output(true).set_uid(dk_uid).set_dim(dims(p)).set_stride(strides(p.dqkv));
  dv->set_output(true).set_uid(dv_uid).set_dim(dims(p)).set_stride(strides(p.dqkv));
  return g;
}

const Built& built(const AttnProblem& p, bool backward, cudaStream_t stream) {
  int device = 0;
  SHARDALG_CUDA_CHECK(cudaGetDevice(&device));
  ThreadState& st = state();
  const Key key = key_of(p, backward, device);
  if (auto it = st.graphs.find(key); it != st.graphs.end()) return it->second;
  Built b;
  const cudnnHandle_t h = st.get(stream);
  auto g = backward ? backward_graph(p) : forward_graph(p);
  const char* stage = "validate";
  fe::error_t e = g->validate();
  if (e.is_good()) stage = "build_operation_graph", e = g->build_operation_graph(h);
  if (e.is_good()) stage = "create_execution_plans", e = g->create_execution_plans({fe::HeurMode_t::A});
  if (e.is_good()) stage = "check_support", e = g->check_support(h);
  if (e.is_good()) stage = "build_plans", e = g->build_plans(h);
  if (e.is_good()) stage = "get_workspace_size", e = g->get_workspace_size(b.workspace);
  if (e.is_good()) b.graph = std::move(g);
  else b.why = std::string(backward ? "backward " : "forward ") + stage + ": " + e.get_message();
  return st.graphs.emplace(key, std::move(b)).first->second;
}

void run(const AttnProblem& p, bool backward, std::unordered_map<std::int64_t, void*>& pack, cudaStream_t stream) {
  const Built& b = built(p, backward, stream);
  if (!b.graph) fail(b.why);
  const cudnnHandle_t h = state().get(stream);
  void* ws = b.workspace > 0 ? device_allocate(static_cast<std::size_t>(b.workspace), stream) : nullptr;
  fe::error_t e = b.graph->execute(h, pack, ws);
  device_free(ws, stream, stream);
  if (!e.is_good()) fail(std::string(backward ? "backward execute: " : "forward execute: ") + e.get_message());
}

}  // namespace

bool supported(const AttnProblem& p, std::string* why) {
  cudaStream_t s = nullptr;  // building needs a handle, not a particular stream
  for (const bool backward : {false, true}) {
    const Built& b = built(p, backward, s);
    if (!b.graph) {
      if (why) *why = b.why;
      return false;
    }
  }
  return true;
}

void forward(const AttnProblem& p, const void* q, const void* k, const void* v, void* o, float* lse,
             cudaStream_t stream) {
  std::unordered_map<std::int64_t, void*> pack{{q_uid, const_cast<void*>(q)}, {k_uid, const_cast<void*>(k)},
                                               {v_uid, const_cast<void*>(v)}, {o_uid, o}, {lse_uid, lse}};
  run(p, false, pack, stream);
}

void backward(const AttnProblem& p, const void* q, const void* k, const void* v, const void* o, const void* dout,
              const float* lse, void* dq, void* dk, void* dv, cudaStream_t stream) {
  std::unordered_map<std::int64_t, void*> pack{
      {q_uid, const_cast<void*>(q)},   {k_uid, const_cast<void*>(k)},      {v_uid, const_cast<void*>(v)},
      {o_uid, const_cast<void*>(o)},   {do_uid, const_cast<void*>(dout)},  {lse_uid, const_cast<float*>(lse)},
      {dq_uid, dq},                    {dk_uid, dk},                       {dv_uid, dv}};
  run(p, true, pack, stream);
}

std::size_t version() { return cudnnGetVersion(); }

}  // namespace shardalg::cuda::cudnn
