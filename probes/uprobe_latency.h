/* Layout shared by uprobe_latency.bpf.c and probes/abi.py (its ctypes
 * mirror). A change here bumps UPROBE_LATENCY_ABI; tests/unit/test_abi.py
 * checks every mirrored structure against the BTF of the compiled object,
 * and the collector refuses an object whose ABI version is not its own. */
#ifndef MYSQLPROBE_UPROBE_LATENCY_H
#define MYSQLPROBE_UPROBE_LATENCY_H

#include "histogram.h"

#define UPROBE_LATENCY_ABI 9

enum latency_limits {
	MAX_PROBES = 1024,
	STMT_TEXT_LEN = 128,     /* bytes of a statement's text read at its start */
	MAX_COST_CLASSES = 4,
	NO_PARENT = 0xffff,      /* edge_key.parent of a call with no probed caller */
};

#define MAX_DEPTH 32      /* nesting of probed functions tracked per thread */
#define MAX_THREADS 8192
#define MAX_PART_KEYS 16384
#define MAX_EDGE_KEYS 65536
#define MAX_STATEMENT_KEYS 4096  /* statement shapes (texts up to their literals) */

/* The statement probes (stmt_entry/stmt_return, on the server's command
 * dispatcher) mark where each thread's statements begin and end, so probed
 * calls are kept per statement shape as well as per thread; the statements
 * themselves count in `stats` under the probe's index. Their cookie:
 *   16 probe index | 8 command argument | 7 text argument |
 *   1 text through a pointer | 8 cost class (as above) | 8 length argument
 * Text through a pointer: the text argument points to a structure whose
 * first two members are the text and its length (MySQL 5.7+'s COM_DATA),
 * else it is the text and the length argument gives its length. */
/* On a USDT site (query__start, whose operands differ from site to site:
 * 8@%r13, 8@%rdx, 8@104(%rbx)) each site has its own cookie: the command
 * is STMT_CMD_QUERY (the site marks a query), the text argument is
 * STMT_TEXT_USDT | STMT_TEXT_DEREF where the operand is in memory |
 * a register (its index in struct x86_64_regs, STMT_REG_NONE: no text),
 * the top 16 bits hold the displacement (signed), and the length
 * STMT_LEN_NONE: the text ends at its NUL. STMT_USDT_FLAT (the bit that
 * is STMT_TEXT_INDIRECT elsewhere): the sites do not nest (query__start),
 * so a start ends a statement whose done never came. */
enum stmt_cookie {
	STMT_CMD_ARG_SHIFT = 16,
	STMT_TEXT_ARG_SHIFT = 24,
	STMT_TEXT_INDIRECT_BIT = 31,
	STMT_LEN_ARG_SHIFT = 40,
	STMT_CMD_QUERY = 0xff,
	STMT_TEXT_USDT = 0x40,
	STMT_TEXT_DEREF = 0x20,
	STMT_REG_MASK = 0x1f,
	STMT_REG_NONE = 0x1f,
	STMT_LEN_NONE = 0xff,
	STMT_DISP_SHIFT = 48,
	STMT_USDT_FLAT_BIT = 31,
	STMT_KEY_NO_TEXT_BIT = 63,
};
#define STMT_TEXT_INDIRECT (1ULL << STMT_TEXT_INDIRECT_BIT)
#define STMT_USDT_FLAT (1ULL << STMT_USDT_FLAT_BIT)
/* The stage probe (stage_entry, entry only, on P_S's start_stage) keeps
 * the stage key (its first argument) each thread is in, so the probed calls
 * of a statement are kept by the stage they began in; 0: not known (no
 * stage began since the statement did). Its cookie: 16 probe index | ... |
 * 8 cost class. Being entry only, it is taken to cost half its class's pair. */
enum server_command {
	COM_QUERY = 3,
	COM_STMT_EXECUTE = 23,
};
/* keys of commands that carry no text: the high bit, the command, and for
 * an execute the prepared statement's id */
#define STMT_KEY_NO_TEXT (1ULL << STMT_KEY_NO_TEXT_BIT)

/* bpf cookie, from the low bits:
 *   16 probe index | 8 partition mode | 7 argument index | 1 entry only |
 *   8 cost class (index into the costs map; 0 = no correction)
 * The costs map holds, per class of probed first instruction, what a probe
 * costs (see struct probe_cost); user space keeps it calibrated while the
 * window is open. */
enum probe_cookie {
	COOKIE_PROBE_MASK = 0xffff,
	COOKIE_MODE_SHIFT = 16,
	COOKIE_ARG_SHIFT = 24,
	COOKIE_ENTRY_ONLY_BIT = 31,   /* no return probe: count, push nothing */
	COOKIE_CLASS_SHIFT = 32,
};
#define COOKIE_ENTRY_ONLY (1ULL << COOKIE_ENTRY_ONLY_BIT)

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
	/* time the calls waited for a CPU, runnable but switched out (see
	 * on_switch), and the calls that did: left out of every latency above */
	__u64 preempted_ns;
	__u64 preempted_calls;
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
	__u64 preempted_at_entry;
	__u32 probe;
	__s32 part;
	__u32 stage;
	__u32 pad;
};

/* one statement shape: the texts that differ only in their literals (and,
 * for prepared statements, one statement id); its text is the first seen */
struct stmt_stats {
	__u64 executions;
	__u64 total_ns;
	__u64 probe_hits;     /* probe hits inside the executions (not the statement probe's own) */
	__u64 probe_cost_ns;  /* calibrated cost of the probed calls inside them */
	__u64 hist[MAX_SLOTS];
	__u32 command;
	__u32 text_len;     /* of the whole text: more than the text kept, it was cut */
	char text[STMT_TEXT_LEN];
};

/* probed calls inside a statement shape, by probed caller, as edge_key per thread */
struct stmt_edge_key {
	__u64 stmt;
	__u16 probe;
	__u16 parent;
	__u32 stage;  /* the P_S stage key the call began in; 0: not known */
};

struct thread_stack {
	__u32 depth;
	__u32 overflow;
	__u32 found;   /* scratch: the frame a return matched (see probe_return) */
	__u32 window;  /* the window its frames were pushed in (see `enabled`) */
	__u64 hits;
	__u64 cost_ns; /* calibrated cost of the probed calls completed on this thread */
	/* the statement open on this thread (stmt_depth > 0), in window stmt_window */
	__u64 stmt_key;
	__u64 stmt_ts;
	__u64 stmt_hits_at_entry;
	__u64 stmt_cost_at_entry;
	__u32 stmt_depth;
	__u32 stmt_window;
	__u32 stage;  /* the stage key this thread is in (see stage_entry) */
	__u32 pad;
	__u64 preempted_ns; /* time this thread waited for a CPU with probed calls open */
	struct frame frames[MAX_DEPTH];
};

/* a thread of the target switched out runnable with probed calls open,
 * until it is switched back in (keyed by its task_struct's address) */
struct preempted {
	__u64 ts;
	__u32 tid;
	__u32 pad;
};

#endif
