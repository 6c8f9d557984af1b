#include "reft/local_proto/codec.h"

#include <algorithm>
#include <string>

namespace reft::local_proto {

void Writer::Bytes(const std::string& s) {
  U32(static_cast<uint32_t>(s.size()));
  out_.insert(out_.end(), s.begin(), s.end());
}

Status Reader::Raw(uint64_t* v, int n, const char* field) {
  if (left_ < static_cast<size_t>(n)) {
    return Status::Protocol(std::string("truncated message: field '") + field + "' needs " +
                            std::to_string(n) + " bytes, " + std::to_string(left_) + " left");
  }
  uint64_t x = 0;
  for (int i = 0; i < n; ++i) x |= static_cast<uint64_t>(p_[i]) << (8 * i);
  p_ += n;
  left_ -= n;
  *v = x;
  return Status::OK();
}

Status Reader::U8(uint8_t* v, const char* f) {
  uint64_t x;
  REFT_RETURN_NOT_OK(Raw(&x, 1, f));
  *v = static_cast<uint8_t>(x);
  return Status::OK();
}
Status Reader::U16(uint16_t* v, const char* f) {
  uint64_t x;
  REFT_RETURN_NOT_OK(Raw(&x, 2, f));
  *v = static_cast<uint16_t>(x);
  return Status::OK();
}
Status Reader::U32(uint32_t* v, const char* f) {
  uint64_t x;
  REFT_RETURN_NOT_OK(Raw(&x, 4, f));
  *v = static_cast<uint32_t>(x);
  return Status::OK();
}
Status Reader::U64(uint64_t* v, const char* f) { return Raw(v, 8, f); }
Status Reader::I32(int32_t* v, const char* f) {
  uint32_t x;
  REFT_RETURN_NOT_OK(U32(&x, f));
  *v = static_cast<int32_t>(x);
  return Status::OK();
}
Status Reader::I64(int64_t* v, const char* f) {
  uint64_t x;
  REFT_RETURN_NOT_OK(U64(&x, f));
  *v = static_cast<int64_t>(x);
  return Status::OK();
}

Status Reader::Bytes(std::string* v, size_t max_len, const char* f) {
  uint32_t n;
  REFT_RETURN_NOT_OK(U32(&n, f));
  if (n > max_len) {
    return Status::Protocol(std::string("field '") + f + "' is " + std::to_string(n) +
                            " bytes, limit " + std::to_string(max_len));
  }
  if (n > left_) {
    return Status::Protocol(std::string("truncated message: field '") + f + "' declares " +
                            std::to_string(n) + " bytes, " + std::to_string(left_) + " left");
  }
  v->assign(reinterpret_cast<const char*>(p_), n);
  p_ += n;
  left_ -= n;
  return Status::OK();
}

Status Reader::Fixed(uint8_t* out, size_t n, const char* f) {
  if (n > left_) {
    return Status::Protocol(std::string("truncated message: field '") + f + "' needs " +
                            std::to_string(n) + " bytes, " + std::to_string(left_) + " left");
  }
  std::copy(p_, p_ + n, out);
  p_ += n;
  left_ -= n;
  return Status::OK();
}

Status Reader::Count(uint32_t* v, uint32_t max_count, size_t min_elem_bytes, const char* f) {
  REFT_RETURN_NOT_OK(U32(v, f));
  if (*v > max_count) {
    return Status::Protocol(std::string("field '") + f + "' count " + std::to_string(*v) +
                            " exceeds limit " + std::to_string(max_count));
  }
  if (static_cast<uint64_t>(*v) * min_elem_bytes > left_) {
    return Status::Protocol(std::string("truncated message: field '") + f + "' declares " +
                            std::to_string(*v) + " elements, only " + std::to_string(left_) +
                            " bytes left");
  }
  return Status::OK();
}

Status Reader::Finish(const char* message_name) const {
  if (left_ != 0) {
    return Status::Protocol(std::string(message_name) + ": " + std::to_string(left_) +
                            " unexpected trailing bytes");
  }
  return Status::OK();
}

}  // namespace reft::local_proto
