#include "metal/metal_archive.h"

#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace mlx_metile {

namespace {

std::string describe(NS::Error* error) {
  if (!error || !error->localizedDescription()) return "no reason given";
  return error->localizedDescription()->utf8String();
}

NS::String* ns_string(const std::string& s) { return NS::String::string(s.c_str(), NS::UTF8StringEncoding); }

// The descriptor the archive is built with and looked up by: the function only, nothing else set,
// so that serializing and loading describe the same pipeline.
NS::SharedPtr<MTL::ComputePipelineDescriptor> descriptor_of(MTL::Library* library, const std::string& entry,
                                                            NS::SharedPtr<MTL::Function>& function) {
  function = NS::TransferPtr(library->newFunction(ns_string(entry)));
  if (!function) throw std::runtime_error("mlx_metile: the metallib has no kernel '" + entry + "'");
  auto descriptor = NS::TransferPtr(MTL::ComputePipelineDescriptor::alloc()->init());
  descriptor->setComputeFunction(function.get());
  return descriptor;
}

NS::SharedPtr<MTL::BinaryArchive> open_archive(MTL::Device* device, const std::string& path, const std::string& entry) {
  auto descriptor = NS::TransferPtr(MTL::BinaryArchiveDescriptor::alloc()->init());
  if (!path.empty()) descriptor->setUrl(NS::URL::fileURLWithPath(ns_string(path)));
  NS::Error* error = nullptr;
  auto archive = NS::TransferPtr(device->newBinaryArchive(descriptor.get(), &error));
  if (!archive)
    throw std::runtime_error("mlx_metile: kernel '" + entry + "': cannot open the binary archive '" + path +
                             "': " + describe(error));
  return archive;
}

}  // namespace

MTL::ComputePipelineState* archive_pipeline(mx::metal::Device& device, MTL::Library* library, const std::string& entry,
                                            const std::string& archive_path, const std::string& key) {
  static std::mutex mu;
  static std::unordered_map<std::string, NS::SharedPtr<MTL::ComputePipelineState>> pipelines;
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = pipelines.find(key); it != pipelines.end()) return it->second.get();
  if (archive_path.empty())
    throw std::runtime_error("mlx_metile: route archive of kernel '" + entry + "' has no archive");

  auto pool = NS::TransferPtr(NS::AutoreleasePool::alloc()->init());
  auto archive = open_archive(device.mtl_device(), archive_path, entry);
  NS::SharedPtr<MTL::Function> function;
  auto descriptor = descriptor_of(library, entry, function);
  const NS::Object* archives[] = {archive.get()};
  descriptor->setBinaryArchives(NS::Array::array(archives, 1));
  NS::Error* error = nullptr;
  auto pipeline = NS::TransferPtr(device.mtl_device()->newComputePipelineState(
      descriptor.get(), MTL::PipelineOptionFailOnBinaryArchiveMiss, nullptr, &error));
  if (!pipeline)
    throw std::runtime_error(
        "mlx_metile: kernel '" + entry + "' is not in the binary archive '" + archive_path +
        "' (loaded with FailOnBinaryArchiveMiss, so nothing was compiled instead): " + describe(error));
  MTL::ComputePipelineState* out = pipeline.get();
  pipelines.emplace(key, std::move(pipeline));
  return out;
}

void serialize_archive(const std::string& library_path, const std::string& entry, const std::string& archive_path,
                       const std::string& key) {
  auto& device = mx::metal::device(mx::Device::gpu);
  MTL::Library* library = device.get_library("mlx_metile_" + key, library_path);
  auto pool = NS::TransferPtr(NS::AutoreleasePool::alloc()->init());
  auto archive = open_archive(device.mtl_device(), "", entry);
  NS::SharedPtr<MTL::Function> function;
  auto descriptor = descriptor_of(library, entry, function);
  NS::Error* error = nullptr;
  if (!archive->addComputePipelineFunctions(descriptor.get(), &error))
    throw std::runtime_error("mlx_metile: kernel '" + entry +
                             "': Metal did not build its pipeline into an archive: " + describe(error));
  if (!archive->serializeToURL(NS::URL::fileURLWithPath(ns_string(archive_path)), &error))
    throw std::runtime_error("mlx_metile: kernel '" + entry + "': cannot write its archive to '" + archive_path +
                             "': " + describe(error));
}

}  // namespace mlx_metile
