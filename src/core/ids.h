// core/ids.h: strong ids. Mixing up a block id, a sequence id and a token count does not compile.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

namespace kvw {

enum class BlockId : uint32_t {};  // a KV block (block_size tokens in every layer)
enum class SeqId : uint64_t {};    // a sequence (one request may own several with n > 1)

constexpr BlockId kNullBlock{0xffffffffu};

constexpr uint32_t index_of(BlockId b) {
  return static_cast<uint32_t>(b);
}
constexpr uint64_t index_of(SeqId s) {
  return static_cast<uint64_t>(s);
}

// Block tables as the kernels take them (BlockId has uint32_t layout).
inline std::span<const uint32_t> as_indices(std::span<const BlockId> blocks) {
  static_assert(sizeof(BlockId) == sizeof(uint32_t));
  return {reinterpret_cast<const uint32_t*>(blocks.data()), blocks.size()};
}

}  // namespace kvw

template <>
struct std::hash<kvw::SeqId> {
  size_t operator()(kvw::SeqId s) const noexcept { return std::hash<uint64_t>{}(kvw::index_of(s)); }
};
template <>
struct std::hash<kvw::BlockId> {
  size_t operator()(kvw::BlockId b) const noexcept {
    return std::hash<uint32_t>{}(kvw::index_of(b));
  }
};
