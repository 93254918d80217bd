/* One scheduling or gate event of a traced process, as the eBPF programs (sched.bpf.c) write it
 * into their ring buffer and the tracer (kernel_tracer.cpp) reads it. Shared by C for BPF and
 * C++; fixed-size fields only. */
#ifndef GCR_TRACE_SCHED_EVENT_H
#define GCR_TRACE_SCHED_EVENT_H

enum gcr_sched_event_kind {
  GCR_EV_OFF_CPU = 1,  /* the thread left the CPU; state = its task state then */
  GCR_EV_ON_CPU = 2,   /* the thread got the CPU */
  GCR_EV_WAKEUP = 3,   /* the thread became runnable */
  GCR_EV_GATE_IN = 4,  /* the thread waits at gcr's API gate (again, while the gate stays closed) */
  GCR_EV_GATE_OUT = 5, /* ... and has left it */
  GCR_EV_NEW_THREAD = 6, /* a thread of the process was created */
  GCR_EV_FAULTS = 7,     /* the thread took `state` more page faults (reported in batches) */
  GCR_EV_IO_READ = 8,    /* the machine's disks were sent a read of `state` bytes (tid 0) */
  GCR_EV_IO_WRITE = 9    /* ... a write of `state` bytes */
};

/* Page faults are reported every GCR_FAULT_BATCH of one thread: a restored process can take
 * millions, one event each would overflow the ring buffer. */
#define GCR_FAULT_BATCH 64

/* What precedes the futex word gcr's gate waits on (Note [The gate seen from the kernel] in
 * interpose/gate.cpp): "gcrGATE1" read as a little-endian 64-bit number. */
#define GCR_GATE_MAGIC 0x3145544147726367ULL

/* Task state bits as the kernel's sched_switch reports them (include/linux/sched.h). */
#define GCR_TASK_RUNNING 0x0
#define GCR_TASK_INTERRUPTIBLE 0x1
#define GCR_TASK_UNINTERRUPTIBLE 0x2
#define GCR_TASK_STOPPED 0x4
#define GCR_TASK_TRACED 0x8

struct gcr_sched_event {
  unsigned long long ts_ns; /* CLOCK_MONOTONIC (bpf_ktime_get_ns) */
  unsigned int tid;
  unsigned int kind;  /* enum gcr_sched_event_kind */
  unsigned int state; /* GCR_EV_OFF_CPU: the task state bits; FAULTS: a count; IO: bytes */
  unsigned int tgid;  /* the thread's process */
};

#endif
