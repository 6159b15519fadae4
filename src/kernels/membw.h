// kernels/membw.h: a STREAM-like memory bandwidth probe, the bound that decode matmuls (which
// stream every weight byte once per token) are measured against. Allocates its own buffers;
// call from the thread that owns `pool`, never concurrently with other pool work.
#pragma once

#include <cstddef>

#include "core/thread_pool.h"

namespace kvw::kernels {

// STREAM triad a[i] = b[i] + s * c[i] over three float arrays of bytes / 3 each, split over the
// pool's threads; best of several repetitions, counting 3 * 4 bytes per element (STREAM's
// convention, which ignores the write-allocate read of a[]). Use bytes >> last-level cache.
double measure_memory_bandwidth_gbs(ThreadPool& pool, size_t bytes);

// Read-only variant: sums one float array of `bytes`; the access pattern of a decode matmul.
double measure_read_bandwidth_gbs(ThreadPool& pool, size_t bytes);

}  // namespace kvw::kernels
