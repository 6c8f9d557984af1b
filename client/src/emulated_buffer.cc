// reft::EmulatedBuffer: the trainer-side emulated device allocation. It lives in libreft so
// the allocation is registered in the same kernels registry that Client::Register's Export()
// searches (a second static copy of kernels in the application would not see it).
#include "reft/client.h"

#if REFT_HAVE_DEVICE_BACKENDS
#include "reft/kernels/emulated.h"
#endif

namespace reft {

struct __attribute__((visibility("hidden"))) EmulatedBuffer::Impl {
#if REFT_HAVE_DEVICE_BACKENDS
  std::unique_ptr<kernels::EmulatedAllocation> alloc;
#endif
};

EmulatedBuffer::EmulatedBuffer() : impl_(std::make_unique<Impl>()) {}
EmulatedBuffer::~EmulatedBuffer() = default;

Result<std::unique_ptr<EmulatedBuffer>> EmulatedBuffer::Create(uint64_t size, bool exportable) {
#if REFT_HAVE_DEVICE_BACKENDS
  REFT_ASSIGN_OR_RETURN(auto alloc, kernels::EmulatedAllocation::Create(size, exportable));
  std::unique_ptr<EmulatedBuffer> b(new EmulatedBuffer());
  b->impl_->alloc = std::move(alloc);
  return b;
#else
  (void)size;
  (void)exportable;
  return Status::Unsupported("this libreft was built without device backends");
#endif
}

void* EmulatedBuffer::data() const {
#if REFT_HAVE_DEVICE_BACKENDS
  return impl_->alloc->data();
#else
  return nullptr;
#endif
}

uint64_t EmulatedBuffer::size() const {
#if REFT_HAVE_DEVICE_BACKENDS
  return impl_->alloc->size();
#else
  return 0;
#endif
}

}  // namespace reft
