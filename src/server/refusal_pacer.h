// server/refusal_pacer.h: how long a door refusal (429) is held before it is written. A client
// that ignores Retry-After and retries as soon as it is answered (a retry storm) costs the
// server one refusal per round trip: 350 such clients on loopback sent ~12,000 a second, CPU
// taken from the model on the same cores. Only a connection that comes back before the
// Retry-After of its last refusal has run out is held, and only until it runs out (at most
// `hold_s`): such a client then retries at most once per Retry-After, while a client that
// honours it, or a new connection, is answered at once. The HTTP layer measures how early a
// connection came back (HttpRequest::early_s) and bounds how many are held at once.
// Pure logic, no state.
#pragma once

namespace kvw::server {

struct RefusalPacing {
  double hold_s = 1;  // --refusal-hold: the longest hold; 0 = off
};

// Seconds to hold a 429 for a request that came `early_s` seconds before its connection's last
// Retry-After ran out (0: it did not): min(early_s, hold_s).
double refusal_hold_s(const RefusalPacing& cfg, double early_s);

}  // namespace kvw::server
