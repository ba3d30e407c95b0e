// Several processes, one JAX program: the key-value store jax.distributed hands to
// PJRT_Client_Create, and the MPI process group collectives use between processes.
//
// Why MPI, and why loaded at run time (docs/multiprocess.md, "Multi-process"): the `mpich` wheel
// on PyPI ships libmpi.so.12 (the MPICH ABI, stable since MPICH 3.1), so a multi-process
// install is `pip install -e ".[distributed]"` and nothing is compiled against MPI. The
// plugin dlopens the library only when a client is created with num_nodes > 1, so one
// process never loads it. The few handles and constants used are those of MPICH's mpi.h
// (ints; tests/runtime/test_multiprocess.py checks them against the wheel's header).
//
// Bootstrapping without mpiexec: every process initializes MPI as a singleton (its own
// MPI_COMM_WORLD of one); process 0 opens a port (MPI_Open_port) and publishes its name in
// the key-value store; processes 1..n-1 join one at a time (MPI_Comm_connect against an
// MPI_Comm_accept of everyone already joined, then MPI_Intercomm_merge), so the final
// intracommunicator ranks the processes by node_id. MPICH's ofi netmod over libfabric's
// tcp provider is the one that does this as a singleton (the default ucx netmod's port
// names overflow MPI_MAX_PORT_NAME; libfabric's shm provider truncated messages between
// 4 processes), so both are chosen through MPICH's environment unless the user set them.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/status.h"

namespace workshop {

// The store of PJRT_Client_Create_Args (jax.distributed's coordination service), as the
// C API layer wraps its callbacks. Values are bytes. Get blocks until the key exists or
// `timeout` passes (an error naming the key). Keys are relative: the C API layer puts
// them under one client's prefix (a key is written once per job).
class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual Status Put(const std::string& key, const std::string& value) = 0;
  virtual Status Get(const std::string& key, std::chrono::milliseconds timeout,
                     std::string* value) = 0;
};

// The processes of one jax.distributed job, connected by MPI. Thread-safe: device workers
// of one process call Exchange concurrently (MPI_THREAD_MULTIPLE).
class ProcessGroup {
 public:
  struct Options {
    int node_id = 0;
    int num_nodes = 1;
    std::string library;  // libmpi.so.12 to dlopen (create option mpi_library).
    // How long a process waits for a peer (start-up and every exchange) before failing
    // with DEADLINE_EXCEEDED naming it (create option distributed_timeout, seconds).
    std::chrono::milliseconds timeout{std::chrono::seconds(120)};
  };

  // Loads MPI and joins the processes through `store` (all num_nodes must call it).
  static Status Connect(const Options& options, KeyValueStore* store,
                        std::unique_ptr<ProcessGroup>* out);
  ~ProcessGroup();

  int rank() const { return rank_; }
  int size() const { return size_; }

  // One step of a collective: sends `send` to every process of `peers` and receives
  // recv[i] (exactly its size, set by the caller) from peers[i], all under `tag` (the same
  // number in every process for the same step; tags keep concurrent steps apart). Fails
  // after the timeout, naming the processes that did not answer; a group that failed once
  // fails every later call at once (its MPI state is no longer trustworthy). Shared so an
  // exchange abandoned by a timeout keeps its buffers, which MPI may still touch, alive.
  struct Step {
    std::vector<char> send;
    std::vector<int> peers;
    std::vector<std::vector<char>> recv;  // At least peers.size(); sized by the caller.
    std::vector<char> work;               // The caller's scratch, recycled with the rest.
  };
  Status Exchange(uint64_t tag, const std::shared_ptr<Step>& step);
  // A Step whose buffers keep the memory of an earlier one (sizes are the caller's to set):
  // fresh multi-MB buffers cost a page fault per 4 KiB on every collective (a 4 MiB
  // all_reduce spent more time faulting than sending). Recycle gives one back.
  std::shared_ptr<Step> NewStep();
  void Recycle(std::shared_ptr<Step> step);
  // Marks the group failed (a peer is known dead): waiting and later exchanges fail with
  // `status`.
  void Fail(Status status);

 private:
  ProcessGroup() = default;

  std::chrono::milliseconds timeout_{};
  int rank_ = 0, size_ = 1;
  int comm_ = 0;               // MPI_Comm (an int in the MPICH ABI).
  int64_t tag_limit_ = 32768;  // MPI_TAG_UB + 1.
  std::mutex mu_;
  Status broken_;                                 // Guarded by mu_.
  std::atomic<bool> failed_{false};               // !broken_.ok(), polled without mu_.
  std::vector<std::shared_ptr<Step>> abandoned_;  // Guarded by mu_.
  std::vector<std::shared_ptr<Step>> spare_;      // Guarded by mu_.
};

}  // namespace workshop
