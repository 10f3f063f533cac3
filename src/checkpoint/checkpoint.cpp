// HDF5 checkpoint writer/reader (layout in checkpoint.h). Only the HDF5 C API; every call's
// return code is checked, and HDF5's own error-stack printing is switched off so that users see
// one line from us instead of a page of library internals.
#include "checkpoint/checkpoint.h"

#include <fcntl.h>
#include <hdf5.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <set>
#include <utility>

#include "checkpoint/file_sum.h"
#include "core/error.h"
#include "core/file.h"

namespace fs = std::filesystem;

namespace hylo {
namespace {

constexpr const char* kFormat = "hylo-checkpoint";
constexpr int64_t kFormatVersion = 1;

// libhdf5 (1.10) keeps a file whose H5Fclose failed (a full disk while flushing) as a broken but
// valid id: closing it again, as its atexit handler does, segfaults. So it gets no atexit handler
// (this must precede the library's first call: hence a static initializer); every file is closed
// explicitly here, and a process that exits needs no other cleanup from it.
[[maybe_unused]] const herr_t kNoAtexit = H5dont_atexit();

// H5Eset_auto is per thread in thread-safe builds, so every entry point calls this.
void silence_hdf5() { H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr); }

// Owns one hid_t and its matching close function.
class H5Obj {
 public:
  H5Obj() = default;
  H5Obj(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  H5Obj(H5Obj&& o) noexcept : id_(std::exchange(o.id_, -1)), close_(o.close_) {}
  H5Obj& operator=(H5Obj&& o) noexcept {
    if (this != &o) {
      close();
      id_ = std::exchange(o.id_, -1);
      close_ = o.close_;
    }
    return *this;
  }
  H5Obj(const H5Obj&) = delete;
  H5Obj& operator=(const H5Obj&) = delete;
  ~H5Obj() { close(); }
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }
  herr_t close() {
    herr_t r = id_ >= 0 && close_ ? close_(id_) : 0;
    id_ = -1;
    return r;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

uint32_t checksum(const void* data, size_t bytes) {
  return uint32_t(crc32_z(0L, static_cast<const Bytef*>(data), bytes));
}

struct DTypeInfo {
  const char* name;
  DType dtype;
  hid_t file_type, mem_type;
};

// bf16 has no HDF5 type: stored as its raw 16 bits with dtype="bf16".
DTypeInfo dtype_info(DType t) {
  switch (t) {
    case DType::f32: return {"f32", t, H5T_IEEE_F32LE, H5T_NATIVE_FLOAT};
    case DType::f64: return {"f64", t, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE};
    case DType::bf16: return {"bf16", t, H5T_STD_U16LE, H5T_NATIVE_UINT16};
    case DType::i32: return {"i32", t, H5T_STD_I32LE, H5T_NATIVE_INT32};
    case DType::i64: return {"i64", t, H5T_STD_I64LE, H5T_NATIVE_INT64};
    case DType::u8: return {"u8", t, H5T_STD_U8LE, H5T_NATIVE_UINT8};
  }
  HYLO_FAIL("checkpoint: unknown dtype {}", int(t));
}

std::optional<DType> dtype_from_name(const std::string& name) {
  for (DType t : {DType::f32, DType::f64, DType::bf16, DType::i32, DType::i64, DType::u8})
    if (name == dtype_info(t).name) return t;
  return std::nullopt;
}

H5Obj string_type(size_t bytes) {
  H5Obj t(H5Tcopy(H5T_C_S1), H5Tclose);
  // A fixed-length type cannot have size 0; an empty string is stored as one NUL of padding.
  if (!t.ok() || H5Tset_size(t.get(), std::max<size_t>(bytes, 1)) < 0 ||
      H5Tset_strpad(t.get(), H5T_STR_NULLPAD) < 0 || H5Tset_cset(t.get(), H5T_CSET_UTF8) < 0)
    HYLO_FAIL("checkpoint: cannot build an HDF5 string type of {} bytes", bytes);
  return t;
}

H5Obj ordered_gcpl(hid_t klass) {
  H5Obj p(H5Pcreate(klass), H5Pclose);
  HYLO_CHECK(p.ok() && H5Pset_link_creation_order(p.get(), H5P_CRT_ORDER_TRACKED | H5P_CRT_ORDER_INDEXED) >= 0,
             "checkpoint: cannot create an HDF5 property list");
  return p;
}

// Our atomicity comes from temp file + rename, not from HDF5's flock(), which fails outright on
// filesystems without lock support (common for cluster NFS/Lustre mounts).
H5Obj file_access() {
  H5Obj fapl(H5Pcreate(H5P_FILE_ACCESS), H5Pclose);
  HYLO_CHECK(fapl.ok(), "checkpoint: cannot create an HDF5 property list");
#if H5_VERSION_GE(1, 10, 7)
  HYLO_CHECK(H5Pset_file_locking(fapl.get(), false, true) >= 0, "checkpoint: cannot configure HDF5 file locking");
#endif
  return fapl;
}

void fsync_path(const std::string& path, bool directory) {
  int fd = ::open(path.c_str(), O_RDONLY | (directory ? O_DIRECTORY : 0));
  HYLO_CHECK(fd >= 0, "{}: cannot open for fsync: {}", path, std::strerror(errno));
  int rc = ::fsync(fd);
  int err = errno;
  ::close(fd);
  // Some filesystems refuse fsync on directories; the rename itself is still atomic there.
  HYLO_CHECK(rc == 0 || (directory && err == EINVAL), "{}: fsync failed: {}", path, std::strerror(err));
}

// ---------------------------------------------------------------------------------------------

class Writer {
 public:
  explicit Writer(std::string display) : display_(std::move(display)) {}

  H5Obj group(hid_t parent, const char* name, const std::string& where) {
    H5Obj gcpl = ordered_gcpl(H5P_GROUP_CREATE);
    H5Obj g(H5Gcreate2(parent, name, H5P_DEFAULT, gcpl.get(), H5P_DEFAULT), H5Gclose);
    HYLO_CHECK(g.ok(), "{}: cannot create group {}", display_, where);
    return g;
  }

  void tensors(hid_t group, const std::string& gpath, const std::vector<NamedTensor>& list) {
    for (const NamedTensor& nt : list) {
      const std::string where = gpath + "/" + nt.name;
      check_name(nt.name, where);
      HYLO_CHECK(nt.value.defined(), "{}: tensor {} is undefined", display_, where);
      Tensor host = nt.value.to(Device::cpu).contiguous();
      DTypeInfo info = dtype_info(host.dtype());
      std::vector<hsize_t> dims(host.shape().begin(), host.shape().end());
      dataset(group, nt.name, where, info.file_type, info.mem_type, dims, host.raw(), host.nbytes(), info.name);
    }
  }

  void u64s(hid_t group, const std::string& name, const std::string& where, const std::vector<uint64_t>& v) {
    dataset(group, name, where, H5T_STD_U64LE, H5T_NATIVE_UINT64, std::vector<hsize_t>{hsize_t(v.size())}, v.data(),
            v.size() * sizeof(uint64_t), nullptr);
  }

  void i64(hid_t group, const std::string& name, const std::string& where, int64_t v) {
    dataset(group, name, where, H5T_STD_I64LE, H5T_NATIVE_INT64, std::nullopt, &v, sizeof v, nullptr);
  }

  void text(hid_t group, const std::string& name, const std::string& where, const std::string& s) {
    check_name(name, where);
    H5Obj type = string_type(s.size());
    std::string padded = s.empty() ? std::string(1, '\0') : s;
    dataset(group, name, where, type.get(), type.get(), std::nullopt, padded.data(), s.size(), nullptr);
  }

  void attr_string(hid_t obj, const char* name, const std::string& value) {
    H5Obj type = string_type(value.size());
    std::string padded = value.empty() ? std::string(1, '\0') : value;
    write_attr(obj, name, type.get(), padded.data());
  }
  void attr_i64(hid_t obj, const char* name, int64_t v) { write_attr(obj, name, H5T_NATIVE_INT64, &v); }

  int64_t datasets_written() const { return count_; }

 private:
  void check_name(const std::string& name, const std::string& where) const {
    HYLO_CHECK(!name.empty() && name != "." && name.find('/') == std::string::npos,
               "{}: invalid name '{}' for {} (must be non-empty, not '.', without '/')", display_, name, where);
  }

  // dims: nullopt = scalar. `crc_bytes` may be shorter than the buffer (string padding).
  void dataset(hid_t group, const std::string& name, const std::string& where, hid_t file_type, hid_t mem_type,
               std::optional<std::vector<hsize_t>> dims, const void* data, size_t crc_bytes, const char* dtype) {
    H5Obj space = dims ? H5Obj(H5Screate_simple(int(dims->size()), dims->data(), nullptr), H5Sclose)
                       : H5Obj(H5Screate(H5S_SCALAR), H5Sclose);
    HYLO_CHECK(space.ok(), "{}: cannot create dataspace for {}", display_, where);
    H5Obj ds(H5Dcreate2(group, name.c_str(), file_type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
             H5Dclose);
    HYLO_CHECK(ds.ok(), "{}: cannot create dataset {} (duplicate name?)", display_, where);
    bool empty = H5Sget_simple_extent_npoints(space.get()) == 0;
    if (!empty)
      HYLO_CHECK(H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) >= 0,
                 "{}: cannot write {} (disk full?)", display_, where);
    write_attr(ds.get(), "crc32", H5T_NATIVE_UINT32, std::array{checksum(data, empty ? 0 : crc_bytes)}.data());
    if (dtype) attr_string(ds.get(), "dtype", dtype);
    HYLO_CHECK(ds.close() >= 0, "{}: cannot close dataset {}", display_, where);
    ++count_;
  }

  void write_attr(hid_t obj, const char* name, hid_t type, const void* value) {
    H5Obj space(H5Screate(H5S_SCALAR), H5Sclose);
    H5Obj a(H5Acreate2(obj, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT), H5Aclose);
    HYLO_CHECK(a.ok() && H5Awrite(a.get(), type, value) >= 0, "{}: cannot write attribute '{}'", display_, name);
  }

  std::string display_;
  int64_t count_ = 0;
};

// More than the file will take: the data, and per dataset a generous allowance for its object
// header, attributes and link.
uint64_t estimated_bytes(const CheckpointState& s) {
  uint64_t bytes = 64 << 10, datasets = 16 + s.meta.size();
  for (const auto* list : {&s.model, &s.optim_m, &s.optim_v, &s.buffers, &s.fp8})
    for (const NamedTensor& t : *list) {
      bytes += t.value.defined() ? uint64_t(t.value.nbytes()) : 0;
      ++datasets;
    }
  bytes += (s.rng.size() + s.data_cursor.size()) * 8 + s.config_yaml.size();
  for (const auto& [key, value] : s.meta) bytes += value.size();
  return bytes + datasets * 4096;
}

// Claims the disk space before libhdf5 writes a byte: a full disk (or quota) is then one clear
// error here, instead of a write failing inside libhdf5 and a file it cannot close. Reserved
// beyond the end of the file (the size stays), and the close trims what was not used. File systems
// without fallocate go on unreserved.
void reserve_space(const std::string& tmp, const std::string& display, const CheckpointState& s) {
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CLOEXEC);
  HYLO_CHECK(fd >= 0, "{}: cannot open {}: {}", display, tmp, std::strerror(errno));
  const uint64_t bytes = estimated_bytes(s);
  int rc;
  while ((rc = ::fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, off_t(bytes))) != 0 && errno == EINTR) {
  }
  const int err = errno;
  ::close(fd);
  HYLO_CHECK(rc == 0 || err == EOPNOTSUPP || err == ENOSYS, "{}: cannot reserve {:.1f} MiB for the checkpoint: {} "
             "(disk full?)", display, double(bytes) / (1 << 20), std::strerror(err));
}

void write_file(const std::string& tmp, const std::string& display, const CheckpointState& s) {
  H5Obj fcpl = ordered_gcpl(H5P_FILE_CREATE);
  HYLO_CHECK(H5Pset_userblock(fcpl.get(), kUserBlock) >= 0, "checkpoint: cannot reserve the HDF5 user block");
  H5Obj fapl = file_access();
  // v1.8+ object headers carry their own checksums, so metadata damage is detected too.
  HYLO_CHECK(H5Pset_libver_bounds(fapl.get(), H5F_LIBVER_V18, H5F_LIBVER_LATEST) >= 0,
             "checkpoint: cannot create an HDF5 property list");
  H5Obj file(H5Fcreate(tmp.c_str(), H5F_ACC_TRUNC, fcpl.get(), fapl.get()), H5Fclose);
  HYLO_CHECK(file.ok(), "{}: cannot create {} (directory missing or not writable?)", display, tmp);
  reserve_space(tmp, display, s);
  Writer w(display);
  {  // every object closes before the file, so H5Fclose below really flushes and reports errors
    const hid_t root = file.get();
    w.attr_string(root, "format", kFormat);
    w.attr_i64(root, "format_version", kFormatVersion);
    H5Obj model = w.group(root, "model", "/model");
    w.tensors(model.get(), "/model", s.model);
    H5Obj optim = w.group(root, "optim", "/optim");
    H5Obj m = w.group(optim.get(), "m", "/optim/m");
    w.tensors(m.get(), "/optim/m", s.optim_m);
    H5Obj v = w.group(optim.get(), "v", "/optim/v");
    w.tensors(v.get(), "/optim/v", s.optim_v);
    w.i64(optim.get(), "step", "/optim/step", s.step);
    w.i64(optim.get(), "updates", "/optim/updates", s.updates);
    H5Obj buffers = w.group(root, "buffers", "/buffers");
    w.tensors(buffers.get(), "/buffers", s.buffers);
    if (!s.fp8.empty()) {
      H5Obj fp8 = w.group(root, "fp8", "/fp8");
      w.tensors(fp8.get(), "/fp8", s.fp8);
    }
    w.u64s(root, "rng", "/rng", s.rng);
    H5Obj data = w.group(root, "data", "/data");
    w.u64s(data.get(), "cursor", "/data/cursor", s.data_cursor);
    w.text(root, "config", "/config", s.config_yaml);
    H5Obj meta = w.group(root, "meta", "/meta");
    for (const auto& [key, value] : s.meta) w.text(meta.get(), key, "/meta/" + key, value);
    // Last: a reader that finds /complete knows how many checksummed datasets to expect.
    w.i64(root, "complete", "/complete", w.datasets_written());
  }
  HYLO_CHECK(H5Fflush(file.get(), H5F_SCOPE_GLOBAL) >= 0, "{}: cannot flush {} (disk full?)", display, tmp);
  HYLO_CHECK(file.close() >= 0, "{}: cannot close {} (disk full?)", display, tmp);
}

// ---------------------------------------------------------------------------------------------

class Reader {
 public:
  // keep: the tensors (else only verified); keep_moments: the AdamW moments too; read_data: read
  // and checksum every tensor even when not kept (else, for a file whose whole-file checksum
  // already held, only its structure is checked).
  Reader(std::string path, bool keep, bool keep_moments, bool read_data)
      : path_(std::move(path)), keep_(keep), keep_moments_(keep && keep_moments), read_data_(keep || read_data) {}

  CheckpointState read() {
    open();
    CheckpointState s;
    H5Obj complete_marker = open_dataset(file_.get(), "complete", "/complete");
    const int64_t expected = read_i64(complete_marker, "/complete", /*count=*/false);
    complete_marker.close();

    H5Obj model = open_group(file_.get(), "model", "/model");
    s.model = read_tensors(model.get(), "/model", keep_);
    H5Obj optim = open_group(file_.get(), "optim", "/optim");
    H5Obj m = open_group(optim.get(), "m", "/optim/m");
    s.optim_m = read_tensors(m.get(), "/optim/m", keep_moments_);
    H5Obj v = open_group(optim.get(), "v", "/optim/v");
    s.optim_v = read_tensors(v.get(), "/optim/v", keep_moments_);
    s.step = read_i64(open_dataset(optim.get(), "step", "/optim/step"), "/optim/step", true);
    s.updates = H5Lexists(optim.get(), "updates", H5P_DEFAULT) > 0
                    ? read_i64(open_dataset(optim.get(), "updates", "/optim/updates"), "/optim/updates", true)
                    : s.step;
    H5Obj buffers = open_group(file_.get(), "buffers", "/buffers");
    s.buffers = read_tensors(buffers.get(), "/buffers", keep_);
    if (H5Lexists(file_.get(), "fp8", H5P_DEFAULT) > 0) {
      H5Obj fp8 = open_group(file_.get(), "fp8", "/fp8");
      s.fp8 = read_tensors(fp8.get(), "/fp8", keep_);
    }
    s.rng = read_u64s(open_dataset(file_.get(), "rng", "/rng"), "/rng");
    H5Obj data = open_group(file_.get(), "data", "/data");
    s.data_cursor = read_u64s(open_dataset(data.get(), "cursor", "/data/cursor"), "/data/cursor");
    s.config_yaml = read_text(open_dataset(file_.get(), "config", "/config"), "/config");
    H5Obj meta = open_group(file_.get(), "meta", "/meta");
    for (const std::string& key : link_names(meta.get(), "/meta"))
      s.meta.emplace_back(key, read_text(open_dataset(meta.get(), key, "/meta/" + key), "/meta/" + key));

    HYLO_CHECK(verified_ == expected, "{}: incomplete checkpoint (/complete expects {} datasets, found {})", path_,
               expected, verified_);
    return s;
  }

 private:
  [[noreturn]] void corrupt(const std::string& detail) const {
    HYLO_FAIL("{}: truncated or corrupt HDF5 file ({})", path_, detail);
  }

  void open() {
    htri_t is_hdf5 = H5Fis_hdf5(path_.c_str());
    HYLO_CHECK(is_hdf5 != 0, "{}: not a hylo checkpoint (not an HDF5 file)", path_);
    if (is_hdf5 < 0) corrupt("unreadable superblock");
    file_ = H5Obj(H5Fopen(path_.c_str(), H5F_ACC_RDONLY, file_access().get()), H5Fclose);
    if (!file_.ok()) corrupt("cannot open; was the write cut short?");
    HYLO_CHECK(H5Aexists(file_.get(), "format") > 0 && read_attr_string(file_.get(), "format") == kFormat,
               "{}: not a hylo checkpoint (no format=\"{}\" attribute)", path_, kFormat);
    int64_t version = 0;
    H5Obj a(H5Aopen(file_.get(), "format_version", H5P_DEFAULT), H5Aclose);
    if (!a.ok() || H5Aread(a.get(), H5T_NATIVE_INT64, &version) < 0) corrupt("unreadable format_version");
    HYLO_CHECK(version <= kFormatVersion, "{}: checkpoint format version {} is newer than this build reads ({})",
               path_, version, kFormatVersion);
    HYLO_CHECK(H5Lexists(file_.get(), "complete", H5P_DEFAULT) > 0,
               "{}: incomplete checkpoint (no /complete marker: the writer did not finish)", path_);
  }

  H5Obj open_group(hid_t parent, const char* name, const std::string& where) const {
    if (H5Lexists(parent, name, H5P_DEFAULT) <= 0) corrupt("missing " + where);
    H5Obj g(H5Gopen2(parent, name, H5P_DEFAULT), H5Gclose);
    if (!g.ok()) corrupt("cannot open " + where);
    return g;
  }

  H5Obj open_dataset(hid_t parent, const std::string& name, const std::string& where) const {
    if (H5Lexists(parent, name.c_str(), H5P_DEFAULT) <= 0) corrupt("missing " + where);
    H5Obj d(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
    if (!d.ok()) corrupt("cannot open " + where);
    return d;
  }

  // Links in the order they were written (names as a fallback for files made by other tools).
  std::vector<std::string> link_names(hid_t group, const std::string& where) const {
    H5G_info_t info;
    if (H5Gget_info(group, &info) < 0) corrupt("cannot list " + where);
    H5_index_t index = H5_INDEX_CRT_ORDER;
    std::vector<std::string> names;
    for (hsize_t i = 0; i < info.nlinks; ++i) {
      ssize_t n = H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, nullptr, 0, H5P_DEFAULT);
      if (n < 0 && index == H5_INDEX_CRT_ORDER) {
        index = H5_INDEX_NAME;
        names.clear();
        i = hsize_t(-1);  // restart by name
        continue;
      }
      if (n < 0) corrupt("cannot list " + where);
      std::string name(size_t(n) + 1, '\0');
      H5Lget_name_by_idx(group, ".", index, H5_ITER_INC, i, name.data(), name.size(), H5P_DEFAULT);
      name.resize(size_t(n));
      names.push_back(std::move(name));
    }
    return names;
  }

  std::string read_attr_string(hid_t obj, const char* name) const {
    H5Obj a(H5Aopen(obj, name, H5P_DEFAULT), H5Aclose);
    H5Obj type(a.ok() ? H5Aget_type(a.get()) : -1, H5Tclose);
    if (!type.ok() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
      corrupt(fmt::format("attribute '{}' is not a fixed-length string", name));
    std::string value(H5Tget_size(type.get()), '\0');
    if (H5Aread(a.get(), type.get(), value.data()) < 0) corrupt(fmt::format("cannot read attribute '{}'", name));
    value.resize(std::strlen(value.c_str()));
    return value;
  }

  void verify(hid_t ds, const std::string& where, const void* data, size_t bytes) {
    uint32_t stored = 0;
    H5Obj a(H5Aexists(ds, "crc32") > 0 ? H5Aopen(ds, "crc32", H5P_DEFAULT) : -1, H5Aclose);
    HYLO_CHECK(a.ok() && H5Aread(a.get(), H5T_NATIVE_UINT32, &stored) >= 0, "{}: missing checksum in {}", path_,
               where);
    HYLO_CHECK(checksum(data, bytes) == stored, "{}: checksum mismatch in {}", path_, where);
    ++verified_;
  }

  // Shape of a dataset; empty for a scalar.
  std::vector<hsize_t> dims_of(hid_t ds, const std::string& where) const {
    H5Obj space(H5Dget_space(ds), H5Sclose);
    int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
    if (rank < 0) corrupt("bad dataspace in " + where);
    std::vector<hsize_t> dims(static_cast<size_t>(rank));
    if (rank > 0 && H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr) < 0)
      corrupt("bad dataspace in " + where);
    return dims;
  }

  // Reads the whole dataset into `buf` as `mem_type`.
  void read_into(hid_t ds, hid_t mem_type, void* buf, size_t bytes, const std::string& where) const {
    if (bytes > 0 && H5Dread(ds, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf) < 0) corrupt("cannot read " + where);
  }

  void expect_type(hid_t ds, H5T_class_t klass, size_t size, const std::string& where) const {
    H5Obj type(H5Dget_type(ds), H5Tclose);
    if (!type.ok() || H5Tget_class(type.get()) != klass || H5Tget_size(type.get()) != size)
      corrupt("unexpected element type in " + where);
  }

  std::vector<NamedTensor> read_tensors(hid_t group, const std::string& gpath, bool keep) {
    std::vector<NamedTensor> out;
    for (const std::string& name : link_names(group, gpath)) {
      const std::string where = gpath + "/" + name;
      H5Obj ds = open_dataset(group, name, where);
      if (H5Aexists(ds.get(), "dtype") <= 0) corrupt("missing dtype of " + where);
      std::string dtype_name = read_attr_string(ds.get(), "dtype");
      std::optional<DType> dt = dtype_from_name(dtype_name);
      HYLO_CHECK(dt.has_value(), "{}: unsupported dtype '{}' in {}", path_, dtype_name, where);
      DTypeInfo info = dtype_info(*dt);
      expect_type(ds.get(), *dt == DType::f32 || *dt == DType::f64 ? H5T_FLOAT : H5T_INTEGER, dtype_size(*dt),
                  where);
      std::vector<hsize_t> dims = dims_of(ds.get(), where);
      if (!read_data_) {
        ++verified_;
        continue;
      }
      Tensor t = Tensor::empty(Shape(dims.begin(), dims.end()), *dt, Device::cpu, "checkpoint tensor");
      read_into(ds.get(), info.mem_type, t.raw(), t.nbytes(), where);
      verify(ds.get(), where, t.raw(), t.nbytes());
      if (keep) out.push_back({name, std::move(t)});
    }
    return out;
  }

  std::vector<uint64_t> read_u64s(const H5Obj& ds, const std::string& where) {
    expect_type(ds.get(), H5T_INTEGER, 8, where);
    std::vector<hsize_t> dims = dims_of(ds.get(), where);
    if (dims.size() != 1) corrupt("expected a 1-D array in " + where);
    std::vector<uint64_t> v(dims[0]);
    read_into(ds.get(), H5T_NATIVE_UINT64, v.data(), v.size() * 8, where);
    verify(ds.get(), where, v.data(), v.size() * 8);
    return v;
  }

  int64_t read_i64(const H5Obj& ds, const std::string& where, bool count) {
    expect_type(ds.get(), H5T_INTEGER, 8, where);
    int64_t v = 0;
    read_into(ds.get(), H5T_NATIVE_INT64, &v, sizeof v, where);
    int64_t before = verified_;
    verify(ds.get(), where, &v, sizeof v);
    if (!count) verified_ = before;  // the marker does not count itself
    return v;
  }

  std::string read_text(const H5Obj& ds, const std::string& where) {
    H5Obj type(H5Dget_type(ds.get()), H5Tclose);
    if (!type.ok() || H5Tget_class(type.get()) != H5T_STRING || H5Tis_variable_str(type.get()) != 0)
      corrupt("expected a fixed-length string in " + where);
    std::string s(H5Tget_size(type.get()), '\0');
    read_into(ds.get(), type.get(), s.data(), s.size(), where);
    while (!s.empty() && s.back() == '\0') s.pop_back();  // NULLPAD padding (and the empty string)
    verify(ds.get(), where, s.data(), s.size());
    return s;
  }

  std::string path_;
  bool keep_, keep_moments_, read_data_;
  H5Obj file_;
  int64_t verified_ = 0;
};

// The step of a writer's temporary file: step_<N>.h5.<pid>-<hex>.tmp (unique_temp_path), or
// step_<N>.h5.tmp as hylo named them before.
std::optional<int64_t> temp_checkpoint_step(std::string name) {
  if (!name.ends_with(".tmp")) return std::nullopt;
  name.resize(name.size() - 4);
  if (auto step = checkpoint_step(name)) return step;
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? std::nullopt : checkpoint_step(name.substr(0, dot));
}

std::vector<std::pair<int64_t, std::string>> list_checkpoints(const std::string& run_dir, bool tmp_files) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  fs::path dir = fs::path(run_dir) / "checkpoints";
  if (!fs::is_directory(dir, ec)) return found;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::string p = entry.path().string();
    if (tmp_files) {
      if (auto step = temp_checkpoint_step(entry.path().filename().string())) found.emplace_back(*step, p);
    } else if (auto step = checkpoint_step(p)) {
      found.emplace_back(*step, p);
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

// A file without the whole-file checksum (written before it existed) is parsed first by a child
// process: if libhdf5 crashes on its metadata, the child dies and the file is reported, not the run.
void verify_in_child(const std::string& path) {
  static std::mutex mutex;
  static std::set<std::string> warned;
  {
    std::lock_guard lock(mutex);
    if (warned.insert(path).second)
      fmt::print(stderr, "warning: {}: no whole-file checksum (written by an older hylo): verified in a child "
                 "process before it is parsed\n", path);
  }
  int fds[2];
  HYLO_CHECK(::pipe(fds) == 0, "{}: cannot create a pipe to verify it: {}", path, std::strerror(errno));
  std::fflush(nullptr);  // the child must not flush the parent's buffered output a second time
  const pid_t pid = ::fork();
  if (pid < 0) {
    const int err = errno;
    ::close(fds[0]);
    ::close(fds[1]);
    HYLO_FAIL("{}: cannot fork to verify it: {}", path, std::strerror(err));
  }
  if (pid == 0) {
    ::close(fds[0]);
    std::string message;
    try {
      silence_hdf5();
      Reader(path, /*keep=*/false, false, /*read_data=*/true).read();
    } catch (const std::exception& e) {
      message = e.what();
    }
    for (size_t done = 0; done < message.size();) {
      const ssize_t n = ::write(fds[1], message.data() + done, message.size() - done);
      if (n <= 0) break;
      done += size_t(n);
    }
    ::_exit(message.empty() ? 0 : 1);  // no atexit handlers: they belong to the parent (MPI, HDF5)
  }
  ::close(fds[1]);
  std::string message;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fds[0], buffer, sizeof buffer)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    message.append(buffer, size_t(n));
  }
  ::close(fds[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (WIFSIGNALED(status))
    HYLO_FAIL("{}: truncated or corrupt HDF5 file (libhdf5 crashed parsing it: signal {})", path, WTERMSIG(status));
  HYLO_CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "{}",
             message.empty() ? fmt::format("{}: cannot verify (the verifier exited with status {})", path, status)
                             : message);
}

// The file's bytes are those written (or, for an old file, parse without crashing libhdf5);
// returns whether the whole-file checksum proved it.
bool prove_intact(const std::string& path) {
  if (check_file_sum(path) == FileSum::verified) return true;
  verify_in_child(path);
  return false;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

void save_checkpoint(const std::string& path, const CheckpointState& state) {
  silence_hdf5();
  const std::string tmp = unique_temp_path(path);
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty()) fs::create_directories(parent, ec);
  HYLO_CHECK(!ec, "{}: cannot create directory {}: {}", path, parent.string(), ec.message());
  try {
    write_file(tmp, path, state);
    write_file_sum(tmp, path);  // and fsyncs: data on disk before the rename makes it visible
  } catch (...) {
    fs::remove(tmp, ec);
    throw;
  }
  HYLO_CHECK(std::rename(tmp.c_str(), path.c_str()) == 0, "{}: cannot rename {} into place: {}", path, tmp,
             std::strerror(errno));
  fsync_path(parent.empty() ? "." : parent.string(), true);
}

CheckpointState load_checkpoint(const std::string& path, bool moments) {
  silence_hdf5();
  prove_intact(path);
  return Reader(path, /*keep=*/true, moments, /*read_data=*/true).read();
}

void verify_checkpoint(const std::string& path) {
  silence_hdf5();
  // An old file was read whole by the child; a checksummed one needs only its structure checked.
  if (prove_intact(path)) Reader(path, /*keep=*/false, false, /*read_data=*/false).read();
}

std::string checkpoint_path(const std::string& run_dir, int64_t step) {
  return (fs::path(run_dir) / "checkpoints" / fmt::format("step_{}.h5", step)).string();
}

std::optional<int64_t> checkpoint_step(const std::string& path) {
  const std::string name = fs::path(path).filename().string();
  constexpr std::string_view prefix = "step_", suffix = ".h5";
  if (name.size() <= prefix.size() + suffix.size() || !name.starts_with(prefix) || !name.ends_with(suffix))
    return std::nullopt;
  const std::string digits = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  if (digits.size() > 18 || digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  return std::stoll(digits);
}

std::optional<std::string> latest_valid_checkpoint(const std::string& run_dir) {
  auto found = list_checkpoints(run_dir, /*tmp_files=*/false);
  for (auto it = found.rbegin(); it != found.rend(); ++it) {
    try {
      verify_checkpoint(it->second);
      return it->second;
    } catch (const Error& e) {
      fmt::print(stderr, "warning: skipping checkpoint: {}\n", e.what());
    }
  }
  return std::nullopt;
}

void prune_checkpoints(const std::string& run_dir, int64_t keep_last) {
  auto found = list_checkpoints(run_dir, /*tmp_files=*/false);
  std::error_code ec;
  if (keep_last > 0 && int64_t(found.size()) > keep_last) {
    for (size_t i = 0; i + size_t(keep_last) < found.size(); ++i) {
      fs::remove(found[i].second, ec);
      HYLO_CHECK(!ec, "{}: cannot remove old checkpoint: {}", found[i].second, ec.message());
    }
  }
  if (found.empty()) return;
  // A .tmp older than a finished checkpoint belongs to a writer that died; nothing will finish it.
  for (const auto& [step, tmp] : list_checkpoints(run_dir, /*tmp_files=*/true))
    if (step < found.back().first) fs::remove(tmp, ec);
}

std::vector<std::string> set_aside_checkpoints_after(const std::string& run_dir, int64_t step) {
  std::vector<std::string> moved;
  const fs::path aside = fs::path(run_dir) / "checkpoints" / "superseded";
  for (const auto& [n, path] : list_checkpoints(run_dir, /*tmp_files=*/false)) {
    if (n <= step) continue;
    std::error_code ec;
    fs::create_directories(aside, ec);
    HYLO_CHECK(!ec, "{}: cannot create directory: {}", aside.string(), ec.message());
    const std::string name = fs::path(path).filename().string();
    fs::path target = aside / name;
    for (int k = 1; fs::exists(target, ec); ++k) target = aside / fmt::format("{}.{}", name, k);  // an earlier set-aside
    fs::rename(path, target, ec);
    HYLO_CHECK(!ec, "{}: cannot move into {}: {}", path, aside.string(), ec.message());
    moved.push_back(name);
  }
  return moved;
}

}  // namespace hylo
