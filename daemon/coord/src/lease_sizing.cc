#include "reft/coord/lease_sizing.h"

#include <algorithm>
#include <cmath>

namespace reft::coord {

std::chrono::seconds SizedLeaseTtl(const LeaseSizing& sizing, int64_t nodes) {
  if (sizing.renewals_per_s <= 0 || nodes <= 0) return sizing.floor;
  // Renewed every TTL/3: N nodes make 3N/TTL renewals a second.
  const double needed = std::ceil(3.0 * static_cast<double>(nodes) / sizing.renewals_per_s);
  return std::max(sizing.floor, std::chrono::seconds(static_cast<int64_t>(needed)));
}

bool ShouldMoveLease(std::chrono::seconds current, std::chrono::seconds wanted) {
  return wanted >= 2 * current || 2 * wanted <= current;
}

}  // namespace reft::coord
