/* Layout shared by uprobe_latency.bpf.c and probes/abi.py (its ctypes
 * mirror). A change here bumps UPROBE_LATENCY_ABI; tests/unit/test_abi.py
 * checks every mirrored structure against the BTF of the compiled object,
 * and the collector refuses an object whose ABI version is not its own. */
#ifndef MYSQLPROBE_UPROBE_LATENCY_H
#define MYSQLPROBE_UPROBE_LATENCY_H

#include "histogram.h"

#define UPROBE_LATENCY_ABI 5

#define MAX_PROBES 1024
#define MAX_DEPTH 32      /* nesting of probed functions tracked per thread */
#define MAX_THREADS 8192
#define MAX_PART_KEYS 16384
#define MAX_EDGE_KEYS 65536

/* bpf cookie, from the low bits:
 *   16 probe index | 8 partition mode | 7 argument index | 1 entry only |
 *   8 cost class (index into the costs map; 0 = no correction)
 * The costs map holds, per class of probed first instruction, what a probe
 * costs (see struct probe_cost); user space keeps it calibrated while the
 * window is open. */
#define COOKIE_PROBE_MASK 0xffff
#define COOKIE_MODE_SHIFT 16
#define COOKIE_ARG_SHIFT 24
#define COOKIE_ENTRY_ONLY (1ULL << 31) /* no return probe: count, push nothing */
#define COOKIE_CLASS_SHIFT 32
#define MAX_COST_CLASSES 4

/* .rodata: set by user space before loading */
struct latency_config {
	__u32 abi;        /* UPROBE_LATENCY_ABI, compiled in */
	__u32 targ_tgid;
	__u32 calib_tgid; /* the calibration helper: counted whether the window is open or not */
};

struct probe_cost {
	__u64 own_ns;  /* the part of a probe's entry and return handling that falls
			* between the two timestamps of its own call */
	__u64 pair_ns; /* all its entry and return cost, as seen from an enclosing call */
};

enum part_mode {
	PART_NONE = 0,      /* inherits the partition of the enclosing probed call */
	PART_ARG_VALUE = 1, /* integer argument at entry is the partition id */
	PART_ARG_OUT_PTR = 2, /* argument points to a u32 partition id set by return */
};

enum counter_id {
	CNT_ENTRIES = 0,
	CNT_RETURNS,
	CNT_UNMATCHED_RETURNS, /* return without a recorded entry (call began before attach) */
	CNT_LOST_FRAMES,       /* frames whose return never came (exception, longjmp) */
	CNT_DEPTH_OVERFLOW,    /* calls nested deeper than MAX_DEPTH, not timed */
	CNT_NO_STACK,          /* thread stack could not be allocated */
	CNT_PART_READ_ERRORS,  /* partition id pointer unreadable at return */
	CNT_MAX,
};

struct probe_stats {
	__u64 calls;
	__u64 total_ns;       /* raw: as the timestamps say */
	__u64 nested_hits;    /* probe hits (entries and returns) inside the calls */
	__s64 corrected_ns;   /* minus the calibrated cost of the probes inside; unclamped */
	__u64 hist[MAX_SLOTS];
	__u64 chist[MAX_SLOTS]; /* of corrected latencies, each clamped at 0 */
};

struct part_key {
	__u32 probe;
	__u32 part;
};

struct part_stats {
	__u64 calls;
	__u64 total_ns;
	__s64 corrected_ns;
	__u64 hist[MAX_SLOTS];
	__u64 chist[MAX_SLOTS];
};

/* one edge of the dynamic call tree of probed functions, per thread:
 * probe called while parent (NO_PARENT: no probed caller) was open */
#define NO_PARENT 0xffff
struct edge_key {
	__u32 tid;
	__u16 probe;
	__u16 parent;
};

struct edge_stats {
	__u64 calls;
	__u64 total_ns;
	__s64 corrected_ns;
};

struct frame {
	__u64 ts;
	__u64 arg;
	__u64 hits_at_entry;
	__u64 cost_at_entry;
	__u32 probe;
	__s32 part;
};

struct thread_stack {
	__u32 depth;
	__u32 overflow;
	__u32 found;   /* scratch: the frame a return matched (see probe_return) */
	__u32 window;  /* the window its frames were pushed in (see `enabled`) */
	__u64 hits;
	__u64 cost_ns; /* calibrated cost of the probed calls completed on this thread */
	struct frame frames[MAX_DEPTH];
};

#endif
