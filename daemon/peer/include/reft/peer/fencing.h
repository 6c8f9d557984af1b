#pragma once
/// \file fencing.h
/// \brief How a peer tells a caller it was declared dead (daemon/peer/membership.h "epochs and
/// fencing"): a Protocol status (FAILED_PRECONDITION on the wire) whose message starts with
/// this prefix.

namespace reft::peer {

inline constexpr const char* kFencedPrefix = "fenced:";

}  // namespace reft::peer
