// Collectives across the participants of one launch, and partition_id / replica_id.
//
// pmap and shard_map in JAX 0.10 are SPMD: one Execute runs the same plan on every device of
// the assignment; participant p is partition p % num_partitions of replica
// p / num_partitions. The compiler (rules/collectives.py) has already turned replica groups
// and source-target pairs into participant ids and checked them, so kernels only index
// (and re-check what could touch memory out of bounds).
//
// Every collective follows one protocol on the launch's Rendezvous:
//   Exchange   each participant publishes its instruction, operands and outputs;
//   phase 1..n each computes from its peers' buffers directly (no staging copies),
//              each phase followed by a Barrier so no buffer is freed or overwritten while
//              a peer still reads it.
// Everything that can fail is checked before the Exchange and fails the same way on every
// participant (same plan, same shapes), so phases never fail halfway; a participant that
// fails early makes the executor abort the Rendezvous, which releases the others.
//
// Across processes (jax.distributed), each process's Rendezvous meets its own
// participants; after the Exchange, the leader (its lowest participant) sends every local
// participant's operands to the other processes of the launch over MPI and receives theirs
// (runtime/distributed.h), and publishes them in a second local Exchange as the remote
// participants' contributions (operands only). From there every kernel computes as in one
// process. all_reduce instead exchanges each process's partial fold per group
// (FoldAcrossProcesses): L times less traffic for L local members.
//
// Attributes (docs/plan.md): `groups` (list of participant lists), `body` (reducer name),
// `dim`, `split_dim`, `concat_dim`, `sources` (per participant: whose operand it receives,
// -1 for zeros), `num_partitions`.
#include <algorithm>
#include <cstring>

#include "kernels/core/attr_check.h"
#include "kernels/core/kernel.h"
#include "kernels/core/strided.h"
#include "kernels/elementwise/element_ops.h"
#include "runtime/distributed.h"
#include "runtime/rendezvous.h"

namespace workshop {
namespace {

// What a participant publishes: lives on its stack until it passes the first barrier.
struct Contribution {
  const Instr* instr;  // All participants run the same Plan: same collective, same pointer.
  const std::vector<Tensor>* ins;
  const std::vector<Tensor>* outs;
};

// peers[p]: participant p's contribution (same op, hence same shapes and dtypes as ours).
using Peers = std::vector<const Contribution*>;

// Other processes' participants as the leader received them: lives on the leader's stack
// until it passes the collective's last barrier.
struct RemoteContributions {
  ~RemoteContributions() {
    if (group != nullptr) group->Recycle(std::move(step));
  }
  Status status;
  ProcessGroup* group = nullptr;
  std::shared_ptr<ProcessGroup::Step> step;  // Owns the received bytes.
  std::vector<std::vector<Tensor>> ins;      // [participant]: operands in `step`.
  std::vector<Contribution> contributions;   // [participant]; outs null.
};

// Identifies a collective in the message header, so processes that reached different
// collectives fail with a message instead of reading mismatched bytes.
uint64_t InstrKey(const Instr& instr) {
  uint64_t hash = 1469598103934665603ull;
  for (const std::string* text : {&instr.op, &instr.loc}) {
    for (char c : *text) hash = (hash ^ static_cast<unsigned char>(c)) * 1099511628211ull;
  }
  return hash;
}

// The leader's exchange with the other processes: this process's participants' operands
// (ascending participant order, each operand's bytes in turn, after an 8-byte header) go to
// every other process of the launch; theirs come back into `remote`.
Status ExchangeAcrossProcesses(const KernelContext& ctx, const std::vector<const void*>& local,
                               Rendezvous* rendezvous, RemoteContributions* remote) {
  const CrossProcess& cross = *rendezvous->cross_process();
  const int me = cross.group->rank();
  const int n = rendezvous->participants();
  std::vector<int64_t> offsets;  // Of each operand within one participant's bytes.
  int64_t per = 0;
  for (const Tensor& in : ctx.ins) {
    offsets.push_back(per);
    per += in.num_elements() * ByteWidth(in.dtype);
  }
  constexpr int64_t kHeader = sizeof(uint64_t);
  const uint64_t key = InstrKey(ctx.instr);
  auto step = cross.group->NewStep();
  remote->group = cross.group;
  std::vector<int> count(cross.group->size(), 0);  // Participants per process.
  for (int p = 0; p < n; ++p) ++count[cross.process_of[p]];
  step->send.resize(kHeader + count[me] * per);
  std::memcpy(step->send.data(), &key, kHeader);
  char* at = step->send.data() + kHeader;
  for (int p = 0; p < n; ++p) {
    if (cross.process_of[p] != me) continue;
    const auto* peer = static_cast<const Contribution*>(local[p]);
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      const int64_t bytes = (k + 1 < offsets.size() ? offsets[k + 1] : per) - offsets[k];
      if (bytes > 0) std::memcpy(at + offsets[k], (*peer->ins)[k].data, bytes);
    }
    at += per;
  }
  std::vector<int> index_of(cross.group->size(), -1);  // Process -> index in step->peers.
  for (int q = 0; q < cross.group->size(); ++q) {
    if (q == me || count[q] == 0) continue;
    index_of[q] = static_cast<int>(step->peers.size());
    step->peers.push_back(q);
  }
  if (step->recv.size() < step->peers.size()) step->recv.resize(step->peers.size());
  for (int q = 0; q < cross.group->size(); ++q) {
    if (index_of[q] >= 0) step->recv[index_of[q]].resize(kHeader + count[q] * per);
  }
  remote->step = step;  // Recycled with `remote`, also when the exchange fails.
  const uint64_t tag = cross.launch_key * 1000003ull + rendezvous->NextStep();
  WORKSHOP_RETURN_IF_ERROR(cross.group->Exchange(tag, step));
  for (size_t i = 0; i < step->peers.size(); ++i) {
    uint64_t theirs = 0;
    std::memcpy(&theirs, step->recv[i].data(), kHeader);
    if (theirs != key) {
      return FailedPrecondition("workshop: process ", step->peers[i],
                                " reached a different "
                                "collective while process ",
                                me, " reached '", ctx.instr.op, "' at ", ctx.instr.loc,
                                "; every process must run the same "
                                "collectives in the same order");
    }
  }
  remote->ins.assign(n, {});
  remote->contributions.assign(n, Contribution{&ctx.instr, nullptr, nullptr});
  std::vector<int> seen(cross.group->size(), 0);
  for (int p = 0; p < n; ++p) {
    const int q = cross.process_of[p];
    if (q == me) continue;
    char* base = step->recv[index_of[q]].data() + kHeader + seen[q]++ * per;
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      remote->ins[p].push_back(Tensor{ctx.ins[k].dtype, ctx.ins[k].dims, base + offsets[k]});
    }
    remote->contributions[p].ins = &remote->ins[p];
  }
  return Status();
}

int Participants(const KernelContext& ctx) {
  return ctx.launch.rendezvous == nullptr ? 1 : ctx.launch.rendezvous->participants();
}

Status Invalid(const KernelContext& ctx, const std::string& what) {
  return InvalidArgument("workshop: '", ctx.instr.op, "' at ", ctx.instr.loc, ": ", what);
}

// Rendezvous errors (another participant failed or finished) say where this one waited.
Status Located(const KernelContext& ctx, const Status& s) {
  return s.ok() ? s
                : Status(s.code(), StrCat("workshop: '", ctx.instr.op, "' at ", ctx.instr.loc, ": ",
                                          s.message()));
}

// Exchange, then each phase followed by a barrier. A participant that reached a different
// collective (a collective under partition-dependent control flow) is seen by everyone, so
// all fail together after the first barrier instead of reading mismatched buffers.
template <typename... Phases>
Status RunCollective(const KernelContext& ctx, Phases&&... phases) {
  Rendezvous* rendezvous = ctx.launch.rendezvous;
  if (rendezvous == nullptr) {
    return Internal("workshop: '", ctx.instr.op, "' outside a launch at ", ctx.instr.loc);
  }
  const int me = ctx.launch.partition;
  auto located = [&](const Status& s) { return Located(ctx, s); };
  const Contribution mine{&ctx.instr, &ctx.ins, &ctx.outs};
  std::vector<const void*> published;
  WORKSHOP_RETURN_IF_ERROR(located(rendezvous->Exchange(me, &mine, &published)));
  RemoteContributions remote;
  if (rendezvous->cross_process() != nullptr) {
    // Every local participant takes part in the second Exchange, so a failed transfer
    // reaches them all (through the leader's status) at the same point.
    const int leader = rendezvous->leader();
    if (me == leader) {
      bool same = true;  // Local mismatches are reported below; don't send then.
      for (const void* p : published) {
        same &= p == nullptr || static_cast<const Contribution*>(p)->instr == &ctx.instr;
      }
      remote.status =
          same ? ExchangeAcrossProcesses(ctx, published, rendezvous, &remote) : Status();
    }
    std::vector<const void*> tables;
    WORKSHOP_RETURN_IF_ERROR(
        located(rendezvous->Exchange(me, me == leader ? &remote : nullptr, &tables)));
    const auto* received = static_cast<const RemoteContributions*>(tables[leader]);
    if (!received->status.ok()) {
      Status failed = located(received->status);
      (void)rendezvous->Barrier(me);  // The leader's table stays alive until all have read.
      return failed;
    }
    for (size_t p = 0; p < published.size(); ++p) {
      if (published[p] == nullptr && p < received->contributions.size()) {
        published[p] = &received->contributions[p];
      }
    }
  }
  Peers peers(published.size());
  Status status;
  for (size_t p = 0; p < published.size() && status.ok(); ++p) {
    peers[p] = static_cast<const Contribution*>(published[p]);
    if (peers[p] == nullptr || peers[p]->instr != &ctx.instr) {
      status = FailedPrecondition(
          "workshop: participant ", p, " reached ",
          peers[p] == nullptr ? std::string("a different collective")
                              : StrCat("'", peers[p]->instr->op, "' at ", peers[p]->instr->loc),
          " while participant ", me, " reached '", ctx.instr.op, "' at ", ctx.instr.loc,
          "; every device must run the same collectives in the same order");
    }
  }
  bool first = true;
  auto run = [&](auto& phase) {
    if (!first && !status.ok()) return;  // Mismatch: leave after the first barrier.
    first = false;
    if (status.ok()) phase(peers);
    Status barrier = located(rendezvous->Barrier(me));
    if (status.ok()) status = barrier;
  };
  (run(phases), ...);
  return status;
}

// The group (participant ids) containing this participant, and its index in the group.
struct Group {
  const IntList* members = nullptr;
  int64_t rank = 0;
  int64_t size() const { return static_cast<int64_t>(members->size()); }
  int64_t operator[](int64_t i) const { return (*members)[i]; }
};

Status FindGroup(const KernelContext& ctx, Group* group) {
  const int n = Participants(ctx);
  for (const IntList& members : ctx.instr.attr<std::vector<IntList>>("groups")) {
    for (int64_t m : members) {
      if (m < 0 || m >= n) {
        return Invalid(ctx, StrCat("replica group names participant ", m, " of ", n));
      }
    }
    auto it = std::find(members.begin(), members.end(), ctx.launch.partition);
    if (it != members.end()) {
      *group = Group{&members, it - members.begin()};
      return Status();
    }
  }
  return Invalid(ctx, StrCat("participant ", ctx.launch.partition, " is in no replica group"));
}

// `dims` with dims[d] multiplied by `mul` and divided by `div`.
Dims Scaled(const Dims& dims, size_t d, int64_t mul, int64_t div) {
  Dims out = dims;
  out[d] = out[d] * mul / div;
  return out;
}

Status CheckShape(const KernelContext& ctx, size_t k, const Dims& want) {
  if (*ctx.outs[k].dims != want || ctx.outs[k].dtype != ctx.ins[k].dtype) {
    return Invalid(ctx,
                   StrCat("result ", k, " is ", ShapeString(ctx.outs[k].dtype, *ctx.outs[k].dims),
                          ", expected ", ShapeString(ctx.ins[k].dtype, want)));
  }
  return Status();
}

Status CheckDim(const KernelContext& ctx, int64_t dim) {
  for (const Tensor& in : ctx.ins) {
    if (dim < 0 || dim >= in.rank()) {
      return Invalid(ctx, StrCat("dimension ", dim, " out of range for rank ", in.rank()));
    }
  }
  return Status();
}

// Row-major strides in bytes.
std::vector<int64_t> ByteStrides(const Tensor& t) {
  std::vector<int64_t> strides = RowMajorStrides(*t.dims);
  for (int64_t& s : strides) s *= ByteWidth(t.dtype);
  return strides;
}

// ---------------------------------------------------------------------------------------
// Reductions: all_reduce, reduce_scatter.

// Calls fn(Op{}, T{}) for reducer `body` on `dtype`; false if that pair is not implemented.
// Complex values fold with the functor's std::complex arithmetic (add: the (re, im) pairs).
template <typename Fn>
bool WithReducer(const std::string& body, DType dtype, Fn&& fn) {
  auto no = [] { return false; };
  return DispatchReducer(
      body,
      [&](auto op) {
        return DispatchAllOrComplex(
            dtype,
            [&](auto tag) {
              using Op = decltype(op);
              using T = decltype(tag);
              if constexpr (Op::template kSupports<T>) {
                fn(op, tag);
                return true;
              } else {
                return false;
              }
            },
            no);
      },
      no);
}

Status CheckReducer(const KernelContext& ctx) {
  const std::string& body = ctx.instr.attr<std::string>("body");
  for (const Tensor& in : ctx.ins) {
    if (!WithReducer(body, in.dtype, [](auto, auto) {})) {
      return Unimplemented("workshop: '", ctx.instr.op, "' with body '", body, "' on ",
                           DTypeName(in.dtype), " is not supported at ", ctx.instr.loc);
    }
  }
  return Status();
}

// The elements of each member's operand a reduction folds: `rows` rows of `len` contiguous
// elements, `stride` apart, from element `offset`.
struct Block {
  int64_t rows, len, stride, offset;
};

// dst (rows * len, dense) = the group's blocks of operand k folded in group order, so every
// element is computed the same way whichever participant computes it. Works tile by tile
// so the accumulator stays in L1 while the members' tiles stream through.
void FoldBlocks(const KernelContext& ctx, const Peers& peers, const Group& group, size_t k,
                const Block& block, void* dst) {
  constexpr int64_t kTile = 2048;
  WithReducer(ctx.instr.attr<std::string>("body"), ctx.ins[k].dtype, [&](auto op, auto tag) {
    using T = decltype(tag);
    T* out = static_cast<T*>(dst);
    for (int64_t r = 0; r < block.rows; ++r, out += block.len) {
      const int64_t row = block.offset + r * block.stride;
      for (int64_t t = 0; t < block.len; t += kTile) {
        const int64_t n = std::min(kTile, block.len - t);
        const T* first = (*peers[group[0]]->ins)[k].template as<T>() + row + t;
        T* acc = out + t;
        std::copy(first, first + n, acc);
        for (int64_t g = 1; g < group.size(); ++g) {
          const T* src = (*peers[group[g]]->ins)[k].template as<T>() + row + t;
          for (int64_t i = 0; i < n; ++i) acc[i] = op(acc[i], src[i]);
        }
      }
    }
  });
}

// Below this many elements (operands x participants), each participant folds whole
// operands itself: cheaper than a second barrier.
constexpr int64_t kSplitReductionElements = int64_t{1} << 16;

// acc[i] = body(acc[i], src[i]) for n elements of `dtype` (a pair CheckReducer accepted).
void FoldInto(const std::string& body, DType dtype, int64_t n, void* acc, const void* src) {
  WithReducer(body, dtype, [&](auto op, auto tag) {
    using T = decltype(tag);
    T* a = static_cast<T*>(acc);
    const T* b = static_cast<const T*>(src);
    for (int64_t i = 0; i < n; ++i) a[i] = op(a[i], b[i]);
  });
}

// What the leader of an all_reduce across processes hands its local members.
struct ReducedGroups {
  ~ReducedGroups() {
    if (group != nullptr) group->Recycle(std::move(step));
  }
  Status status;
  ProcessGroup* group = nullptr;
  std::shared_ptr<ProcessGroup::Step> step;       // Its `work` holds the results.
  std::vector<std::vector<const char*>> results;  // [group][operand]: folded bytes.
};

// The leader's part of an all_reduce across processes: folds this process's members of
// every group (in group order) into one partial per group and operand, exchanges the
// partials with the launch's other processes (instead of every member's operands: L times
// less traffic for L local members), and folds each group's partials in process order, so
// every process computes the same bits. Operands are padded to 16 bytes in messages, so
// every partial stays aligned for its element type.
Status FoldAcrossProcesses(const KernelContext& ctx, Rendezvous* rendezvous,
                           const std::vector<const void*>& local, ReducedGroups* reduced) {
  const CrossProcess& cross = *rendezvous->cross_process();
  const auto& groups = ctx.instr.attr<std::vector<IntList>>("groups");
  const std::string& body = ctx.instr.attr<std::string>("body");
  const int me = cross.group->rank();
  const int processes = cross.group->size();
  std::vector<int64_t> bytes, padded;
  int64_t per_group = 0;
  for (const Tensor& in : ctx.ins) {
    bytes.push_back(in.num_elements() * ByteWidth(in.dtype));
    padded.push_back((bytes.back() + 15) / 16 * 16);
    per_group += padded.back();
  }
  // on[q][g]: group g has members on process q.
  std::vector<std::vector<bool>> on(processes, std::vector<bool>(groups.size(), false));
  std::vector<int> count(processes, 0);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t m : groups[g]) on[cross.process_of[m]][g] = true;
  }
  for (int process : cross.process_of) ++count[process];
  constexpr int64_t kHeader = 16;
  auto message_size = [&](int q) {
    int64_t size = kHeader;
    for (size_t g = 0; g < groups.size(); ++g) size += on[q][g] ? per_group : 0;
    return size;
  };
  auto step = cross.group->NewStep();
  reduced->group = cross.group;
  reduced->step = step;  // Recycled with `reduced`, also when the exchange fails.
  step->send.resize(message_size(me));
  const uint64_t key = InstrKey(ctx.instr);
  std::memcpy(step->send.data(), &key, sizeof key);
  char* at = step->send.data() + kHeader;
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!on[me][g]) continue;
    bool first = true;
    for (int64_t m : groups[g]) {
      if (cross.process_of[m] != me) continue;
      const auto* member = static_cast<const Contribution*>(local[m]);
      int64_t offset = 0;
      for (size_t k = 0; k < ctx.ins.size(); offset += padded[k], ++k) {
        const void* src = (*member->ins)[k].data;
        if (bytes[k] == 0) continue;
        if (first) {
          std::memcpy(at + offset, src, bytes[k]);
        } else {
          FoldInto(body, ctx.ins[k].dtype, ctx.ins[k].num_elements(), at + offset, src);
        }
      }
      first = false;
    }
    at += per_group;
  }
  std::vector<int> index_of(processes, -1);
  for (int q = 0; q < processes; ++q) {
    if (q == me || count[q] == 0) continue;
    index_of[q] = static_cast<int>(step->peers.size());
    step->peers.push_back(q);
  }
  if (step->recv.size() < step->peers.size()) step->recv.resize(step->peers.size());
  for (int q = 0; q < processes; ++q) {
    if (index_of[q] >= 0) step->recv[index_of[q]].resize(message_size(q));
  }
  const uint64_t tag = cross.launch_key * 1000003ull + rendezvous->NextStep();
  WORKSHOP_RETURN_IF_ERROR(cross.group->Exchange(tag, step));
  for (size_t i = 0; i < step->peers.size(); ++i) {
    uint64_t theirs = 0;
    std::memcpy(&theirs, step->recv[i].data(), sizeof theirs);
    if (theirs != key) {
      return FailedPrecondition("workshop: process ", step->peers[i],
                                " reached a different "
                                "collective while process ",
                                me, " reached '", ctx.instr.op, "' at ", ctx.instr.loc,
                                "; every process must run the same "
                                "collectives in the same order");
    }
  }
  // The partial of group g from process q, in q's message.
  auto partial = [&](int q, size_t g) -> const char* {
    const char* base = q == me ? step->send.data() : step->recv[index_of[q]].data();
    base += kHeader;
    for (size_t h = 0; h < g; ++h) base += on[q][h] ? per_group : 0;
    return base;
  };
  step->work.resize(message_size(me));  // One result per group with members here.
  char* result = step->work.data() + kHeader;
  reduced->results.assign(groups.size(), {});
  for (size_t g = 0; g < groups.size(); ++g) {
    if (!on[me][g]) continue;
    bool first = true;
    for (int q = 0; q < processes; ++q) {
      if (!on[q][g]) continue;
      int64_t offset = 0;
      for (size_t k = 0; k < ctx.ins.size(); offset += padded[k], ++k) {
        const char* src = partial(q, g) + offset;
        if (first) {
          std::memcpy(result + offset, src, padded[k]);
        } else if (bytes[k] > 0) {
          FoldInto(body, ctx.ins[k].dtype, ctx.ins[k].num_elements(), result + offset, src);
        }
      }
      first = false;
    }
    int64_t offset = 0;
    for (size_t k = 0; k < ctx.ins.size(); offset += padded[k], ++k) {
      reduced->results[g].push_back(result + offset);
    }
    result += per_group;
  }
  return Status();
}

// all_reduce when the launch spans processes (see FoldAcrossProcesses): local Exchange,
// the leader folds and exchanges, then every local member copies its group's result.
Status AllReduceAcrossProcesses(KernelContext& ctx, const Group& group) {
  Rendezvous* rendezvous = ctx.launch.rendezvous;
  const int me = ctx.launch.partition;
  const int leader = rendezvous->leader();
  auto located = [&](const Status& s) { return Located(ctx, s); };
  const Contribution mine{&ctx.instr, &ctx.ins, &ctx.outs};
  std::vector<const void*> published;
  WORKSHOP_RETURN_IF_ERROR(located(rendezvous->Exchange(me, &mine, &published)));
  ReducedGroups reduced;
  if (me == leader) {
    for (const void* p : published) {
      if (p != nullptr && static_cast<const Contribution*>(p)->instr != &ctx.instr) {
        reduced.status =
            FailedPrecondition("workshop: a local participant reached another collective than '",
                               ctx.instr.op, "' at ", ctx.instr.loc,
                               "; every device must run the same collectives in the "
                               "same order");
      }
    }
    if (reduced.status.ok()) {
      reduced.status = FoldAcrossProcesses(ctx, rendezvous, published, &reduced);
    }
  }
  std::vector<const void*> tables;
  WORKSHOP_RETURN_IF_ERROR(
      located(rendezvous->Exchange(me, me == leader ? &reduced : nullptr, &tables)));
  const auto* table = static_cast<const ReducedGroups*>(tables[leader]);
  Status status = table->status;
  if (status.ok()) {
    const auto& groups = ctx.instr.attr<std::vector<IntList>>("groups");
    const size_t g = static_cast<size_t>(group.members - groups.data());
    for (size_t k = 0; k < ctx.outs.size(); ++k) {
      const int64_t n = ctx.outs[k].num_elements() * ByteWidth(ctx.outs[k].dtype);
      if (n > 0) std::memcpy(ctx.outs[k].data, table->results[g][k], n);
    }
  }
  Status barrier = located(rendezvous->Barrier(me));  // The leader's table stays until here.
  return status.ok() ? barrier : located(status);
}

// Small operands: every member folds all of each operand. Large ones: member i folds
// elements [i n / G, (i + 1) n / G) into its own output, and after a barrier copies the
// other slices from the members that computed them, so each element is folded once per group
// rather than once per member.
Status AllReduce(KernelContext& ctx) {
  Group group;
  WORKSHOP_RETURN_IF_ERROR(FindGroup(ctx, &group));
  WORKSHOP_RETURN_IF_ERROR(CheckReducer(ctx));
  int64_t total = 0;
  for (size_t k = 0; k < ctx.ins.size(); ++k) {
    WORKSHOP_RETURN_IF_ERROR(CheckShape(ctx, k, *ctx.ins[k].dims));
    total += ctx.ins[k].num_elements();
  }
  const int64_t g = group.size();
  auto slice = [&](int64_t n, int64_t member) { return n * member / g; };
  // The choice sets the number of barriers, so it must not depend on the group: groups may
  // differ in size.
  if (ctx.launch.rendezvous != nullptr && ctx.launch.rendezvous->cross_process() != nullptr) {
    return AllReduceAcrossProcesses(ctx, group);
  }
  if (total * Participants(ctx) < kSplitReductionElements) {
    return RunCollective(ctx, [&](const Peers& peers) {
      for (size_t k = 0; k < ctx.ins.size(); ++k) {
        const int64_t n = ctx.ins[k].num_elements();
        FoldBlocks(ctx, peers, group, k, Block{1, n, n, 0}, ctx.outs[k].data);
      }
    });
  }
  auto reduce_own_slice = [&](const Peers& peers) {
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      const int64_t n = ctx.ins[k].num_elements();
      const int64_t lo = slice(n, group.rank), hi = slice(n, group.rank + 1);
      FoldBlocks(ctx, peers, group, k, Block{1, hi - lo, n, lo},
                 static_cast<char*>(ctx.outs[k].data) + lo * ByteWidth(ctx.ins[k].dtype));
    }
  };
  auto gather_slices = [&](const Peers& peers) {
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      const int64_t n = ctx.ins[k].num_elements(), width = ByteWidth(ctx.ins[k].dtype);
      for (int64_t m = 0; m < g; ++m) {
        if (m == group.rank) continue;
        const int64_t lo = slice(n, m), hi = slice(n, m + 1);
        std::memcpy(static_cast<char*>(ctx.outs[k].data) + lo * width,
                    static_cast<const char*>((*peers[group[m]]->outs)[k].data) + lo * width,
                    (hi - lo) * width);
      }
    }
  };
  return RunCollective(ctx, reduce_own_slice, gather_slices);
}

// Member i's result is block i (along dim) of the group's folded operands.
Status ReduceScatter(KernelContext& ctx) {
  Group group;
  WORKSHOP_RETURN_IF_ERROR(FindGroup(ctx, &group));
  WORKSHOP_RETURN_IF_ERROR(CheckReducer(ctx));
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  WORKSHOP_RETURN_IF_ERROR(CheckDim(ctx, dim));
  for (size_t k = 0; k < ctx.ins.size(); ++k) {
    if ((*ctx.ins[k].dims)[dim] % group.size() != 0) {
      return Invalid(ctx, StrCat("dimension ", dim, " does not split into ", group.size()));
    }
    WORKSHOP_RETURN_IF_ERROR(CheckShape(ctx, k, Scaled(*ctx.ins[k].dims, dim, 1, group.size())));
  }
  return RunCollective(ctx, [&](const Peers& peers) {
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      const Dims& dims = *ctx.ins[k].dims;
      // Viewed as [outer, dims[dim], inner]: this member's rows are
      // [rank * part, (rank + 1) * part) of the middle dim.
      const int64_t inner = RowMajorStrides(dims)[dim];
      const int64_t part = dims[dim] / group.size();
      // The product of the dims before `dim` (not num_elements / (dims[dim] * inner),
      // which divides by zero when a later dim is zero-size).
      int64_t outer = 1;
      for (int64_t d = 0; d < dim; ++d) outer *= dims[d];
      FoldBlocks(ctx, peers, group, k,
                 Block{outer, part * inner, dims[dim] * inner, group.rank * part * inner},
                 ctx.outs[k].data);
    }
  });
}

// ---------------------------------------------------------------------------------------
// Data movement: all_gather, all_to_all, collective_permute, collective_broadcast.

// Result = the members' operands concatenated along dim, in group order.
Status AllGather(KernelContext& ctx) {
  Group group;
  WORKSHOP_RETURN_IF_ERROR(FindGroup(ctx, &group));
  const int64_t dim = ctx.instr.attr<int64_t>("dim");
  WORKSHOP_RETURN_IF_ERROR(CheckDim(ctx, dim));
  for (size_t k = 0; k < ctx.ins.size(); ++k) {
    WORKSHOP_RETURN_IF_ERROR(CheckShape(ctx, k, Scaled(*ctx.ins[k].dims, dim, group.size(), 1)));
  }
  return RunCollective(ctx, [&](const Peers& peers) {
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      const Tensor& in = ctx.ins[k];
      const Tensor& out = ctx.outs[k];
      const std::vector<int64_t> out_strides = ByteStrides(out);
      for (int64_t m = 0; m < group.size(); ++m) {
        char* at = static_cast<char*>(out.data) + m * (*in.dims)[dim] * out_strides[dim];
        StridedCopy(at, out_strides, (*peers[group[m]]->ins)[k].data, ByteStrides(in),
                    ByteWidth(in.dtype), *in.dims);
      }
    }
  });
}

// Each operand is split along split_dim into one block per member; member i receives block
// i of every member and concatenates them along concat_dim in group order.
Status AllToAll(KernelContext& ctx) {
  Group group;
  WORKSHOP_RETURN_IF_ERROR(FindGroup(ctx, &group));
  const int64_t split = ctx.instr.attr<int64_t>("split_dim");
  const int64_t concat = ctx.instr.attr<int64_t>("concat_dim");
  WORKSHOP_RETURN_IF_ERROR(CheckDim(ctx, split));
  WORKSHOP_RETURN_IF_ERROR(CheckDim(ctx, concat));
  const int64_t g = group.size();
  for (size_t k = 0; k < ctx.ins.size(); ++k) {
    if ((*ctx.ins[k].dims)[split] % g != 0) {
      return Invalid(ctx, StrCat("dimension ", split, " does not split into ", g));
    }
    WORKSHOP_RETURN_IF_ERROR(
        CheckShape(ctx, k, Scaled(Scaled(*ctx.ins[k].dims, split, 1, g), concat, g, 1)));
  }
  return RunCollective(ctx, [&](const Peers& peers) {
    for (size_t k = 0; k < ctx.ins.size(); ++k) {
      const Tensor& in = ctx.ins[k];
      const Tensor& out = ctx.outs[k];
      const Dims block = Scaled(*in.dims, split, 1, g);
      const std::vector<int64_t> in_strides = ByteStrides(in);
      const std::vector<int64_t> out_strides = ByteStrides(out);
      for (int64_t m = 0; m < g; ++m) {
        char* to = static_cast<char*>(out.data) + m * block[concat] * out_strides[concat];
        const char* from = static_cast<const char*>((*peers[group[m]]->ins)[k].data) +
                           group.rank * block[split] * in_strides[split];
        StridedCopy(to, out_strides, from, in_strides, ByteWidth(in.dtype), block);
      }
    }
  });
}

// collective_permute and collective_broadcast: each participant's result is the operand of
// participant sources[me], or zeros when that is -1.
Status CopyFromSource(KernelContext& ctx) {
  const IntList& sources = ctx.instr.attr<IntList>("sources");
  const int n = Participants(ctx);
  if (static_cast<int64_t>(sources.size()) != n) {
    return Invalid(ctx, StrCat(sources.size(), " sources for ", n, " participants"));
  }
  const int64_t source = sources[ctx.launch.partition];
  if (source < -1 || source >= n) {
    return Invalid(ctx, StrCat("source participant ", source, " of ", n));
  }
  WORKSHOP_RETURN_IF_ERROR(CheckShape(ctx, 0, *ctx.ins[0].dims));
  return RunCollective(ctx, [&](const Peers& peers) {
    const Tensor& out = ctx.outs[0];
    const int64_t bytes = out.num_elements() * ByteWidth(out.dtype);
    if (bytes == 0) return;
    if (source < 0) {
      std::memset(out.data, 0, bytes);  // All-zero bytes are 0 / 0.0 / false in every dtype.
    } else {
      std::memcpy(out.data, (*peers[source]->ins)[0].data, bytes);
    }
  });
}

// ---------------------------------------------------------------------------------------
// partition_id, replica_id: u32 scalars.

template <bool kPartition>
Status SpmdId(KernelContext& ctx) {
  const int64_t partitions = ctx.instr.attr<int64_t>("num_partitions");
  if (partitions <= 0 || ctx.outs[0].dtype != DType::kU32) {
    return Invalid(
        ctx, StrCat("num_partitions ", partitions, ", result ", DTypeName(ctx.outs[0].dtype)));
  }
  const int64_t p = ctx.launch.partition;
  ctx.outs[0].as<uint32_t>()[0] =
      static_cast<uint32_t>(kPartition ? p % partitions : p / partitions);
  return Status();
}

WORKSHOP_REGISTER_KERNEL("all_reduce", AllReduce);
// The axes these kernels split and join their operands along (KernelDef::check).
Status CheckDim(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  return c.Axis("dim", c.In(0));
}

Status CheckAllToAll(const Plan& plan, const Instr& instr) {
  const AttrCheck c(plan, instr);
  WORKSHOP_RETURN_IF_ERROR(c.Axis("split_dim", c.In(0)));
  return c.Axis("concat_dim", c.In(0));
}

WORKSHOP_REGISTER_KERNEL("reduce_scatter", .fn = ReduceScatter, .check = CheckDim);
WORKSHOP_REGISTER_KERNEL("all_gather", .fn = AllGather, .check = CheckDim);
WORKSHOP_REGISTER_KERNEL("all_to_all", .fn = AllToAll, .check = CheckAllToAll);
WORKSHOP_REGISTER_KERNEL("collective_permute", CopyFromSource);
WORKSHOP_REGISTER_KERNEL("collective_broadcast", CopyFromSource);
WORKSHOP_REGISTER_KERNEL("partition_id", SpmdId<true>);
WORKSHOP_REGISTER_KERNEL("replica_id", SpmdId<false>);

}  // namespace
}  // namespace workshop
