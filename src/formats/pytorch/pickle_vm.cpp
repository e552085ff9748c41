#include "formats/pytorch/pickle_vm.h"

#include <bit>
#include <charconv>
#include <cstdio>
#include <unordered_map>
#include <unordered_set>

#include "core/printable.h"

namespace tensormorph::pytorch {

std::string_view pickle_kind_name(PickleKind kind) {
  switch (kind) {
    case PickleKind::kNone: return "None";
    case PickleKind::kBool: return "bool";
    case PickleKind::kInt: return "int";
    case PickleKind::kBigInt: return "int (wider than 64 bits)";
    case PickleKind::kFloat: return "float";
    case PickleKind::kString: return "str";
    case PickleKind::kBytes: return "bytes";
    case PickleKind::kTuple: return "tuple";
    case PickleKind::kList: return "list";
    case PickleKind::kDict: return "dict";
    case PickleKind::kSet: return "set";
    case PickleKind::kGlobal: return "global";
    case PickleKind::kObject: return "object";
    case PickleKind::kPersistent: return "persistent id";
  }
  return "value";
}

namespace {

// Opcodes of pickle protocols 0-5, named as in CPython's pickle.py.
enum Opcode : unsigned char {
  kMark = '(', kStop = '.', kPop = '0', kPopMark = '1', kDup = '2', kFloat = 'F', kInt = 'I',
  kBinInt = 'J', kBinInt1 = 'K', kLong = 'L', kBinInt2 = 'M', kNone = 'N', kPersId = 'P',
  kBinPersId = 'Q', kReduce = 'R', kString = 'S', kBinString = 'T', kShortBinString = 'U',
  kUnicode = 'V', kBinUnicode = 'X', kAppend = 'a', kBuild = 'b', kGlobal = 'c', kDict = 'd',
  kEmptyDict = '}', kAppends = 'e', kGet = 'g', kBinGet = 'h', kInst = 'i', kLongBinGet = 'j',
  kList = 'l', kEmptyList = ']', kObj = 'o', kPut = 'p', kBinPut = 'q', kLongBinPut = 'r',
  kSetItem = 's', kTuple = 't', kEmptyTuple = ')', kSetItems = 'u', kBinFloat = 'G',
  kProto = 0x80, kNewObj = 0x81, kExt1 = 0x82, kExt2 = 0x83, kExt4 = 0x84, kTuple1 = 0x85,
  kTuple2 = 0x86, kTuple3 = 0x87, kNewTrue = 0x88, kNewFalse = 0x89, kLong1 = 0x8a, kLong4 = 0x8b,
  kBinBytes = 'B', kShortBinBytes = 'C', kShortBinUnicode = 0x8c, kBinUnicode8 = 0x8d,
  kBinBytes8 = 0x8e, kEmptySet = 0x8f, kAddItems = 0x90, kFrozenSet = 0x91, kNewObjEx = 0x92,
  kStackGlobal = 0x93, kMemoize = 0x94, kFrame = 0x95, kByteArray8 = 0x96, kNextBuffer = 0x97,
  kReadonlyBuffer = 0x98,
};

constexpr int kHighestProtocol = 5;

// Python 2 module names that Python 3's unpickler maps to their new homes.
std::string modern_module(std::string_view module) {
  if (module == "__builtin__") return "builtins";
  if (module == "copy_reg") return "copyreg";
  return std::string(module);
}

// Latin-1 encoding of UTF-8 text, as `_codecs.encode(text, "latin1")` produces for protocol-2 bytes.
bool utf8_to_latin1(std::string_view text, std::string* out) {
  out->clear();
  for (size_t i = 0; i < text.size(); ++i) {
    const auto lead = static_cast<unsigned char>(text[i]);
    if (lead < 0x80) {
      out->push_back(static_cast<char>(lead));
    } else if ((lead & 0xE0) == 0xC0 && i + 1 < text.size()) {
      const unsigned code = ((lead & 0x1Fu) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3Fu);
      if (code > 0xFF) return false;
      out->push_back(static_cast<char>(code));
      ++i;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

// Executes one pickle stream; a class (not a function) so the state is in one place.
class PickleMachine {
 public:
  PickleMachine(std::string_view bytes, std::string_view source, const PickleLimits& limits)
      : bytes_(bytes), source_(source), limits_(limits) {}

  Result<PickleTree> run() {
    while (true) {
      op_offset_ = pos_;
      if (pos_ >= bytes_.size()) return error("pickle ended without a STOP opcode");
      const auto op = static_cast<unsigned char>(bytes_[pos_++]);
      if (op == kStop) {
        TM_ASSIGN_OR_RETURN(PickleValue * root, pop());
        tree_.root_ = root;
        return std::move(tree_);
      }
      TM_RETURN_IF_ERROR(step(op));
    }
  }

 private:
  Status error(std::string_view message) const {
    return Status::FormatError(source_ + ": pickle byte " + std::to_string(op_offset_) + ": " + std::string(message));
  }
  Status unsupported(std::string_view message) const {
    return Status::Unsupported(source_ + ": pickle byte " + std::to_string(op_offset_) + ": " + std::string(message));
  }

  Status spend(uint64_t units) {
    units_ += units;
    if (units_ > limits_.max_nodes) {
      return Status::ResourceExhausted(source_ + ": pickle byte " + std::to_string(op_offset_) +
                                       ": pickle builds more than " + std::to_string(limits_.max_nodes) +
                                       " values; refusing to continue");
    }
    return Status::Ok();
  }

  Result<PickleValue*> make(PickleKind kind) {
    TM_RETURN_IF_ERROR(spend(1));
    PickleValue& value = tree_.nodes_->emplace_back();
    value.kind = kind;
    value.offset = op_offset_;
    return &value;
  }

  Status push(PickleValue* value) {
    if (stack_.size() >= limits_.max_stack) {
      return Status::ResourceExhausted(source_ + ": pickle byte " + std::to_string(op_offset_) + ": stack deeper than " +
                                       std::to_string(limits_.max_stack) + " values");
    }
    stack_.push_back(value);
    return Status::Ok();
  }
  Status push_new(PickleKind kind) {
    TM_ASSIGN_OR_RETURN(PickleValue * value, make(kind));
    return push(value);
  }

  // Values above the innermost MARK may not be popped individually.
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }

  Result<PickleValue*> pop() {
    if (stack_.size() <= floor()) return error("stack underflow");
    PickleValue* value = stack_.back();
    stack_.pop_back();
    return value;
  }
  Result<PickleValue*> top() {
    if (stack_.size() <= floor()) return error("stack underflow");
    return stack_.back();
  }
  Result<std::vector<PickleValue*>> pop_mark() {
    if (marks_.empty()) return error("no MARK to pop to");
    const size_t mark = marks_.back();
    marks_.pop_back();
    std::vector<PickleValue*> items(stack_.begin() + static_cast<std::ptrdiff_t>(mark), stack_.end());
    stack_.resize(mark);
    return items;
  }

  Result<std::string_view> read(uint64_t length) {
    if (length > bytes_.size() - pos_) {
      return error("needs " + std::to_string(length) + " bytes but only " + std::to_string(bytes_.size() - pos_) +
                   " remain (truncated pickle)");
    }
    std::string_view out = bytes_.substr(pos_, length);
    pos_ += length;
    return out;
  }
  Result<uint64_t> read_uint(unsigned width) {
    TM_ASSIGN_OR_RETURN(std::string_view raw, read(width));
    uint64_t value = 0;
    for (unsigned i = width; i-- > 0;) value = (value << 8) | static_cast<unsigned char>(raw[i]);
    return value;
  }
  Result<std::string_view> read_line() {
    const size_t end = bytes_.find('\n', pos_);
    if (end == std::string_view::npos) return error("text argument has no terminating newline (truncated pickle)");
    std::string_view line = bytes_.substr(pos_, end - pos_);
    pos_ = end + 1;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    return line;
  }

  Status push_int(int64_t value) {
    TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kInt));
    node->integer = value;
    return push(node);
  }
  Status push_text(PickleKind kind, std::string_view text) {
    TM_ASSIGN_OR_RETURN(PickleValue * node, make(kind));
    node->text = std::string(text);
    return push(node);
  }
  Status push_sized(PickleKind kind, unsigned width) {
    TM_ASSIGN_OR_RETURN(uint64_t length, read_uint(width));
    TM_ASSIGN_OR_RETURN(std::string_view text, read(length));
    return push_text(kind, text);
  }

  // LONG1/LONG4: little-endian two's complement of any width.
  Status push_long(uint64_t length) {
    TM_ASSIGN_OR_RETURN(std::string_view raw, read(length));
    if (length > 8) return push_new(PickleKind::kBigInt);
    uint64_t bits = 0;
    for (size_t i = length; i-- > 0;) bits = (bits << 8) | static_cast<unsigned char>(raw[i]);
    if (length > 0 && length < 8 && (static_cast<unsigned char>(raw[length - 1]) & 0x80)) {
      bits |= ~uint64_t{0} << (8 * length);  // sign-extend
    }
    return push_int(static_cast<int64_t>(bits));
  }

  // INT / LONG text forms ("I42\n", "I01\n" for True, "L42L\n").
  Status push_decimal(std::string_view line, bool allow_bool) {
    if (allow_bool && (line == "00" || line == "01")) {
      TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kBool));
      node->boolean = line == "01";
      return push(node);
    }
    if (!line.empty() && line.back() == 'L') line.remove_suffix(1);
    if (!line.empty() && line.front() == '+') line.remove_prefix(1);
    int64_t value = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
    if (ec == std::errc::result_out_of_range) return push_new(PickleKind::kBigInt);
    if (ec != std::errc() || end != line.data() + line.size() || line.empty()) {
      return error("malformed integer text " + quoted_name(line.substr(0, 40)));
    }
    return push_int(value);
  }

  Status push_float_text(std::string_view line) {
    double value = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), value);
    if (ec != std::errc() || end != line.data() + line.size()) {
      return error("malformed float text " + quoted_name(line.substr(0, 40)));
    }
    TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kFloat));
    node->real = value;
    return push(node);
  }

  Status push_tuple(std::vector<PickleValue*> items) {
    TM_RETURN_IF_ERROR(spend(items.size()));
    TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kTuple));
    node->items = std::move(items);
    return push(node);
  }
  Status push_tuple_of(size_t count) {
    if (stack_.size() - floor() < count) return error("stack underflow");
    std::vector<PickleValue*> items(stack_.end() - static_cast<std::ptrdiff_t>(count), stack_.end());
    stack_.resize(stack_.size() - count);
    return push_tuple(std::move(items));
  }

  Status grow(PickleValue* container, size_t added) {
    const size_t current = container->items.size() + container->entries.size();
    if (added > limits_.max_container || current > limits_.max_container - added) {
      return Status::ResourceExhausted(source_ + ": pickle byte " + std::to_string(op_offset_) + ": a " +
                                       std::string(pickle_kind_name(container->kind)) + " grows beyond " +
                                       std::to_string(limits_.max_container) + " elements");
    }
    return spend(added);
  }

  Status append_items(std::vector<PickleValue*> items) {
    TM_ASSIGN_OR_RETURN(PickleValue * target, top());
    if (target->kind != PickleKind::kList && target->kind != PickleKind::kObject) {
      return error("APPEND to a " + std::string(pickle_kind_name(target->kind)));
    }
    TM_RETURN_IF_ERROR(grow(target, items.size()));
    target->items.insert(target->items.end(), items.begin(), items.end());
    return Status::Ok();
  }

  Status set_items(const std::vector<PickleValue*>& pairs) {
    if (pairs.size() % 2 != 0) return error("SETITEMS with an odd number of values");
    TM_ASSIGN_OR_RETURN(PickleValue * target, top());
    if (target->kind != PickleKind::kDict && target->kind != PickleKind::kObject) {
      return error("SETITEM on a " + std::string(pickle_kind_name(target->kind)));
    }
    TM_RETURN_IF_ERROR(grow(target, pairs.size() / 2));
    for (size_t i = 0; i < pairs.size(); i += 2) target->entries.emplace_back(pairs[i], pairs[i + 1]);
    return Status::Ok();
  }

  Status memo_put(uint64_t index) {
    TM_ASSIGN_OR_RETURN(PickleValue * value, top());
    if (memo_.size() >= limits_.max_memo && !memo_.contains(index)) {
      return Status::ResourceExhausted(source_ + ": pickle byte " + std::to_string(op_offset_) + ": memo exceeds " +
                                       std::to_string(limits_.max_memo) + " entries");
    }
    memo_[index] = value;
    return Status::Ok();
  }
  Status memo_get(uint64_t index) {
    auto it = memo_.find(index);
    if (it == memo_.end()) return error("memo key " + std::to_string(index) + " was never stored");
    return push(it->second);
  }
  Result<uint64_t> parse_index(std::string_view line) {
    uint64_t index = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), index);
    if (ec != std::errc() || end != line.data() + line.size() || line.empty()) {
      return error("malformed memo key " + quoted_name(line.substr(0, 40)));
    }
    return index;
  }

  Status push_global(std::string_view module, std::string_view name) {
    TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kGlobal));
    node->text = modern_module(module) + "." + std::string(name);
    return push(node);
  }

  void note_called(const PickleValue* callable) {
    if (callable->kind != PickleKind::kGlobal) return;
    if (called_seen_.insert(callable->text).second) tree_.called_globals_.push_back(callable->text);
  }

  Result<PickleValue*> make_object(PickleValue* callable, PickleValue* args) {
    TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kObject));
    node->callable = callable;
    node->args = args;
    note_called(callable);
    return node;
  }

  // The few builtins whose results are plain data are evaluated symbolically; everything else
  // becomes an opaque object node.
  Result<PickleValue*> reduce(PickleValue* callable, PickleValue* args) {
    if (args->kind != PickleKind::kTuple) {
      return error("REDUCE arguments are a " + std::string(pickle_kind_name(args->kind)) + ", not a tuple");
    }
    const std::vector<PickleValue*>& a = args->items;
    if (callable->kind == PickleKind::kGlobal) {
      const std::string& name = callable->text;
      if (name == "collections.OrderedDict" || name == "builtins.dict") {
        if (a.empty()) return make(PickleKind::kDict);
        if (a.size() == 1 && a[0]->kind == PickleKind::kDict) {
          TM_ASSIGN_OR_RETURN(PickleValue * dict, make(PickleKind::kDict));
          TM_RETURN_IF_ERROR(grow(dict, a[0]->entries.size()));
          dict->entries = a[0]->entries;
          return dict;
        }
        if (a.size() == 1 && (a[0]->kind == PickleKind::kList || a[0]->kind == PickleKind::kTuple)) {
          TM_ASSIGN_OR_RETURN(PickleValue * dict, make(PickleKind::kDict));
          TM_RETURN_IF_ERROR(grow(dict, a[0]->items.size()));
          for (PickleValue* pair : a[0]->items) {
            if (pair->kind != PickleKind::kTuple || pair->items.size() != 2) {
              return error(name + " called with an item that is not a (key, value) pair");
            }
            dict->entries.emplace_back(pair->items[0], pair->items[1]);
          }
          return dict;
        }
      }
      const bool is_set = name == "builtins.set" || name == "builtins.frozenset";
      if (is_set || name == "torch.Size" || name == "builtins.list" || name == "builtins.tuple") {
        const PickleKind kind = is_set ? PickleKind::kSet
                                : name == "builtins.list" ? PickleKind::kList : PickleKind::kTuple;
        if (a.empty()) return make(kind);
        if (a.size() == 1 && (a[0]->kind == PickleKind::kList || a[0]->kind == PickleKind::kTuple ||
                              a[0]->kind == PickleKind::kSet)) {
          TM_ASSIGN_OR_RETURN(PickleValue * node, make(kind));
          TM_RETURN_IF_ERROR(grow(node, a[0]->items.size()));
          node->items = a[0]->items;
          return node;
        }
      }
      if (name == "_codecs.encode" && !a.empty() && a[0]->kind == PickleKind::kString) {
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kBytes));
        if (!utf8_to_latin1(a[0]->text, &node->text)) node->text = a[0]->text;
        return node;
      }
      if ((name == "builtins.bytearray" || name == "builtins.bytes") &&
          (a.empty() || (a.size() == 1 && a[0]->kind == PickleKind::kBytes))) {
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kBytes));
        if (!a.empty()) node->text = a[0]->text;
        return node;
      }
      if (name == "copyreg._reconstructor" && a.size() == 3) {
        TM_ASSIGN_OR_RETURN(PickleValue * empty, make(PickleKind::kTuple));
        TM_ASSIGN_OR_RETURN(PickleValue * node, make_object(a[0], empty));
        if (a[2]->kind != PickleKind::kNone) node->state = a[2];
        return node;
      }
    }
    return make_object(callable, args);
  }

  Result<PickleValue*> instantiate(PickleValue* cls, PickleValue* args) {
    if (cls->is_global("collections.OrderedDict") || cls->is_global("builtins.dict")) return make(PickleKind::kDict);
    if (cls->is_global("builtins.set") || cls->is_global("builtins.frozenset")) return make(PickleKind::kSet);
    if (cls->is_global("builtins.list")) return make(PickleKind::kList);
    return make_object(cls, args);
  }

  Status build() {
    TM_ASSIGN_OR_RETURN(PickleValue * state, pop());
    TM_ASSIGN_OR_RETURN(PickleValue * target, top());
    if (target->kind != PickleKind::kObject && target->kind != PickleKind::kDict) {
      return error("BUILD on a " + std::string(pickle_kind_name(target->kind)));
    }
    target->state = state;
    return Status::Ok();
  }

  Status step(unsigned char op) {
    switch (op) {
      case kProto: {
        TM_ASSIGN_OR_RETURN(uint64_t protocol, read_uint(1));
        if (protocol > kHighestProtocol) return unsupported("pickle protocol " + std::to_string(protocol));
        return Status::Ok();
      }
      case kFrame: {
        TM_ASSIGN_OR_RETURN(uint64_t length, read_uint(8));
        if (length > bytes_.size() - pos_) return error("FRAME of " + std::to_string(length) + " bytes overruns the pickle");
        return Status::Ok();
      }
      case kMark:
        if (marks_.size() >= limits_.max_marks) {
          return Status::ResourceExhausted(source_ + ": pickle byte " + std::to_string(op_offset_) +
                                           ": more than " + std::to_string(limits_.max_marks) + " nested MARKs");
        }
        marks_.push_back(stack_.size());
        return Status::Ok();
      case kPop:
        if (stack_.size() > floor()) {
          stack_.pop_back();
          return Status::Ok();
        }
        return pop_mark().status();
      case kPopMark: return pop_mark().status();
      case kDup: {
        TM_ASSIGN_OR_RETURN(PickleValue * value, top());
        return push(value);
      }
      case kNone: return push_new(PickleKind::kNone);
      case kNewTrue:
      case kNewFalse: {
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kBool));
        node->boolean = op == kNewTrue;
        return push(node);
      }
      case kBinInt: {
        TM_ASSIGN_OR_RETURN(uint64_t bits, read_uint(4));
        return push_int(static_cast<int32_t>(static_cast<uint32_t>(bits)));
      }
      case kBinInt1: {
        TM_ASSIGN_OR_RETURN(uint64_t value, read_uint(1));
        return push_int(static_cast<int64_t>(value));
      }
      case kBinInt2: {
        TM_ASSIGN_OR_RETURN(uint64_t value, read_uint(2));
        return push_int(static_cast<int64_t>(value));
      }
      case kLong1: {
        TM_ASSIGN_OR_RETURN(uint64_t length, read_uint(1));
        return push_long(length);
      }
      case kLong4: {
        TM_ASSIGN_OR_RETURN(uint64_t bits, read_uint(4));
        const auto length = static_cast<int32_t>(static_cast<uint32_t>(bits));
        if (length < 0) return error("LONG4 with negative length");
        return push_long(static_cast<uint64_t>(length));
      }
      case kInt:
      case kLong: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        return push_decimal(line, op == kInt);
      }
      case kBinFloat: {
        TM_ASSIGN_OR_RETURN(std::string_view raw, read(8));
        uint64_t bits = 0;
        for (char c : raw) bits = (bits << 8) | static_cast<unsigned char>(c);  // big-endian
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kFloat));
        node->real = std::bit_cast<double>(bits);
        return push(node);
      }
      case kFloat: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        return push_float_text(line);
      }
      case kString: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        if (line.size() < 2 || (line.front() != '\'' && line.front() != '"') || line.back() != line.front()) {
          return error("STRING argument is not quoted");
        }
        return push_text(PickleKind::kString, line.substr(1, line.size() - 2));  // escapes are kept as written
      }
      case kUnicode: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        return push_text(PickleKind::kString, line);
      }
      case kBinString: {
        TM_ASSIGN_OR_RETURN(uint64_t bits, read_uint(4));
        const auto length = static_cast<int32_t>(static_cast<uint32_t>(bits));
        if (length < 0) return error("BINSTRING with negative length");
        TM_ASSIGN_OR_RETURN(std::string_view text, read(static_cast<uint64_t>(length)));
        return push_text(PickleKind::kString, text);
      }
      case kShortBinString: return push_sized(PickleKind::kString, 1);
      case kShortBinUnicode: return push_sized(PickleKind::kString, 1);
      case kBinUnicode: return push_sized(PickleKind::kString, 4);
      case kBinUnicode8: return push_sized(PickleKind::kString, 8);
      case kShortBinBytes: return push_sized(PickleKind::kBytes, 1);
      case kBinBytes: return push_sized(PickleKind::kBytes, 4);
      case kBinBytes8: return push_sized(PickleKind::kBytes, 8);
      case kByteArray8: return push_sized(PickleKind::kBytes, 8);
      case kEmptyTuple: return push_new(PickleKind::kTuple);
      case kTuple: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        return push_tuple(std::move(items));
      }
      case kTuple1: return push_tuple_of(1);
      case kTuple2: return push_tuple_of(2);
      case kTuple3: return push_tuple_of(3);
      case kEmptyList: return push_new(PickleKind::kList);
      case kList: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kList));
        TM_RETURN_IF_ERROR(grow(node, items.size()));
        node->items = std::move(items);
        return push(node);
      }
      case kAppend: {
        TM_ASSIGN_OR_RETURN(PickleValue * value, pop());
        return append_items({value});
      }
      case kAppends: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        return append_items(std::move(items));
      }
      case kEmptyDict: return push_new(PickleKind::kDict);
      case kDict: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        if (items.size() % 2 != 0) return error("DICT with an odd number of values");
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kDict));
        TM_RETURN_IF_ERROR(grow(node, items.size() / 2));
        for (size_t i = 0; i < items.size(); i += 2) node->entries.emplace_back(items[i], items[i + 1]);
        return push(node);
      }
      case kSetItem: {
        TM_ASSIGN_OR_RETURN(PickleValue * value, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * key, pop());
        return set_items({key, value});
      }
      case kSetItems: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        return set_items(items);
      }
      case kEmptySet: return push_new(PickleKind::kSet);
      case kAddItems: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        TM_ASSIGN_OR_RETURN(PickleValue * target, top());
        if (target->kind != PickleKind::kSet) return error("ADDITEMS to a " + std::string(pickle_kind_name(target->kind)));
        TM_RETURN_IF_ERROR(grow(target, items.size()));
        target->items.insert(target->items.end(), items.begin(), items.end());
        return Status::Ok();
      }
      case kFrozenSet: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kSet));
        TM_RETURN_IF_ERROR(grow(node, items.size()));
        node->items = std::move(items);
        return push(node);
      }
      case kPut: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        TM_ASSIGN_OR_RETURN(uint64_t index, parse_index(line));
        return memo_put(index);
      }
      case kBinPut: {
        TM_ASSIGN_OR_RETURN(uint64_t index, read_uint(1));
        return memo_put(index);
      }
      case kLongBinPut: {
        TM_ASSIGN_OR_RETURN(uint64_t index, read_uint(4));
        return memo_put(index);
      }
      case kMemoize: return memo_put(memo_.size());
      case kGet: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        TM_ASSIGN_OR_RETURN(uint64_t index, parse_index(line));
        return memo_get(index);
      }
      case kBinGet: {
        TM_ASSIGN_OR_RETURN(uint64_t index, read_uint(1));
        return memo_get(index);
      }
      case kLongBinGet: {
        TM_ASSIGN_OR_RETURN(uint64_t index, read_uint(4));
        return memo_get(index);
      }
      case kGlobal: {
        TM_ASSIGN_OR_RETURN(std::string_view module, read_line());
        TM_ASSIGN_OR_RETURN(std::string_view name, read_line());
        return push_global(module, name);
      }
      case kStackGlobal: {
        TM_ASSIGN_OR_RETURN(PickleValue * name, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * module, pop());
        if (name->kind != PickleKind::kString || module->kind != PickleKind::kString) {
          return error("STACK_GLOBAL needs two strings");
        }
        return push_global(module->text, name->text);
      }
      case kReduce: {
        TM_ASSIGN_OR_RETURN(PickleValue * args, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * callable, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * result, reduce(callable, args));
        return push(result);
      }
      case kNewObj: {
        TM_ASSIGN_OR_RETURN(PickleValue * args, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * cls, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * result, instantiate(cls, args));
        return push(result);
      }
      case kNewObjEx: {
        TM_ASSIGN_OR_RETURN(PickleValue * kwargs, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * args, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * cls, pop());
        (void)kwargs;
        TM_ASSIGN_OR_RETURN(PickleValue * result, instantiate(cls, args));
        return push(result);
      }
      case kInst: {
        TM_ASSIGN_OR_RETURN(std::string_view module, read_line());
        TM_ASSIGN_OR_RETURN(std::string_view name, read_line());
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        TM_RETURN_IF_ERROR(push_global(module, name));
        TM_ASSIGN_OR_RETURN(PickleValue * cls, pop());
        TM_RETURN_IF_ERROR(spend(items.size()));
        TM_ASSIGN_OR_RETURN(PickleValue * args, make(PickleKind::kTuple));
        args->items = std::move(items);
        TM_ASSIGN_OR_RETURN(PickleValue * result, make_object(cls, args));
        return push(result);
      }
      case kObj: {
        TM_ASSIGN_OR_RETURN(std::vector<PickleValue*> items, pop_mark());
        if (items.empty()) return error("OBJ without a class");
        TM_RETURN_IF_ERROR(spend(items.size()));
        TM_ASSIGN_OR_RETURN(PickleValue * args, make(PickleKind::kTuple));
        args->items.assign(items.begin() + 1, items.end());
        TM_ASSIGN_OR_RETURN(PickleValue * result, make_object(items.front(), args));
        return push(result);
      }
      case kBuild: return build();
      case kPersId: {
        TM_ASSIGN_OR_RETURN(std::string_view line, read_line());
        TM_ASSIGN_OR_RETURN(PickleValue * id, make(PickleKind::kString));
        id->text = std::string(line);
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kPersistent));
        node->items.push_back(id);
        return push(node);
      }
      case kBinPersId: {
        TM_ASSIGN_OR_RETURN(PickleValue * id, pop());
        TM_ASSIGN_OR_RETURN(PickleValue * node, make(PickleKind::kPersistent));
        node->items.push_back(id);
        return push(node);
      }
      case kExt1:
      case kExt2:
      case kExt4: return unsupported("copyreg extension codes (EXT1/EXT2/EXT4) are not supported");
      case kNextBuffer: return unsupported("out-of-band buffers (NEXT_BUFFER) are not supported");
      case kReadonlyBuffer: return top().status();
      default: {
        char hex[8];
        std::snprintf(hex, sizeof hex, "0x%02x", op);
        return error("unknown opcode " + std::string(hex));
      }
    }
  }

  std::string_view bytes_;
  std::string source_;
  PickleLimits limits_;
  uint64_t pos_ = 0;
  uint64_t op_offset_ = 0;
  uint64_t units_ = 0;
  PickleTree tree_;
  std::vector<PickleValue*> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, PickleValue*> memo_;
  std::unordered_set<std::string> called_seen_;
};

Result<PickleTree> run_pickle(std::string_view bytes, std::string_view source, const PickleLimits& limits) {
  PickleMachine machine(bytes, source, limits);
  return machine.run();
}

}  // namespace tensormorph::pytorch
