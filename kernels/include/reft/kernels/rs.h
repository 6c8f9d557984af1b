#pragma once
/// \file rs.h
/// \brief Reed–Solomon erasure code over GF(2^8) (ISA-L `ec_encode_data`), systematic:
/// k data blocks, m parity blocks, any m erasures recoverable.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "reft/result.h"

namespace reft::kernels {

/// \brief Encoder/decoder for one (k, m) geometry. Immutable after Create; thread-safe.
class RsCodec {
 public:
  /// \brief k >= 1, m >= 1, k + m <= 255.
  static Result<std::shared_ptr<const RsCodec>> Create(int k, int m);

  int k() const;
  int m() const;

  /// \brief parity[j] (j < m) from data[i] (i < k); every block is `len` bytes.
  Status Encode(const uint8_t* const* data, uint8_t* const* parity, size_t len) const;

  /// \brief Parity row `row` (0 <= row < m) only, bit-identical to Encode's parity[row]; used
  /// when each member stores a different parity of a stripe.
  Status EncodeRow(int row, const uint8_t* const* data, uint8_t* out, size_t len) const;

  /// \brief Rebuilds the erased blocks in place.
  /// \param blocks k + m pointers: data blocks 0..k-1 then parity 0..m-1, all `len` bytes.
  /// \param erased indices into `blocks` whose content is lost; they are overwritten.
  /// \return Lost when more than m blocks are erased.
  Status Decode(uint8_t* const* blocks, const std::vector<int>& erased, size_t len) const;

  ~RsCodec();

 private:
  RsCodec();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace reft::kernels
