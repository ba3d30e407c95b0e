#include "runtime/distributed.h"

#include <dlfcn.h>
#include <sched.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace workshop {
namespace {

// ---- The MPICH ABI (libmpi.so.12): handles are ints, constants from MPICH's mpi.h. Only
// what this file calls. tests/runtime/test_multiprocess.py compares every constant with the
// header the mpich wheel installs.
using MPI_Comm = int;
using MPI_Info = int;
using MPI_Datatype = int;
using MPI_Request = int;
using MPI_Errhandler = int;
struct MPI_Status {  // MPICH's layout: 5 ints.
  int count_lo, count_hi_and_cancelled, MPI_SOURCE, MPI_TAG, MPI_ERROR;
};
constexpr MPI_Comm kCommSelf = 0x44000001;
constexpr MPI_Info kInfoNull = 0x1c000000;
constexpr MPI_Datatype kByte = 0x4c00010d;
constexpr MPI_Errhandler kErrorsReturn = 0x54000001;
constexpr int kTagUb = 0x64400001;
constexpr int kThreadMultiple = 3;
constexpr int kMaxPortName = 256;
constexpr int kMaxErrorString = 512;
constexpr int kSuccess = 0;
MPI_Status* const kStatusesIgnore = reinterpret_cast<MPI_Status*>(1);

struct Mpi {
  int (*Initialized)(int*);
  int (*Init_thread)(int*, char***, int, int*);
  int (*Open_port)(MPI_Info, char*);
  int (*Close_port)(const char*);
  int (*Comm_accept)(const char*, MPI_Info, int, MPI_Comm, MPI_Comm*);
  int (*Comm_connect)(const char*, MPI_Info, int, MPI_Comm, MPI_Comm*);
  int (*Intercomm_merge)(MPI_Comm, int, MPI_Comm*);
  int (*Comm_free)(MPI_Comm*);
  int (*Comm_rank)(MPI_Comm, int*);
  int (*Comm_size)(MPI_Comm, int*);
  int (*Comm_set_errhandler)(MPI_Comm, MPI_Errhandler);
  int (*Comm_get_attr)(MPI_Comm, int, void*, int*);
  int (*Isend)(const void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);
  int (*Irecv)(void*, int, MPI_Datatype, int, int, MPI_Comm, MPI_Request*);
  int (*Testall)(int, MPI_Request*, int*, MPI_Status*);
  int (*Error_string)(int, char*, int*);
};

// Loaded once per process and never unloaded (MPI cannot be initialized twice).
std::mutex mpi_mu;
const Mpi* mpi = nullptr;  // Guarded by mpi_mu until set.

Status LoadMpi(const std::string& library, const Mpi** out) {
  std::lock_guard<std::mutex> lock(mpi_mu);
  if (mpi != nullptr) {
    *out = mpi;
    return Status();
  }
  const std::string name = library.empty() ? "libmpi.so.12" : library;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_GLOBAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    return FailedPrecondition(
        "workshop: several processes need MPI, but '", name, "' could not be loaded (",
        why == nullptr ? "unknown reason" : why,
        "); install the distributed extra "
        "(pip install -e \".[distributed]\", which brings the mpich wheel) or pass the "
        "library's path as create option 'mpi_library'");
  }
  auto table = std::make_unique<Mpi>();
  Status missing;
  auto bind = [&](auto& fn, const char* symbol) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(handle, symbol));
    if (fn == nullptr && missing.ok()) {
      missing = FailedPrecondition("workshop: '", name, "' has no ", symbol,
                                   "; an MPICH-ABI libmpi.so.12 is needed");
    }
  };
  bind(table->Initialized, "MPI_Initialized");
  bind(table->Init_thread, "MPI_Init_thread");
  bind(table->Open_port, "MPI_Open_port");
  bind(table->Close_port, "MPI_Close_port");
  bind(table->Comm_accept, "MPI_Comm_accept");
  bind(table->Comm_connect, "MPI_Comm_connect");
  bind(table->Intercomm_merge, "MPI_Intercomm_merge");
  bind(table->Comm_free, "MPI_Comm_free");
  bind(table->Comm_rank, "MPI_Comm_rank");
  bind(table->Comm_size, "MPI_Comm_size");
  bind(table->Comm_set_errhandler, "MPI_Comm_set_errhandler");
  bind(table->Comm_get_attr, "MPI_Comm_get_attr");
  bind(table->Isend, "MPI_Isend");
  bind(table->Irecv, "MPI_Irecv");
  bind(table->Testall, "MPI_Testall");
  bind(table->Error_string, "MPI_Error_string");
  WORKSHOP_RETURN_IF_ERROR(missing);
  // The netmod and provider that bootstrap as singletons (distributed.h); the user's
  // choice wins.
  setenv("MPIR_CVAR_CH4_NETMOD", "ofi", /*overwrite=*/0);
  setenv("FI_PROVIDER", "tcp", 0);
  int initialized = 0;
  table->Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    if (table->Init_thread(nullptr, nullptr, kThreadMultiple, &provided) != kSuccess) {
      return Internal("workshop: MPI_Init_thread failed in '", name, "'");
    }
    if (provided < kThreadMultiple) {
      return FailedPrecondition("workshop: '", name,
                                "' does not support MPI_THREAD_MULTIPLE "
                                "(provided level ",
                                provided,
                                "), which concurrent device "
                                "threads need");
    }
  }
  mpi = table.release();
  *out = mpi;
  return Status();
}

std::string MpiError(int code) {
  char text[kMaxErrorString] = {};
  int length = 0;
  if (mpi == nullptr || mpi->Error_string(code, text, &length) != kSuccess) {
    return StrCat("MPI error ", code);
  }
  return std::string(text, std::clamp(length, 0, kMaxErrorString));
}

// WORKSHOP_DISTRIBUTED_DEBUG=1 prints each start-up step to stderr.
void Trace(int me, const std::string& what) {
  static const bool on = std::getenv("WORKSHOP_DISTRIBUTED_DEBUG") != nullptr;
  if (on) std::fprintf(stderr, "workshop process %d: %s\n", me, what.c_str());
}

Status Check(int code, const char* what) {
  if (code == kSuccess) return Status();
  return Internal("workshop: ", what, " failed: ", MpiError(code));
}

}  // namespace

Status ProcessGroup::Connect(const Options& options, KeyValueStore* store,
                             std::unique_ptr<ProcessGroup>* out) {
  const Mpi* m = nullptr;
  const int me = options.node_id, n = options.num_nodes;
  Trace(me, "loading MPI");
  WORKSHOP_RETURN_IF_ERROR(LoadMpi(options.library, &m));
  Trace(me, "MPI initialized");
  // Join one process at a time (distributed.h). Process k connects only once process 0
  // says it is k's turn (key turn/k, after k - 1 joined): the port accepts whoever
  // connects, so an early newcomer would take another's place. Members wait for k's
  // "ready" key before MPI_Comm_accept, so a process that never arrives is a timeout
  // naming it, not an accept that waits forever.
  char port[kMaxPortName + 1] = {};
  if (me == 0) {
    WORKSHOP_RETURN_IF_ERROR(Check(m->Open_port(kInfoNull, port), "MPI_Open_port"));
    WORKSHOP_RETURN_IF_ERROR(store->Put("mpi/port", port));
  } else {
    std::string name;
    WORKSHOP_RETURN_IF_ERROR(store->Get("mpi/port", options.timeout, &name));
    name.copy(port, kMaxPortName);
  }
  MPI_Comm comm = kCommSelf;
  for (int k = 1; k < n; ++k) {
    if (me > k) continue;
    MPI_Comm inter = 0, merged = 0;
    Trace(me, StrCat(me < k ? "accepting" : "connecting", " process ", k));
    if (me < k) {
      std::string ready;
      WORKSHOP_RETURN_IF_ERROR(store->Get(StrCat("mpi/ready/", k), options.timeout, &ready));
      WORKSHOP_RETURN_IF_ERROR(
          Check(m->Comm_accept(port, kInfoNull, 0, comm, &inter), "MPI_Comm_accept"));
      WORKSHOP_RETURN_IF_ERROR(Check(m->Intercomm_merge(inter, 0, &merged), "MPI_Intercomm_merge"));
    } else {
      if (k > 1) {
        std::string turn;
        WORKSHOP_RETURN_IF_ERROR(store->Get(StrCat("mpi/turn/", k), options.timeout, &turn));
      }
      WORKSHOP_RETURN_IF_ERROR(store->Put(StrCat("mpi/ready/", k), "1"));
      WORKSHOP_RETURN_IF_ERROR(
          Check(m->Comm_connect(port, kInfoNull, 0, kCommSelf, &inter), "MPI_Comm_connect"));
      WORKSHOP_RETURN_IF_ERROR(Check(m->Intercomm_merge(inter, 1, &merged), "MPI_Intercomm_merge"));
    }
    m->Comm_free(&inter);
    if (comm != kCommSelf) m->Comm_free(&comm);
    comm = merged;
    Trace(me, StrCat("process ", k, " joined"));
    if (me == 0 && k + 1 < n) {
      WORKSHOP_RETURN_IF_ERROR(store->Put(StrCat("mpi/turn/", k + 1), "1"));
    }
  }
  if (me == 0) m->Close_port(port);
  auto group = std::unique_ptr<ProcessGroup>(new ProcessGroup());
  group->timeout_ = options.timeout;
  group->comm_ = comm;
  m->Comm_rank(comm, &group->rank_);
  m->Comm_size(comm, &group->size_);
  if (group->rank_ != me || group->size_ != n) {
    return Internal("workshop: MPI ranked process ", me, " of ", n, " as ", group->rank_, " of ",
                    group->size_);
  }
  // Errors come back as codes (named in our errors) instead of aborting the process.
  m->Comm_set_errhandler(comm, kErrorsReturn);
  int* tag_ub = nullptr;
  int found = 0;
  if (m->Comm_get_attr(comm, kTagUb, &tag_ub, &found) == kSuccess && found && tag_ub) {
    group->tag_limit_ = int64_t{*tag_ub} + 1;
  }
  *out = std::move(group);
  return Status();
}

// The communicator is released, MPI is not finalized: MPI_Finalize is collective over
// connected processes and would hang on a peer that died, and MPI cannot be initialized
// again in this process (a second client reuses it).
ProcessGroup::~ProcessGroup() {
  std::lock_guard<std::mutex> lock(mu_);
  if (broken_.ok() && mpi != nullptr && comm_ != kCommSelf) mpi->Comm_free(&comm_);
}

Status ProcessGroup::Exchange(uint64_t tag, const std::shared_ptr<Step>& step) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!broken_.ok()) return broken_;
  }
  const int mpi_tag = static_cast<int>(tag % static_cast<uint64_t>(tag_limit_));
  // MPI counts are ints: messages go in pieces of at most 1 GiB, in order (MPI keeps the
  // order of messages with the same source, tag and communicator).
  constexpr int64_t kPiece = int64_t{1} << 30;
  std::vector<MPI_Request> requests;
  int code = kSuccess;
  auto post = [&](auto fn, auto* data, int64_t bytes, int peer) {
    int64_t at = 0;
    do {  // Once even for an empty message: the peer posts its receive either way.
      const int count = static_cast<int>(std::min(kPiece, bytes - at));
      MPI_Request request = 0;
      if (code == kSuccess) code = fn(data + at, count, kByte, peer, mpi_tag, comm_, &request);
      if (code == kSuccess) requests.push_back(request);
      at += count;
    } while (code == kSuccess && at < bytes);
  };
  for (size_t i = 0; i < step->peers.size(); ++i) {
    post(mpi->Irecv, step->recv[i].data(), static_cast<int64_t>(step->recv[i].size()),
         step->peers[i]);
  }
  for (int peer : step->peers) {
    post(mpi->Isend, step->send.data(), static_cast<int64_t>(step->send.size()), peer);
  }
  // Poll: MPI moves data only inside its calls (libfabric's tcp provider has no progress
  // thread), so a transfer runs at the polling rate. Poll without pausing for the first
  // 50 ms (a 4 MiB exchange took 2x longer with 100 us pauses), then with pauses so a
  // long wait for a slow peer does not burn a core; a blocking MPI_Waitall could not time
  // out.
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + timeout_;
  const auto spin_until = start + std::chrono::milliseconds(50);
  int done = 0;
  while (code == kSuccess) {
    code = mpi->Testall(static_cast<int>(requests.size()), requests.data(), &done, kStatusesIgnore);
    if (code != kSuccess || done) break;
    const auto now = std::chrono::steady_clock::now();
    if (now > deadline) break;
    if (failed_.load(std::memory_order_relaxed)) break;
    if (now < spin_until) {
      sched_yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (code == kSuccess && done) return Status();
  std::lock_guard<std::mutex> lock(mu_);
  abandoned_.push_back(step);
  if (!broken_.ok()) return broken_;  // Fail() was called: a peer is known dead.
  std::string peers;
  for (int peer : step->peers) peers += StrCat(peers.empty() ? "" : ", ", peer);
  Status failure =
      code != kSuccess
          ? Status(Code::kUnavailable, StrCat("workshop: exchange with process(es) ", peers,
                                              " failed: ", MpiError(code)))
          : Status(Code::kDeadlineExceeded,
                   StrCat("workshop: process(es) ", peers,
                          " did not take part in a "
                          "collective within ",
                          timeout_.count() / 1000.0,
                          " s (create "
                          "option distributed_timeout); a peer process died, hangs, or "
                          "runs different programs"));
  broken_ = failure;
  failed_.store(true);
  return failure;
}

std::shared_ptr<ProcessGroup::Step> ProcessGroup::NewStep() {
  std::lock_guard<std::mutex> lock(mu_);
  if (spare_.empty()) return std::make_shared<Step>();
  std::shared_ptr<Step> step = std::move(spare_.back());
  spare_.pop_back();
  step->peers.clear();
  return step;
}

void ProcessGroup::Recycle(std::shared_ptr<Step> step) {
  constexpr size_t kSpares = 4;  // Concurrent collectives of one process, a few at most.
  std::lock_guard<std::mutex> lock(mu_);
  // Only steps nobody else holds: an abandoned one stays with MPI.
  if (step != nullptr && step.use_count() == 1 && spare_.size() < kSpares) {
    spare_.push_back(std::move(step));
  }
}

void ProcessGroup::Fail(Status status) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_.ok()) return;
  broken_ = std::move(status);
  failed_.store(true);
}

}  // namespace workshop
