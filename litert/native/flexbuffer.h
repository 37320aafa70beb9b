// A small reader for the FlexBuffer map TFLite stores as a CUSTOM node's
// options (`--mode custom` writes the TF op's attributes there). No installed
// package ships flatbuffers' C++ headers (the PyPI wheel is Python only), so
// this reads just what the attributes use -- a map of ints, floats, bools,
// strings and vectors of numbers -- and checks every offset against the buffer:
// a truncated or hostile buffer gives an error, never a read outside it.
//
// The format: the last byte is the root's width, the byte before it the root's
// packed type (type << 2 | log2 of its children's width); an offset value points
// backwards from where it is stored; vectors and maps have their length in the
// word before their first element, untyped ones a type byte per element after
// the elements; a map has, before its length, the offset and width of its
// sorted keys vector.
#ifndef BRIDGE_LITERT_FLEXBUFFER_H_
#define BRIDGE_LITERT_FLEXBUFFER_H_

#include <cstdint>
#include <cstring>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace bridge {
namespace flex {

struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One decoded attribute value.
struct Value {
  enum Kind { kInt, kFloat, kBool, kString, kInts, kFloats, kOther } kind = kOther;
  int64_t i = 0;
  double f = 0;
  std::string s;
  std::vector<int64_t> ints;
  std::vector<double> floats;
  const char* kind_name() const {
    static const char* names[] = {"int", "float", "bool", "string", "list(int)", "list(float)", "other"};
    return names[kind];
  }
};

using Map = std::map<std::string, Value>;

namespace detail {

enum Type {
  kNull = 0, kInt = 1, kUInt = 2, kFloat = 3, kKey = 4, kString = 5, kIndirectInt = 6, kIndirectUInt = 7,
  kIndirectFloat = 8, kMap = 9, kVector = 10, kVectorInt = 11, kVectorUInt = 12, kVectorFloat = 13,
  kVectorKey = 14, kVectorInt2 = 16, kVectorFloat4 = 24, kBlob = 25, kBool = 26, kVectorBool = 36,
};

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : d_(data), n_(size) {}

  void need(size_t pos, size_t len) const {
    if (pos > n_ || len > n_ - pos) throw Error("attribute buffer is truncated or malformed");
  }
  uint64_t u(size_t pos, int w) const {
    if (w != 1 && w != 2 && w != 4 && w != 8) throw Error("attribute buffer has a bad width");
    need(pos, w);
    uint64_t v = 0;
    std::memcpy(&v, d_ + pos, w);  // little-endian, as the format is
    return v;
  }
  int64_t s(size_t pos, int w) const {
    const uint64_t v = u(pos, w);
    const int shift = 64 - 8 * w;
    return static_cast<int64_t>(v << shift) >> shift;
  }
  double f(size_t pos, int w) const {
    if (w == 4) {
      const uint32_t b = static_cast<uint32_t>(u(pos, 4));
      float x;
      std::memcpy(&x, &b, 4);
      return x;
    }
    if (w == 8) {
      const uint64_t b = u(pos, 8);
      double x;
      std::memcpy(&x, &b, 8);
      return x;
    }
    throw Error("attribute buffer has a float of width " + std::to_string(w));
  }
  // Where an offset stored at `pos` (width w) points.
  size_t target(size_t pos, int w) const {
    const uint64_t off = u(pos, w);
    if (off > pos) throw Error("attribute buffer has an offset outside it");
    return pos - static_cast<size_t>(off);
  }
  std::string cstr(size_t pos) const {
    need(pos, 1);
    const void* end = std::memchr(d_ + pos, 0, n_ - pos);
    if (!end) throw Error("attribute buffer has an unterminated key");
    return std::string(reinterpret_cast<const char*>(d_ + pos), static_cast<const uint8_t*>(end) - (d_ + pos));
  }
  size_t size() const { return n_; }
  uint8_t byte(size_t pos) const {
    need(pos, 1);
    return d_[pos];
  }

 private:
  const uint8_t* d_;
  size_t n_;
};

// Reads one value stored at `pos` with its parent's width `pw` and packed type `packed`.
inline Value read(const Reader& r, size_t pos, int pw, uint8_t packed) {
  const int type = packed >> 2, cw = 1 << (packed & 3);
  Value v;
  switch (type) {
    case kInt: v.kind = Value::kInt; v.i = r.s(pos, pw); return v;
    case kUInt: v.kind = Value::kInt; v.i = static_cast<int64_t>(r.u(pos, pw)); return v;
    case kBool: v.kind = Value::kBool; v.i = r.u(pos, pw) != 0; return v;
    case kFloat: v.kind = Value::kFloat; v.f = r.f(pos, pw); return v;
    case kIndirectInt: v.kind = Value::kInt; v.i = r.s(r.target(pos, pw), cw); return v;
    case kIndirectUInt: v.kind = Value::kInt; v.i = static_cast<int64_t>(r.u(r.target(pos, pw), cw)); return v;
    case kIndirectFloat: v.kind = Value::kFloat; v.f = r.f(r.target(pos, pw), cw); return v;
    case kString:
    case kBlob: {
      const size_t t = r.target(pos, pw);
      if (t < static_cast<size_t>(cw)) throw Error("attribute buffer has a string outside it");
      const uint64_t len = r.u(t - cw, cw);
      r.need(t, len);
      v.kind = Value::kString;
      v.s.resize(len);
      for (uint64_t k = 0; k < len; ++k) v.s[k] = static_cast<char>(r.byte(t + k));
      return v;
    }
    default: break;
  }
  const bool typed = (type >= kVectorInt && type <= kVectorFloat) || type == kVectorBool;
  const bool fixed = type >= kVectorInt2 && type <= kVectorFloat4;
  if (type != kVector && !typed && !fixed) return v;  // maps, keys, nulls: not an attribute value here
  const size_t t = r.target(pos, pw);
  uint64_t len;
  int elem;  // element type
  if (fixed) {
    len = 2 + (type - kVectorInt2) / 3;
    elem = kInt + (type - kVectorInt2) % 3;
  } else {
    if (t < static_cast<size_t>(cw)) throw Error("attribute buffer has a vector outside it");
    len = r.u(t - cw, cw);
    elem = type == kVector ? -1 : type == kVectorBool ? kBool : kInt + (type - kVectorInt);
  }
  if (len > r.size()) throw Error("attribute buffer has a vector longer than itself");
  r.need(t, len * cw + (type == kVector ? len : 0));
  bool all_int = true;
  std::vector<Value> items;
  for (uint64_t k = 0; k < len; ++k) {
    const uint8_t et = type == kVector ? r.byte(t + len * cw + k) : static_cast<uint8_t>(elem << 2);
    Value item = read(r, t + k * cw, cw, et);
    if (item.kind != Value::kInt && item.kind != Value::kBool && item.kind != Value::kFloat) return Value();
    all_int = all_int && item.kind != Value::kFloat;
    items.push_back(item);
  }
  v.kind = all_int && !items.empty() ? Value::kInts : Value::kFloats;
  if (items.empty()) v.kind = elem == kFloat ? Value::kFloats : Value::kInts;
  for (const Value& item : items) {
    if (v.kind == Value::kInts) v.ints.push_back(item.i);
    else v.floats.push_back(item.kind == Value::kFloat ? item.f : static_cast<double>(item.i));
  }
  return v;
}

}  // namespace detail

// The root map of a custom node's options. An empty buffer is an empty map.
inline Map ReadMap(const void* data, size_t size) {
  Map out;
  if (size == 0) return out;
  detail::Reader r(static_cast<const uint8_t*>(data), size);
  if (size < 3) throw Error("attribute buffer is too short to be a FlexBuffer");
  const int rw = r.byte(size - 1);
  const uint8_t packed = r.byte(size - 2);
  if (rw != 1 && rw != 2 && rw != 4 && rw != 8) throw Error("attribute buffer has a bad root width");
  if (size < 2 + static_cast<size_t>(rw)) throw Error("attribute buffer is too short to be a FlexBuffer");
  const size_t root = size - 2 - rw;
  if ((packed >> 2) != detail::kMap) throw Error("attributes are not a FlexBuffer map");
  const int cw = 1 << (packed & 3);
  const size_t t = r.target(root, rw);
  if (t < 3 * static_cast<size_t>(cw)) throw Error("attribute map is outside the buffer");
  const uint64_t len = r.u(t - cw, cw);
  const size_t keys = r.target(t - 3 * cw, cw);
  const int kw = static_cast<int>(r.u(t - 2 * cw, cw));
  if (len > size || keys < static_cast<size_t>(kw)) throw Error("attribute map is malformed");
  if (r.u(keys - kw, kw) != len) throw Error("attribute map has keys and values of different counts");
  r.need(t, len * cw + len);
  r.need(keys, len * kw);
  for (uint64_t k = 0; k < len; ++k) {
    const std::string key = r.cstr(r.target(keys + k * kw, kw));
    out[key] = detail::read(r, t + k * cw, cw, r.byte(t + len * cw + k));
  }
  return out;
}

}  // namespace flex
}  // namespace bridge

#endif  // BRIDGE_LITERT_FLEXBUFFER_H_
