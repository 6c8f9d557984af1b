#pragma once
/// \file device_match.h
/// \brief Which of reftd's devices a client's buffer lives on. The client numbers devices its
/// own way (CUDA_VISIBLE_DEVICES renumbers them per process), so it also sends the device's
/// UUID and PCI bus id; reftd opens the device with that UUID (else that bus id), whatever its
/// ordinal here. A device reftd does not have is an error naming both sides.

#include <string>

#include "reft/kernels/device.h"
#include "reft/local_proto/messages.h"
#include "reft/result.h"

namespace reft::local {

/// \brief reftd's ordinal of the device `memory` (registered as buffer `name`) lives on:
/// `memory.device` itself when the client sent no identity (an older client).
Result<int> MatchDevice(const kernels::DeviceBackend& backend,
                        const local_proto::BufferMemory& memory, const std::string& name);

}  // namespace reft::local
