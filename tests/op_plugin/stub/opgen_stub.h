// Stand-ins for the ATen / op-plugin types an OpApi kernel uses, just enough to run its output
// allocation on the host: tensors carry sizes and a dtype, DO_COMPATIBILITY does nothing. Used by
// tests/test_op_plugin*.py to evaluate the size/dtype C++ of opgen's kernels and of torchnpugen's
// gen_opapi kernels on the spec's example shapes, and to compile what they pass to EXEC_NPU_CMD.
//
// EXEC_NPU_CMD converts every argument as op-plugin's op_api_common_base.h does: one ConvertType overload
// per type it knows (tensors, optional tensors, Scalars, int lists, bool arrays, tensor lists, ScalarType)
// and `T ConvertType(T value)` for anything else, taking the arguments as lvalues (`ConvertTypes(Ts&...)`).
// op-plugin's catch-all passes a c10::string_view or a c10::optional<int64_t> to the aclnn C API as it is;
// here it accepts only what the C API can take (numbers, enums, pointers), so such an argument fails to
// compile, and EXEC_NPU_CMD prints what each argument became.
#pragma once
#include <algorithm>
#include <array>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace c10 {
template <class T>
using optional = std::optional<T>;
inline constexpr std::nullopt_t nullopt = std::nullopt;
using string_view = std::string_view;

template <class T, unsigned N = 8>
struct SmallVector : std::vector<T> {
    SmallVector() = default;
    SmallVector(std::initializer_list<T> items) : std::vector<T>(items) {}
    SmallVector(size_t count, T value) : std::vector<T>(count, value) {}
    template <class It>
    SmallVector(It first, It last) : std::vector<T>(first, last) {}
};

template <class T>
struct ArrayRef {
    std::vector<T> items;
    ArrayRef() = default;
    ArrayRef(const std::vector<T>& v) : items(v) {}
    template <unsigned N>
    ArrayRef(const SmallVector<T, N>& v) : items(v.begin(), v.end()) {}
    ArrayRef(std::initializer_list<T> v) : items(v) {}
    size_t size() const { return items.size(); }
    bool empty() const { return items.empty(); }
    auto begin() const { return items.begin(); }
    auto end() const { return items.end(); }
    const T& operator[](size_t i) const { return items.at(i); }
    ArrayRef slice(size_t start, size_t length) const {
        if (start + length > items.size()) throw std::out_of_range("ArrayRef::slice");
        return ArrayRef(std::vector<T>(items.begin() + start, items.begin() + start + length));
    }
    ArrayRef slice(size_t start) const { return slice(start, items.size() - start); }
    std::vector<T> vec() const { return items; }
};

inline int64_t maybe_wrap_dim(int64_t dim, int64_t ndim, bool wrap_scalar = true) {
    if (ndim <= 0 && !wrap_scalar) throw std::out_of_range("dimension specified as 0 but tensor has no dimensions");
    int64_t rank = ndim > 0 ? ndim : 1;  // a 0-dim tensor takes dim 0 or -1, as ATen's wrap_scalar
    if (dim < -rank || dim >= rank) throw std::out_of_range("Dimension out of range");
    return dim < 0 ? dim + rank : dim;
}
}  // namespace c10

namespace at {
using c10::ArrayRef;
using c10::SmallVector;
using IntArrayRef = c10::ArrayRef<int64_t>;
using DimVector = c10::SmallVector<int64_t, 8>;
using OptionalIntArrayRef = std::optional<IntArrayRef>;
enum class ScalarType { Bool, Byte, Char, Short, Int, Long, Half, BFloat16, Float, Double, Float8_e5m2,
                        Float8_e4m3fn, Undefined };
constexpr ScalarType kBool = ScalarType::Bool, kByte = ScalarType::Byte, kChar = ScalarType::Char,
                     kShort = ScalarType::Short, kInt = ScalarType::Int, kLong = ScalarType::Long,
                     kHalf = ScalarType::Half, kBFloat16 = ScalarType::BFloat16, kFloat = ScalarType::Float,
                     kDouble = ScalarType::Double, kFloat8_e5m2 = ScalarType::Float8_e5m2,
                     kFloat8_e4m3fn = ScalarType::Float8_e4m3fn;

inline const char* dtype_name(ScalarType t) {
    switch (t) {
        case ScalarType::Bool: return "bool";
        case ScalarType::Byte: return "uint8";
        case ScalarType::Char: return "int8";
        case ScalarType::Short: return "int16";
        case ScalarType::Int: return "int32";
        case ScalarType::Long: return "int64";
        case ScalarType::Half: return "float16";
        case ScalarType::BFloat16: return "bfloat16";
        case ScalarType::Float: return "float32";
        case ScalarType::Double: return "float64";
        case ScalarType::Float8_e5m2: return "float8_e5m2";
        case ScalarType::Float8_e4m3fn: return "float8_e4m3fn";
        case ScalarType::Undefined: return "undefined";
    }
    return "?";
}

inline bool is_floating(ScalarType t) {
    return t == kHalf || t == kBFloat16 || t == kFloat || t == kDouble;
}

inline ScalarType promote_types(ScalarType a, ScalarType b) {
    if (a == b) return a;
    if (is_floating(a) != is_floating(b)) return is_floating(a) ? a : b;
    if ((a == kHalf && b == kBFloat16) || (a == kBFloat16 && b == kHalf)) return kFloat;
    return static_cast<int>(a) > static_cast<int>(b) ? a : b;
}

enum class MemoryFormat { Preserve, Contiguous };

struct TensorOptions {
    ScalarType type = kFloat;
    TensorOptions dtype(ScalarType t) const { return TensorOptions{t}; }
};

struct Tensor {
    std::vector<int64_t> shape;
    ScalarType type = kFloat;
    IntArrayRef sizes() const { return IntArrayRef(shape); }
    int64_t dim() const { return static_cast<int64_t>(shape.size()); }
    int64_t size(int64_t i) const {
        if (i < 0) i += dim();
        if (i < 0 || i >= dim()) throw std::out_of_range("Tensor::size");
        return shape[i];
    }
    int64_t numel() const {
        int64_t n = 1;
        for (auto s : shape) n *= s;
        return n;
    }
    ScalarType scalar_type() const { return type; }
    TensorOptions options() const { return TensorOptions{type}; }
    Tensor clone(MemoryFormat = MemoryFormat::Preserve) const { return *this; }
};
using TensorList = c10::ArrayRef<Tensor>;
struct Scalar {
    double value = 0;
};

inline DimVector infer_size(IntArrayRef a, IntArrayRef b) {
    size_t n = std::max(a.size(), b.size());
    DimVector out(n, 1);
    for (size_t i = 0; i < n; ++i) {
        int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
        int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
        if (x != y && x != 1 && y != 1) throw std::runtime_error("infer_size: shapes do not broadcast");
        out[i] = x == 1 ? y : x;
    }
    return out;
}
}  // namespace at

namespace at_npu::native {
struct OpPreparation {
    template <class Sizes>
    static at::Tensor apply_tensor_without_format(const Sizes& sizes, at::TensorOptions options) {
        return at::Tensor{std::vector<int64_t>(sizes.begin(), sizes.end()), options.type};
    }
    // aclDataType -> dtype; the stub's aclDataType is torch_npu's code (c10_npu::GetAclDataType below), so this
    // is torch_npu's map for the codes that are at::ScalarType's own numbers (UNKNOWN as Undefined elsewhere)
    static at::ScalarType convert_to_scalar_type(int64_t acl_type) {
        switch (acl_type) {
            case 0: return at::kByte;
            case 1: return at::kChar;
            case 2: return at::kShort;
            case 3: return at::kInt;
            case 4: return at::kLong;
            case 5: return at::kHalf;
            case 6: return at::kFloat;
            case 7: return at::kDouble;
            case 11: return at::kBool;
            case 15: return at::kBFloat16;
            case 23: return at::ScalarType::Float8_e5m2;
            case 24: return at::ScalarType::Float8_e4m3fn;
            default: return at::ScalarType::Undefined;
        }
    }
};
}  // namespace at_npu::native

namespace op_infer {
constexpr int SIZE = 8;
inline c10::SmallVector<int64_t, SIZE> broadcast_ops_npu_output_size(const at::Tensor& a, const at::Tensor& b) {
    auto sizes = at::infer_size(a.sizes(), b.sizes());
    return c10::SmallVector<int64_t, SIZE>(sizes.begin(), sizes.end());
}
inline c10::SmallVector<int64_t, SIZE> reduce_ops_npu_output_size(const at::Tensor& self, at::IntArrayRef dims,
                                                                   bool keepdim) {
    const int64_t ndim = self.dim();
    std::vector<bool> reduced(static_cast<size_t>(std::max<int64_t>(ndim, 1)), dims.empty());
    for (int64_t dim : dims) reduced[c10::maybe_wrap_dim(dim, ndim)] = true;
    c10::SmallVector<int64_t, SIZE> sizes;
    for (int64_t i = 0; i < ndim; ++i) {
        if (!reduced[i]) sizes.push_back(self.size(i));
        else if (keepdim) sizes.push_back(1);
    }
    return sizes;
}
inline c10::SmallVector<int64_t, SIZE> array_to_small_vector(at::IntArrayRef sizes) {
    return c10::SmallVector<int64_t, SIZE>(sizes.begin(), sizes.end());
}
}  // namespace op_infer
using namespace op_infer;  // gen_opapi `size:` names the helpers without the namespace

// what an aclnn C API argument became, printed by EXEC_NPU_CMD
struct aclTensor {};
struct aclScalar {};
struct aclIntArray {};
struct aclBoolArray {};
struct aclTensorList {};
struct aclScalarList {};
enum aclDataType { ACL_DT_UNDEFINED = -1 };
namespace c10_npu {
// torch_npu's dtype code -> aclDataType, as op-plugin's kernels convert dtype-code arguments
inline aclDataType GetAclDataType(int64_t code) { return static_cast<aclDataType>(code); }
}  // namespace c10_npu
inline aclTensor* ConvertType(const at::Tensor&) { static aclTensor t; return &t; }
inline aclTensor* ConvertType(const c10::optional<at::Tensor>& t) { static aclTensor x; return t ? &x : nullptr; }
inline aclScalar* ConvertType(const at::Scalar&) { static aclScalar s; return &s; }
inline aclScalar* ConvertType(const c10::optional<at::Scalar>& s) { static aclScalar x; return s ? &x : nullptr; }
inline aclIntArray* ConvertType(const at::IntArrayRef&) { static aclIntArray a; return &a; }
inline aclIntArray* ConvertType(const at::OptionalIntArrayRef& a) { static aclIntArray x; return a ? &x : nullptr; }
inline aclTensorList* ConvertType(const at::TensorList&) { static aclTensorList l; return &l; }
inline aclScalarList* ConvertType(const at::ArrayRef<at::Scalar>&) { static aclScalarList l; return &l; }
inline aclDataType ConvertType(const at::ScalarType t) { return static_cast<aclDataType>(static_cast<int>(t)); }
template <std::size_t N>
inline aclBoolArray* ConvertType(const std::array<bool, N>&) { static aclBoolArray a; return &a; }
template <typename T>
T ConvertType(T value) {
    static_assert(std::is_arithmetic_v<T> || std::is_enum_v<T> || std::is_pointer_v<T>,
                  "EXEC_NPU_CMD would pass this argument to the aclnn C API as it is (no ConvertType overload): "
                  "convert it first (char* for a string, value_or for an optional scalar)");
    return value;
}
template <typename T>
const char* opgen_kind(T) {
    if constexpr (std::is_same_v<T, char*> || std::is_same_v<T, const char*>) return "char*";
    else if constexpr (std::is_same_v<T, aclTensor*>) return "aclTensor*";
    else if constexpr (std::is_same_v<T, aclScalar*>) return "aclScalar*";
    else if constexpr (std::is_same_v<T, aclIntArray*>) return "aclIntArray*";
    else if constexpr (std::is_same_v<T, aclBoolArray*>) return "aclBoolArray*";
    else if constexpr (std::is_same_v<T, aclTensorList*>) return "aclTensorList*";
    else if constexpr (std::is_same_v<T, aclScalarList*>) return "aclScalarList*";
    else if constexpr (std::is_pointer_v<T>) return "pointer";
    else if constexpr (std::is_same_v<T, bool>) return "bool";
    else if constexpr (std::is_floating_point_v<T>) return "double";
    else if constexpr (std::is_enum_v<T>) return "aclDataType";
    else return "int64_t";
}
template <typename... Ts>
void opgen_exec(const char* api, Ts&... args) {
    std::cout << "-- " << api << ":";
    ((std::cout << " " << opgen_kind(ConvertType(args))), ...);
    std::cout << "\n";
}

#define TORCH_CHECK(condition, ...) \
    if (!(condition)) throw std::runtime_error("TORCH_CHECK failed")
#define DO_COMPATIBILITY(aclnn, fallback) (void)0
#define EXEC_NPU_CMD(aclnn_api, ...) opgen_exec(#aclnn_api, __VA_ARGS__)

inline void opgen_print(const at::Tensor& t) {
    std::cout << "[";
    for (size_t i = 0; i < t.shape.size(); ++i) std::cout << (i ? ", " : "") << t.shape[i];
    std::cout << "] " << at::dtype_name(t.type) << "\n";
}
inline void opgen_print_all(const at::Tensor& t) { opgen_print(t); }
inline void opgen_print_all(const std::vector<at::Tensor>& ts) {
    for (const auto& t : ts) opgen_print(t);
}
template <class... Ts>
void opgen_print_all(const std::tuple<Ts...>& outputs) {
    std::apply([](const auto&... t) { (opgen_print(t), ...); }, outputs);
}
