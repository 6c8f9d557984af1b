#include "device_match.h"

namespace reft::local {
namespace {

std::string Describe(const kernels::DeviceIdentity& id) {
  return "UUID " + (id.uuid.empty() ? std::string("?") : id.uuid) + ", PCI " +
         (id.pci_bus_id.empty() ? std::string("?") : id.pci_bus_id);
}

}  // namespace

Result<int> MatchDevice(const kernels::DeviceBackend& backend,
                        const local_proto::BufferMemory& memory, const std::string& name) {
  if (memory.device_uuid.empty() && memory.pci_bus_id.empty()) return memory.device;
  const int count = backend.DeviceCount();
  std::string here;
  for (int i = 0; i < count; ++i) {
    auto id = backend.Identify(i);
    if (!id.ok()) continue;
    const bool same = !memory.device_uuid.empty() ? id->uuid == memory.device_uuid
                                                  : id->pci_bus_id == memory.pci_bus_id;
    if (same) return i;
    if (i == memory.device) here = "; reftd's device " + std::to_string(i) + " is " + Describe(*id);
  }
  if (here.empty()) here = "; reftd has " + std::to_string(count) + " device(s) of this kind";
  return Status::InvalidArgument(
      "buffer '" + name + "' is on the client's device " + std::to_string(memory.device) + " (" +
      Describe({memory.device_uuid, memory.pci_bus_id}) + "), which reftd does not see" + here +
      " (do the trainer and reftd see different GPUs?)");
}

}  // namespace reft::local
