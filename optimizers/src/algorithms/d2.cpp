// D²: decentralized SGD corrected with the previous iterate and gradient, so
// that non-IID data leave no bias at a constant step, with no extra bytes.
// Tang, Lian, Yan, Zhang and Liu, "D²: Decentralized Training over
// Decentralized Data", ICML 2018, Algorithm 1 and Theorem 1.
//
// Algorithm 1 mixes x_{t+1/2} = 2 x_t - x_{t-1} - lr (g_t - g_{t-1}) (x_{1/2} =
// x_0 - lr g_0) with a symmetric doubly stochastic W. Writing a_t = x_t -
// lr d_t for the model after the local step (d_t: what the local optimizer
// applied, the gradient for plain SGD, the velocity with momentum), the same
// vector is a_t + (x_t - a_{t-1}): the local step plus the correction c_t =
// x_t - a_{t-1}, what the last mix moved the model by. So each step:
//   1. the local step gives a_t (step(), or the caller's optimizer);
//   2. mixParameters: b = a_t + c_t (c_0 = 0), x_{t+1} = W b by one round of
//      the base's gossip, then c_{t+1} = x_{t+1} - a_t.
// Summed over the ranks the corrections telescope: the mean model moves by
// -lr times the mean of d_t, exactly as centralized SGD, and at a fixed point
// the average gradient is 0. Theorem 1 needs a fixed W, symmetric, with its
// smallest eigenvalue above -1/3; checkMixing refuses a topology that does
// not hold it (the ring with weights 1/3 on an even number of ranks has
// exactly -1/3; topology.self_weight 0.5 gives it 0). A W that changes from
// round to round is refused too: measured on the Fashion-MNIST MLP (8 peers,
// Dirichlet 0.1), D² over random pairings diverged (consensus distance 1e23)
// where it reached 84.65% over the fixed ring.
//
// Bytes on the wire per step: the base's, Crossover-SGD's exchange of the P
// elements (4P bytes per rank with float32). Memory: 2P floats (a_t, c_t).
// Sync mode and an exchange every step only (the correction assumes this
// step's mix). Registered as
// algorithm.name d2 with algorithm.base crossover_sgd (sgp is refused: its
// push-sum matrix is not symmetric).
#include <Eigen/Core>
#include <Eigen/Eigenvalues>
#include <algorithm>
#include <cmath>
#include <sstream>

#include "gossamer/checkpoint.hpp"
#include "gossamer/errors.hpp"
#include "gossamer/optimizers/heterogeneity.hpp"
#include "gossamer/registry.hpp"
#include "gossip_config.hpp"

namespace gossamer::optimizers {

namespace {
Eigen::Map<Eigen::VectorXf> vec(float* p, std::size_t n) { return {p, static_cast<Eigen::Index>(n)}; }

// Smallest eigenvalue of the symmetric `w`: the Gershgorin bound when it
// settles the question (the fair roulette's pairings: 0), else computed.
double smallestEigenvalue(const Eigen::MatrixXd& w) {
  double bound = 1.0;
  for (Eigen::Index i = 0; i < w.rows(); ++i)
    bound = std::min(bound, w(i, i) - (w.row(i).cwiseAbs().sum() - std::abs(w(i, i))));
  if (bound > -1.0 / 3.0) return bound;
  Eigen::SelfAdjointEigenSolver<Eigen::MatrixXd> solver(w, Eigen::EigenvaluesOnly);
  return solver.eigenvalues().minCoeff();
}
}  // namespace

void D2::checkMixing(const Topology& topology, int segments, int rounds) {
  const int n = topology.worldSize();
  for (int s = 0; s < segments; ++s) {
    const Eigen::MatrixXd first = topology.mixingMatrix(0, s);
    for (int round = 0; round < rounds; ++round) {
      const Eigen::MatrixXd w =
          round == 0 ? first : topology.mixingMatrix(static_cast<std::uint64_t>(round), s);
      const auto where = [&] {
        std::ostringstream o;
        o << "d2: topology " << topology.name() << " (" << n << " ranks), round " << round << ", segment "
          << s;
        return o.str();
      };
      const double change = (w - first).cwiseAbs().maxCoeff();
      if (change > 1e-12)
        throw InvalidArgument(
            where() + ": the mixing matrix differs from round 0's (by up to " + std::to_string(change) +
            "); D² needs a fixed one: its correction 2 x_t - x_{t-1} compounds across changing "
            "matrices and diverges (use topology.kind ring, with self_weight 0.5 on an even "
            "number of ranks)");
      const double asym = (w - w.transpose()).cwiseAbs().maxCoeff();
      if (asym > 1e-9)
        throw InvalidArgument(where() + ": the mixing matrix is not symmetric (|W - W^T| up to " +
                              std::to_string(asym) + "); D² needs a symmetric doubly stochastic matrix");
      const double rowError = (w.rowwise().sum().array() - 1.0).abs().maxCoeff();
      if (rowError > 1e-9)
        throw InvalidArgument(where() + ": the mixing matrix is not doubly stochastic (a row sums to 1 " +
                              (rowError > 0 ? "+/- " : "") + std::to_string(rowError) + ")");
      const double lambda = smallestEigenvalue(w);
      if (!(lambda > -1.0 / 3.0 + 1e-9)) {
        std::ostringstream o;
        o << where() << ": the mixing matrix's smallest eigenvalue is " << lambda
          << ", and D² needs it above -1/3 (Tang et al. 2018, Theorem 1): give the ranks more self weight or "
             "use another topology";
        throw InvalidArgument(o.str());
      }
    }
  }
}

D2::D2(std::unique_ptr<DistributedOptimizer> base, const Topology& topology, int segments,
       std::size_t numParams, const SgdOptions& sgd)
    : base_(std::move(base)), numParams_(numParams), sgd_(numParams, sgd) {
  GOSSAMER_ENFORCE(base_ != nullptr, "d2: no base optimizer");
  GOSSAMER_ENFORCE(
      base_->name() == "crossover_sgd",
      "d2: base " << base_->name()
                  << " cannot be used: D² needs a symmetric mixing matrix (algorithm.base crossover_sgd)");
  GOSSAMER_ENFORCE(segments >= 1, "d2: segments " << segments);
  checkMixing(topology, segments);
  correction_.assign(numParams_, 0.0f);
}

void D2::reduceGradients(std::span<float> grads) {
  GOSSAMER_ENFORCE(grads.size() == numParams_,
                   "d2: expected " << numParams_ << " gradients, got " << grads.size());
}

void D2::mixParameters(std::span<float> params) {
  GOSSAMER_ENFORCE(params.size() == numParams_,
                   "d2: expected " << numParams_ << " parameters, got " << params.size());
  stepped_.assign(params.begin(), params.end());
  auto x = vec(params.data(), numParams_);
  auto c = vec(correction_.data(), numParams_);
  x += c;  // c_0 = 0
  base_->mixParameters(params);
  c = x - vec(stepped_.data(), numParams_);
  ++steps_;
}

void D2::step(std::span<float> params, std::span<const float> grads) {
  sgd_.apply(params, grads);
  mixParameters(params);
}

void D2::saveState(Checkpoint& out, const std::string& prefix) const {
  out.putValue<std::uint64_t>(prefix + "steps", steps_);
  out.putArray<float>(prefix + "correction", correction_);
  sgd_.saveState(out, prefix);
  base_->saveState(out, prefix + "base.");
}

void D2::loadState(const Checkpoint& in, const std::string& prefix) {
  const auto c = in.getArray<float>(prefix + "correction");
  GOSSAMER_ENFORCE(c.size() == numParams_, "d2: checkpoint holds a correction of "
                                               << c.size() << " elements, expected " << numParams_);
  base_->loadState(in, prefix + "base.");
  sgd_.loadState(in, prefix);
  correction_ = c;
  steps_ = in.getValue<std::uint64_t>(prefix + "steps");
}

namespace algorithms {

void register_d2(Registry& registry) {
  registry.addOptimizer(
      "d2",
      [](const OptimizerContext& ctx) -> std::unique_ptr<DistributedOptimizer> {
        const Config& c = ctx.config;
        if (c.get<std::string>("algorithm.base") != "crossover_sgd")
          throw ConfigError(c.sourceFile, 0, "algorithm.base",
                            "d2 needs a symmetric mixing matrix: algorithm.base crossover_sgd, not " +
                                c.get<std::string>("algorithm.base"));
        if (c.get<std::string>("algorithm.mode") != "sync")
          throw ConfigError(c.sourceFile, 0, "algorithm.mode",
                            "d2 corrects with this step's mix: algorithm.mode sync, not " +
                                c.get<std::string>("algorithm.mode"));
        if (c.get<int>("algorithm.interval") != 1)
          throw ConfigError(c.sourceFile, 0, "algorithm.interval",
                            "d2 corrects every step with that step's mix: algorithm.interval 1, not " +
                                std::to_string(c.get<int>("algorithm.interval")));
        return std::make_unique<D2>(detail::makeGossipBase(ctx, ctx.tensorSizes), ctx.topology,
                                    c.get<int>("algorithm.segments"), detail::total(ctx.tensorSizes),
                                    detail::sgdFrom(c));
      },
      detail::correctedGossipKeys("d2"));
}

}  // namespace algorithms

}  // namespace gossamer::optimizers
