#include "reft/checksum.h"

#include <xxh3.h>
#include <xxhash.h>

// Debian's libxxhash exports a runtime-dispatching entry point (AVX2/AVX-512); the plain
// XXH3_64bits symbol is the SSE2 build and runs at about half the speed (measured on the build machine).
extern "C" XXH64_hash_t XXH3_64bits_dispatch(const void* input, size_t len);
extern "C" XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t* state, const void* input,
                                                     size_t len);

namespace reft {

uint64_t Checksum64(const void* data, size_t size) {
  return XXH3_64bits_dispatch(size ? data : "", size);
}

ChecksumStream::ChecksumStream() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}

ChecksumStream::~ChecksumStream() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void ChecksumStream::Update(const void* data, size_t size) {
  if (size) XXH3_64bits_update_dispatch(static_cast<XXH3_state_t*>(state_), data, size);
}

uint64_t ChecksumStream::Digest() const {
  return XXH3_64bits_digest(static_cast<const XXH3_state_t*>(state_));
}

}  // namespace reft
