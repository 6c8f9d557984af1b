// reft::EmulatedBuffer: the trainer-side emulated device allocation. It lives in libreft so
// the allocation is registered in the same kernels registry that Client::Register's Export()
// searches (a second static copy of kernels in the application would not see it).
#include "reft/client.h"
#include "reft/kernels/emulated.h"

namespace reft {

struct __attribute__((visibility("hidden"))) EmulatedBuffer::Impl {
  std::unique_ptr<kernels::EmulatedAllocation> alloc;
};

EmulatedBuffer::EmulatedBuffer() : impl_(std::make_unique<Impl>()) {}
EmulatedBuffer::~EmulatedBuffer() = default;

Result<std::unique_ptr<EmulatedBuffer>> EmulatedBuffer::Create(uint64_t size, bool exportable) {
  REFT_ASSIGN_OR_RETURN(auto alloc, kernels::EmulatedAllocation::Create(size, exportable));
  std::unique_ptr<EmulatedBuffer> b(new EmulatedBuffer());
  b->impl_->alloc = std::move(alloc);
  return b;
}

void* EmulatedBuffer::data() const { return impl_->alloc->data(); }

uint64_t EmulatedBuffer::size() const { return impl_->alloc->size(); }

}  // namespace reft
