// Screening of received gossip messages (gossip_screen.hpp).
#include "gossamer/optimizers/gossip_screen.hpp"

#include <cmath>

#include <Eigen/Core>

namespace gossamer::optimizers {

namespace {
bool allFinite(std::span<const float> v) {
  return Eigen::Map<const Eigen::ArrayXf>(v.data(), static_cast<Eigen::Index>(v.size())).isFinite().all();
}
bool allFinite(std::span<const double> v) {
  return Eigen::Map<const Eigen::ArrayXd>(v.data(), static_cast<Eigen::Index>(v.size())).isFinite().all();
}
}  // namespace

GossipScreen::GossipScreen(bool enabled, std::string who)
    : enabled_(enabled), who_(std::move(who)), log_(LogLevel::kWarning, 10, "refused gossip messages") {}

bool GossipScreen::admit(int peer, double weight, std::span<const float> values, int worldSize) {
  if (!enabled_) return true;
  if (!std::isfinite(weight) || weight < 0 || weight > static_cast<double>(worldSize)) {
    refuse(peer,
           "push-sum weight " + std::to_string(weight) + " outside [0, " + std::to_string(worldSize) + "]");
    return false;
  }
  return admit(peer, values);
}

bool GossipScreen::admit(int peer, std::span<const float> values) {
  if (!enabled_ || allFinite(values)) return true;
  refuse(peer, "a value that is NaN or infinite among its " + std::to_string(values.size()) + " parameters");
  return false;
}

bool GossipScreen::admit(int peer, std::span<const double> values) {
  if (!enabled_ || allFinite(values)) return true;
  refuse(peer,
         "a running sum that is NaN or infinite among its " + std::to_string(values.size()) + " values");
  return false;
}

void GossipScreen::refuse(int peer, const std::string& why) {
  ++rejected_;
  log_([&] {
    return who_ + ": refused a message from rank " + std::to_string(peer) + ": " + why +
           " (algorithm.check_received)";
  });
}

}  // namespace gossamer::optimizers
