/// \file rs.cc
/// \brief Systematic Reed–Solomon over GF(2^8) on ISA-L: Cauchy generator (every k×k submatrix of
/// [I; C] is invertible, so any m erasures are decodable), `ec_encode_data` for both encode and
/// decode (decode = encode with the rows of the inverted survivor matrix).

#include "reft/kernels/rs.h"

#include <isa-l/erasure_code.h>

#include <algorithm>
#include <string>

namespace reft::kernels {

struct RsCodec::Impl {
  int k = 0;
  int m = 0;
  std::vector<uint8_t> matrix;         ///< (k+m)×k generator, identity on top
  std::vector<uint8_t> encode_tables;  ///< ec_init_tables of the m parity rows
};

RsCodec::RsCodec() : impl_(std::make_unique<Impl>()) {}
RsCodec::~RsCodec() = default;

Result<std::shared_ptr<const RsCodec>> RsCodec::Create(int k, int m) {
  if (k < 1 || m < 1 || k + m > 255) {
    return Status::InvalidArgument("RsCodec: need k >= 1, m >= 1, k + m <= 255; got k=" +
                                   std::to_string(k) + " m=" + std::to_string(m));
  }
  std::shared_ptr<RsCodec> codec(new RsCodec());
  Impl& im = *codec->impl_;
  im.k = k;
  im.m = m;
  im.matrix.resize(static_cast<size_t>(k + m) * k);
  gf_gen_cauchy1_matrix(im.matrix.data(), k + m, k);
  im.encode_tables.resize(static_cast<size_t>(32) * k * m);
  ec_init_tables(k, m, im.matrix.data() + static_cast<size_t>(k) * k, im.encode_tables.data());
  return std::shared_ptr<const RsCodec>(std::move(codec));
}

int RsCodec::k() const { return impl_->k; }
int RsCodec::m() const { return impl_->m; }

namespace {
/// ec_encode_data takes an int length; larger blocks are processed in pieces.
constexpr size_t kMaxPiece = size_t{1} << 30;

void EncodePieces(int k, int rows, unsigned char* tables, const uint8_t* const* in,
                  uint8_t* const* out, size_t len) {
  std::vector<unsigned char*> src(k);
  std::vector<unsigned char*> dst(rows);
  for (size_t off = 0; off < len; off += kMaxPiece) {
    const size_t piece = std::min(kMaxPiece, len - off);
    for (int i = 0; i < k; ++i) src[i] = const_cast<uint8_t*>(in[i]) + off;
    for (int j = 0; j < rows; ++j) dst[j] = out[j] + off;
    ec_encode_data(static_cast<int>(piece), k, rows, tables, src.data(), dst.data());
  }
}
}  // namespace

Status RsCodec::Encode(const uint8_t* const* data, uint8_t* const* parity, size_t len) const {
  if (len == 0) return Status::OK();
  if (data == nullptr || parity == nullptr)
    return Status::InvalidArgument("RsCodec::Encode: null block array");
  EncodePieces(impl_->k, impl_->m, impl_->encode_tables.data(), data, parity, len);
  return Status::OK();
}

Status RsCodec::EncodeRow(int row, const uint8_t* const* data, uint8_t* out, size_t len) const {
  if (row < 0 || row >= impl_->m) {
    return Status::InvalidArgument("RsCodec::EncodeRow: row " + std::to_string(row) +
                                   " outside 0.." + std::to_string(impl_->m - 1));
  }
  if (len == 0) return Status::OK();
  if (data == nullptr || out == nullptr)
    return Status::InvalidArgument("RsCodec::EncodeRow: null block");
  // ec_init_tables lays the tables out row after row, 32·k bytes each.
  unsigned char* tables = impl_->encode_tables.data() + static_cast<size_t>(32) * impl_->k * row;
  EncodePieces(impl_->k, 1, tables, data, &out, len);
  return Status::OK();
}

Status RsCodec::Decode(uint8_t* const* blocks, const std::vector<int>& erased, size_t len) const {
  const int k = impl_->k;
  const int m = impl_->m;
  const int n = k + m;
  std::vector<bool> is_erased(n, false);
  for (int e : erased) {
    if (e < 0 || e >= n) {
      return Status::InvalidArgument("RsCodec::Decode: erased index " + std::to_string(e) +
                                     " outside 0.." + std::to_string(n - 1));
    }
    is_erased[e] = true;
  }
  std::vector<int> lost;
  for (int i = 0; i < n; ++i) {
    if (is_erased[i]) lost.push_back(i);
  }
  if (static_cast<int>(lost.size()) > m) {
    return Status::Lost("RsCodec::Decode: " + std::to_string(lost.size()) +
                        " blocks erased but only " + std::to_string(m) + " parities");
  }
  if (lost.empty() || len == 0) return Status::OK();

  // The first k survivors and their generator rows; invert that k×k matrix.
  std::vector<int> survivors;
  for (int i = 0; i < n && static_cast<int>(survivors.size()) < k; ++i) {
    if (!is_erased[i]) survivors.push_back(i);
  }
  const auto& a = impl_->matrix;
  std::vector<uint8_t> b(static_cast<size_t>(k) * k);
  for (int r = 0; r < k; ++r) {
    std::copy_n(a.data() + static_cast<size_t>(survivors[r]) * k, k,
                b.data() + static_cast<size_t>(r) * k);
  }
  std::vector<uint8_t> inv(static_cast<size_t>(k) * k);
  if (gf_invert_matrix(b.data(), inv.data(), k) != 0) {
    return Status::Internal("RsCodec::Decode: survivor matrix singular (Cauchy generator broken?)");
  }
  // Row for lost block e: data block = inv row e; parity block = a[e] · inv.
  const int nlost = static_cast<int>(lost.size());
  std::vector<uint8_t> rows(static_cast<size_t>(nlost) * k);
  for (int l = 0; l < nlost; ++l) {
    const int e = lost[l];
    uint8_t* row = rows.data() + static_cast<size_t>(l) * k;
    if (e < k) {
      std::copy_n(inv.data() + static_cast<size_t>(e) * k, k, row);
    } else {
      for (int c = 0; c < k; ++c) {
        uint8_t s = 0;
        for (int j = 0; j < k; ++j) {
          s ^= gf_mul(a[static_cast<size_t>(e) * k + j], inv[static_cast<size_t>(j) * k + c]);
        }
        row[c] = s;
      }
    }
  }
  std::vector<uint8_t> tables(static_cast<size_t>(32) * k * nlost);
  ec_init_tables(k, nlost, rows.data(), tables.data());
  std::vector<const uint8_t*> in(k);
  for (int r = 0; r < k; ++r) in[r] = blocks[survivors[r]];
  std::vector<uint8_t*> out(nlost);
  for (int l = 0; l < nlost; ++l) out[l] = blocks[lost[l]];
  EncodePieces(k, nlost, tables.data(), in.data(), out.data(), len);
  return Status::OK();
}

}  // namespace reft::kernels
