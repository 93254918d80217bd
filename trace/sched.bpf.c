// The kernel side of `gcr checkpoint --trace` (Note [Kernel timeline]): every thread of the
// traced processes going off and on CPU and why, becoming runnable, waiting at gcr's gate (its
// futex calls, Note [The gate seen from the kernel] in interpose/gate.cpp) and taking page
// faults; and the machine's disk requests. Processes are chosen by tgid in `targets`; a thread
// is reported by its tid.
#include "vmlinux.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "sched_event.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 1024);
  __type(key, u32);
  __type(value, u8);
} targets SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 8 << 20);
} events SEC(".maps");

// Events the ring buffer had no room for: the tracer reports them rather than a wrong timeline.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, u32);
  __type(value, u64);
} lost SEC(".maps");

// Pids as the tracer sees them: the kernel's are those of the initial pid namespace, and a gcr
// running in a namespace of its own (a container, `unshare --pid`) names processes by theirs.
// The tracer sets this to its pid namespace's inode before loading; 0 means the initial one.
const volatile __u32 tracer_pidns = 0;  // __u32: the skeleton names this type for C++ too

#define GCR_MAX_PIDNS_LEVEL 8

// The number of `p` in the tracer's pid namespace; 0 when it has none there.
static __always_inline u32 nr_seen(struct pid* p) {
  if (!p) return 0;
  if (!tracer_pidns) {
    struct upid first = {};
    bpf_core_read(&first, sizeof first, &p->numbers[0]);
    return first.nr;
  }
  unsigned int level = BPF_CORE_READ(p, level);
  for (int i = 0; i < GCR_MAX_PIDNS_LEVEL; i++) {
    if (i > level) break;
    struct upid up = {};
    bpf_core_read(&up, sizeof up, &p->numbers[i]);
    if (up.ns && BPF_CORE_READ(up.ns, ns.inum) == tracer_pidns) return up.nr;
  }
  return 0;
}

static __always_inline u32 tid_seen(struct task_struct* t) {
  return nr_seen(BPF_CORE_READ(t, thread_pid));
}

// The process of `t` as the tracer names it when that process is traced, else 0.
static __always_inline u32 traced(struct task_struct* t) {
  u32 tgid = nr_seen(BPF_CORE_READ(t, group_leader, thread_pid));
  return tgid && bpf_map_lookup_elem(&targets, &tgid) ? tgid : 0;
}

// An event of thread `t` of traced process `tgid` (traced()'s answer).
static __always_inline void emit(struct task_struct* t, u32 tgid, u32 kind, u32 state) {
  struct gcr_sched_event* e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
  if (!e) {
    u32 zero = 0;
    u64* n = bpf_map_lookup_elem(&lost, &zero);
    if (n) __sync_fetch_and_add(n, 1);
    return;
  }
  e->ts_ns = bpf_ktime_get_ns();
  e->tid = tid_seen(t);
  e->kind = kind;
  e->state = state;
  e->tgid = tgid;
  // No wake-up per event: on a busy machine that is a context switch of the tracer per event
  // (and more events). The tracer drains the buffer on a timer instead.
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
}

// The task state at the switch: __state since 5.14, state before (CO-RE picks the field).
struct task_struct___old {
  long state;
} __attribute__((preserve_access_index));

static __always_inline u32 task_state(struct task_struct* t) {
  if (bpf_core_field_exists(t->__state)) return BPF_CORE_READ(t, __state);
  return (u32)BPF_CORE_READ((struct task_struct___old*)t, state);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_switch, bool preempt, struct task_struct* prev, struct task_struct* next) {
  u32 tgid = traced(prev);
  if (tgid) emit(prev, tgid, GCR_EV_OFF_CPU, preempt ? 0 : task_state(prev));
  tgid = traced(next);
  if (tgid) emit(next, tgid, GCR_EV_ON_CPU, 0);
  return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(on_wakeup, struct task_struct* p) {
  u32 tgid = traced(p);
  if (tgid) emit(p, tgid, GCR_EV_WAKEUP, 0);
  return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(on_wakeup_new, struct task_struct* p) {
  u32 tgid = traced(p);
  if (tgid) emit(p, tgid, GCR_EV_NEW_THREAD, 0);
  return 0;
}

// A process the traced ones start is traced too: a launcher's workers, and for a restore, gcrd's
// CRIU and the tasks CRIU restores.
SEC("tp_btf/sched_process_fork")
int BPF_PROG(on_fork, struct task_struct* parent, struct task_struct* child) {
  if (!traced(parent)) return 0;
  u32 tgid = nr_seen(BPF_CORE_READ(child, group_leader, thread_pid));
  u8 one = 1;
  if (tgid) bpf_map_update_elem(&targets, &tgid, &one, BPF_NOEXIST);
  return 0;
}

// x86-64: futex(2) is syscall 202; its arguments are in rdi (uaddr), rsi (op), rdx (val).
#define GCR_NR_FUTEX 202
#define GCR_FUTEX_CMD_MASK 0x7f  // without FUTEX_PRIVATE_FLAG and FUTEX_CLOCK_REALTIME
#define GCR_FUTEX_WAIT 0
#define GCR_FUTEX_WAKE 1

SEC("tp_btf/sys_enter")
int BPF_PROG(on_sys_enter, struct pt_regs* regs, long id) {
  // Cheapest tests first: this runs for every syscall on the machine while a trace is on.
  if (id != GCR_NR_FUTEX) return 0;
  int op = (int)BPF_CORE_READ(regs, si) & GCR_FUTEX_CMD_MASK;
  u32 val = (u32)BPF_CORE_READ(regs, dx);
  bool in = op == GCR_FUTEX_WAIT, out = op == GCR_FUTEX_WAKE && val == 0;
  if (!in && !out) return 0;
  struct task_struct* self = bpf_get_current_task_btf();
  u32 tgid = traced(self);
  if (!tgid) return 0;
  unsigned long uaddr = BPF_CORE_READ(regs, di);
  u64 magic = 0;
  if (uaddr < 8 || bpf_probe_read_user(&magic, sizeof magic, (void*)(uaddr - 8)) != 0) return 0;
  if (magic == GCR_GATE_MAGIC) emit(self, tgid, in ? GCR_EV_GATE_IN : GCR_EV_GATE_OUT, 0);
  return 0;
}

// Page faults of traced threads (the pages a restored process touches first, CRIU's own work),
// counted per thread and reported per GCR_FAULT_BATCH.
struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384);
  __type(key, u32);
  __type(value, u32);
} fault_counts SEC(".maps");

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_page_fault_user, unsigned long address, struct pt_regs* regs,
             unsigned long error_code) {
  struct task_struct* self = bpf_get_current_task_btf();
  u32 tgid = traced(self);
  if (!tgid) return 0;
  u32 tid = tid_seen(self);
  u32* n = bpf_map_lookup_elem(&fault_counts, &tid);
  if (!n) {
    u32 one = 1;
    bpf_map_update_elem(&fault_counts, &tid, &one, BPF_ANY);
    return 0;
  }
  // A plain increment: the key is one thread, which faults on one CPU at a time.
  u32 count = *n + 1;
  if (count >= GCR_FAULT_BATCH) {
    *n = 0;
    emit(self, tgid, GCR_EV_FAULTS, GCR_FAULT_BATCH);
  } else {
    *n = count;
  }
  return 0;
}

// Disk requests of the whole machine while a trace is on: a load or drain bound by the disk shows.
#define GCR_REQ_OP_MASK 0xff  // (1 << REQ_OP_BITS) - 1
#define GCR_REQ_OP_READ 0
#define GCR_REQ_OP_WRITE 1

SEC("tp_btf/block_rq_issue")
int BPF_PROG(on_block_rq_issue, struct request* rq) {
  u32 op = BPF_CORE_READ(rq, cmd_flags) & GCR_REQ_OP_MASK;
  if (op != GCR_REQ_OP_READ && op != GCR_REQ_OP_WRITE) return 0;
  struct gcr_sched_event* e = bpf_ringbuf_reserve(&events, sizeof *e, 0);
  if (!e) {
    u32 zero = 0;
    u64* lost_n = bpf_map_lookup_elem(&lost, &zero);
    if (lost_n) __sync_fetch_and_add(lost_n, 1);
    return 0;
  }
  e->ts_ns = bpf_ktime_get_ns();
  e->tid = 0;
  e->tgid = 0;
  e->kind = op == GCR_REQ_OP_READ ? GCR_EV_IO_READ : GCR_EV_IO_WRITE;
  e->state = BPF_CORE_READ(rq, __data_len);
  bpf_ringbuf_submit(e, BPF_RB_NO_WAKEUP);
  return 0;
}

char LICENSE[] SEC("license") = "GPL";
