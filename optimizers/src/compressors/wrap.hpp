// How a compressor wraps the optimizer a config names (see wrap.cpp).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "gossamer/optimizers/compress.hpp"
#include "gossamer/registry.hpp"

namespace gossamer::optimizers::detail {

/// Builds this rank's compressor for a model of n elements from the config.
using MakeCompressor = std::function<std::unique_ptr<Compressor>(const OptimizerContext& ctx, std::size_t n)>;

/// Registers compressor `name` with its keys: the Agent hands it the
/// optimizer algorithm.name names, and gets a CompressedSgd that compresses
/// that optimizer's exchange (see wrap.cpp). The rules that compressed
/// exchanges are synchronous and are not checkpointed (refuseCheckpoints)
/// are added to `keys`.
void registerCompressor(Registry& registry, const std::string& name, MakeCompressor make, KeySet keys);

/// registerCompressor with a factory of the caller's (which may use
/// compressedSgdFactory for some optimizers and not for others); the rule
/// that compressed exchanges are synchronous is added to `keys`.
void registerCompressorFactory(Registry& registry, const std::string& name, CompressorFactory factory,
                               KeySet keys);

/// What registerCompressor registers: CompressedSgd over the inner optimizer,
/// with make's compressor for its gradients (see the top of wrap.cpp).
CompressorFactory compressedSgdFactory(MakeCompressor make);

/// The rule of a compressor whose runs are CompressedSgd's, which saves no
/// state (its residuals and the compressors' streams are in no checkpoint):
/// with compression.kind `kind` (and, if `onlyUnderAllReduceSgd`,
/// algorithm.name allreduce_sgd), checkpoint.every_steps and
/// checkpoint.resume are refused at compression.kind.
ConfigRule refuseCheckpoints(const std::string& kind, bool onlyUnderAllReduceSgd);

/// The rule of a gradient compressor (Top-K, QSGD): with compression.kind
/// `kind`, algorithm.name must be allreduce_sgd, whose gradients it compresses.
ConfigRule needsAllReduceSgd(const std::string& kind);

}  // namespace gossamer::optimizers::detail
