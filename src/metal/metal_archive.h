// Binary archives (macOS builds only): the archive Metal builds for one of our pipelines, written
// to a file so that mlx_metile.native can patch it, and a pipeline taken from a (patched) archive
// with MTL::PipelineOptionFailOnBinaryArchiveMiss - without that option Metal would compile the
// function afresh on a miss, and a patched kernel would answer as the unpatched one does.
#pragma once

#include <string>

#include "mlx/backend/metal/device.h"

namespace mlx_metile {

namespace mx = mlx::core;

// The pipeline of `entry` of `library` from the archive at `archive_path`; a std::runtime_error
// naming the kernel and the archive where the archive cannot be read or does not hold it. Cached
// by `key` (the artifact's), as MLX caches its pipelines.
MTL::ComputePipelineState* archive_pipeline(mx::metal::Device& device, MTL::Library* library, const std::string& entry,
                                            const std::string& archive_path, const std::string& key);

// Builds the pipeline of `entry` of the metallib at `library_path` into a new binary archive and
// serializes it to `archive_path` (the archive the native room reads and patches).
void serialize_archive(const std::string& library_path, const std::string& entry, const std::string& archive_path,
                       const std::string& key);

}  // namespace mlx_metile
