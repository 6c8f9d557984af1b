// The rings streamed restores hand pieces over in: kept between restores, and one a trainer has
// mapped goes only to trainers of the same uid.
#include <catch2/catch.hpp>

#include "reft/local/local_server.h"
#include "stream_rings.h"

using namespace reft;
using reft::local::StreamRings;

TEST_CASE("a kept ring goes to its owner's next restore or to nobody else") {
  StreamRings rings(2);
  REQUIRE(rings.Warm(1 << 20).ok());
  CHECK(rings.idle() == 1);
  // The warm ring, seen by nobody, goes to the first owner.
  auto a = rings.Take(1000, 1 << 20);
  REQUIRE(a.ok());
  const uint8_t* warm = a->data();
  CHECK(rings.idle() == 0);
  rings.Give(1000, std::move(*a));
  // Another uid gets a new ring: the first owner's trainer may still map the kept one.
  auto b = rings.Take(2000, 1 << 20);
  REQUIRE(b.ok());
  CHECK(b->data() != warm);
  CHECK(rings.idle() == 1);
  // The owner gets its own back; one too small for what is asked is not used.
  auto too_small = rings.Take(1000, 2 << 20);
  REQUIRE(too_small.ok());
  CHECK(too_small->size() >= (2u << 20));
  CHECK(rings.idle() == 1);
  auto again = rings.Take(1000, 1 << 20);
  REQUIRE(again.ok());
  CHECK(again->data() == warm);
  // At most two are kept, the oldest freed first.
  rings.Give(2000, std::move(*b));
  rings.Give(1000, std::move(*again));
  rings.Give(1000, std::move(*too_small));
  CHECK(rings.idle() == 2);
  auto other = rings.Take(2000, 1);
  REQUIRE(other.ok());
  CHECK(rings.idle() == 2);  // uid 2000's was the oldest: freed, so this one is new
}

TEST_CASE("a ring holds a slot per piece in flight and two more, up to 256 MiB") {
  using reft::local::StreamRingBytes;
  CHECK(StreamRingBytes(8 << 20, 4) == 48u << 20);            // the defaults
  CHECK(StreamRingBytes(8 << 20, 64) == 256u << 20);          // capped: 32 slots
  CHECK(StreamRingBytes(300u << 20, 4) == 600u << 20);        // never fewer than two slots
  CHECK(StreamRingBytes(5000, 1) == 3 * 8192);                // slots are whole pages
  CHECK(StreamRingBytes(8 << 20, 0) == StreamRingBytes(8 << 20, 1));
}
