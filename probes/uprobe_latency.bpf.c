// SPDX-License-Identifier: GPL-2.0
/* Entry/return latency of user-space functions, one program pair for any
 * number of probed symbols. User space attaches probe_entry and probe_return
 * to each symbol with a cookie (see uprobe_latency.h) and reads the maps.
 *
 * Each thread keeps a stack of open probed calls, so nested and recursive
 * calls are timed separately, and each call knows how many probe hits
 * happened inside it; per thread, calls are kept by their probed caller
 * (the edges of the call tree). A partition id, when known, is carried down the stack
 * so callees are attributed to the partition their caller chose. */
#include <stdbool.h>
#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include "uprobe_latency.h"

char LICENSE[] SEC("license") = "GPL";

#include "x86_64_regs.h"

/* set before loading (see struct latency_config); the ABI version is
 * compiled in, and user space checks it against its own before loading */
const volatile struct latency_config config = { .abi = UPROBE_LATENCY_ABI };
/* the constants probes/abi.py checks: their enums' names in BTF */
const volatile struct {
	enum latency_limits limits;
	enum histogram_layout histogram;
	enum probe_cookie cookie;
	enum part_mode part_mode;
	enum stmt_cookie stmt_cookie;
	enum server_command command;
	enum counter_id counter;
} abi_enums = {};

/* Set by user space once every probe is attached, cleared before any is
 * detached: all functions share one window, whatever the attach order.
 * Non-zero, it numbers the window: duty cycles open many, and frames left
 * on a stack by a window (their return came while closed) are dropped in
 * the next, so a return never matches an entry of an earlier window. */
__u32 enabled = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_PROBES);
	__type(key, __u32);
	__type(value, struct probe_stats);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_PART_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct part_key);
	__type(value, struct part_stats);
} part_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EDGE_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct edge_key);
	__type(value, struct edge_stats);
} edges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct thread_stack);
} stacks SEC(".maps");

/* never written: all-zero values to insert from, too large for the BPF stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_stack);
} empty_stack SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct part_stats);
} empty_part SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STATEMENT_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct stmt_stats);
} statements SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_EDGE_KEYS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct stmt_edge_key);
	__type(value, struct edge_stats);
} stmt_edges SEC(".maps");

/* threads whose statements are not kept: mysqlprobe's own connections */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u32);
	__type(value, __u8);
} quiet_threads SEC(".maps");

/* a statement's first bytes, read at its start; its counters stay 0, so it
 * is also the first value of a new shape */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stmt_stats);
} stmt_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, MAX_COST_CLASSES);
	__type(key, __u32);
	__type(value, struct probe_cost);
} costs SEC(".maps");

/* the target's threads switched out runnable with probed calls open (see
 * on_switch), and how many there are: a switch-in looks for itself only
 * when some are */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u64);
	__type(value, struct preempted);
} preempted_threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} preempted_open SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

static __always_inline void count_by(__u32 id, __u64 n)
{
	__u64 *c = bpf_map_lookup_elem(&counters, &id);

	if (c)
		__sync_fetch_and_add(c, n);
}

static __always_inline void count(__u32 id)
{
	count_by(id, 1);
}

enum { SKIP, TARGET, HELPER };

/* the target while the window is open, and the calibration helper always
 * (its hits stay out of the engine counters, which describe the target) */
static __always_inline int wanted(__u64 pid_tgid)
{
	__u32 tgid = pid_tgid >> 32;

	if (config.calib_tgid && tgid == config.calib_tgid)
		return HELPER;
	return enabled && (!config.targ_tgid || tgid == config.targ_tgid) ? TARGET : SKIP;
}

static __always_inline unsigned long arg_value(struct x86_64_regs *regs, __u32 index)
{
	/* load every argument register: the verifier rejects a computed ctx offset */
	unsigned long a0 = regs->di, a1 = regs->si, a2 = regs->dx;
	unsigned long a3 = regs->cx, a4 = regs->r8, a5 = regs->r9;

	if (index == 0)
		return a0;
	if (index == 1)
		return a1;
	if (index == 2)
		return a2;
	if (index == 3)
		return a3;
	if (index == 4)
		return a4;
	return index == 5 ? a5 : 0;
}

/* any general register by its index in struct x86_64_regs (a USDT
 * operand's); all are loaded first, as arg_value does */
static __always_inline unsigned long reg_value(struct x86_64_regs *r, __u32 index)
{
	unsigned long v[] = { r->r15, r->r14, r->r13, r->r12, r->bp, r->bx, r->r11, r->r10,
			      r->r9, r->r8, r->ax, r->cx, r->dx, r->si, r->di, r->orig_ax,
			      r->ip, r->cs, r->flags, r->sp };

	return index < sizeof(v) / sizeof(v[0]) ? v[index] : 0;
}

/* a statement probe's text argument: an index, or a USDT operand */
static __always_inline __u32 text_arg_of(__u64 cookie)
{
	return (cookie >> STMT_TEXT_ARG_SHIFT) & 0x7f;
}

/* a USDT site's text operand (see STMT_TEXT_USDT): a register, or the
 * 8 bytes at a register plus the displacement */
static __always_inline unsigned long usdt_text(struct x86_64_regs *ctx, __u64 cookie)
{
	__u32 field = text_arg_of(cookie), reg = field & STMT_REG_MASK;
	unsigned long base, value = 0;

	if (reg == STMT_REG_NONE)
		return 0;
	base = reg_value(ctx, reg);
	if (!(field & STMT_TEXT_DEREF))
		return base;
	bpf_probe_read_user(&value, sizeof(value), (void *)(base + (__s16)(cookie >> STMT_DISP_SHIFT)));
	return value;
}

static __always_inline struct thread_stack *thread_stack(__u32 tid, bool create, int who)
{
	struct thread_stack *st = bpf_map_lookup_elem(&stacks, &tid);
	__u32 zero = 0, window = enabled;

	if (st && who == TARGET && st->window != window) {
		st->depth = 0;
		st->overflow = 0;
		st->stmt_depth = 0;
		st->window = window;
	}
	if (st || !create)
		return st;
	st = bpf_map_lookup_elem(&empty_stack, &zero);
	if (!st)
		return 0;
	bpf_map_update_elem(&stacks, &tid, st, BPF_NOEXIST);
	st = bpf_map_lookup_elem(&stacks, &tid);
	if (!st)
		count(CNT_NO_STACK);
	else if (who == TARGET)
		st->window = window;
	return st;
}

SEC("uprobe")
int probe_entry(struct x86_64_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 mode = (cookie >> COOKIE_MODE_SHIFT) & 0xff;
	__u32 depth, tid = (__u32)pid_tgid;
	struct thread_stack *st;
	struct frame *f;
	__s32 part = -1;

	int who = wanted(pid_tgid);

	if (who == SKIP)
		return 0;
	if (who == TARGET)
		count(CNT_ENTRIES);
	if (cookie & COOKIE_ENTRY_ONLY)
		return 0;
	st = thread_stack(tid, true, who);
	if (!st)
		return 0;
	st->hits++;
	depth = st->depth;
	if (depth >= MAX_DEPTH) {
		st->overflow++;
		count(CNT_DEPTH_OVERFLOW);
		return 0;
	}
	if (depth > 0)
		part = st->frames[(depth - 1) & (MAX_DEPTH - 1)].part;
	f = &st->frames[depth & (MAX_DEPTH - 1)];
	f->probe = cookie & COOKIE_PROBE_MASK;
	f->arg = arg_value(ctx, (cookie >> COOKIE_ARG_SHIFT) & 0x7f);
	if (mode == PART_ARG_VALUE)
		part = (__s32)(__u32)f->arg;
	f->part = part;
	f->stage = st->stage;
	f->hits_at_entry = st->hits;
	f->cost_at_entry = st->cost_ns;
	f->preempted_at_entry = st->preempted_ns;
	st->depth = depth + 1;
	f->ts = bpf_ktime_get_ns();
	return 0;
}

/* a global function: verified once on its own, which keeps probe_return's
 * verification small */
__noinline int record_edge(__u32 tid, __u32 probe, __u32 parent, __u64 delta, __s64 corrected)
{
	struct edge_key ek = { .tid = tid, .probe = probe, .parent = parent };
	struct edge_stats *es = bpf_map_lookup_elem(&edges, &ek);

	if (!es) {
		struct edge_stats first = {};

		bpf_map_update_elem(&edges, &ek, &first, BPF_NOEXIST);
		es = bpf_map_lookup_elem(&edges, &ek);
	}
	if (es) {
		/* one thread updates its own keys: no atomics needed */
		es->calls++;
		es->total_ns += delta;
		es->corrected_ns += corrected;
	}
	return 0;
}

__noinline int record_stmt_edge(struct stmt_edge_key *key, __u64 delta, __s64 corrected)
{
	struct stmt_edge_key k;
	struct edge_stats *es;

	if (!key)
		return 0;
	k = *key;
	es = bpf_map_lookup_elem(&stmt_edges, &k);
	if (!es) {
		struct edge_stats first = {};

		bpf_map_update_elem(&stmt_edges, &k, &first, BPF_NOEXIST);
		es = bpf_map_lookup_elem(&stmt_edges, &k);
	}
	if (es) {
		/* many threads run one statement shape */
		__sync_fetch_and_add(&es->calls, 1);
		__sync_fetch_and_add(&es->total_ns, delta);
		__sync_fetch_and_add(&es->corrected_ns, corrected);
	}
	return 0;
}

/* hist_slot() as a global function: the verifier checks its branches once,
 * on their own, and its callers see one unknown number to bound; inlined,
 * its five-step binary search multiplied their paths (record() called it
 * twice), and probe_return and stmt_return took 0.065 s each to verify */
__noinline __u64 slot_of(__u64 v)
{
	return hist_slot(v);
}

/* corrected: the latency less the probes' cost inside it, signed: the sums
 * stay unbiased; the histogram of corrected latencies clamps a call at 0.
 * A global function: the verifier checks it once, not once per path into
 * it (inlined, it took half of the object's 0.18 s load) */
__noinline int record(__u32 probe, __u64 delta, __s64 corrected, __u64 nested, __s32 part)
{
	struct part_key pk = { .probe = probe, .part = (__u32)part };
	struct probe_stats *ps = bpf_map_lookup_elem(&stats, &probe);
	struct part_stats *pp, *zero_part;
	__u64 slot = slot_of(delta), cslot = slot_of(corrected > 0 ? (__u64)corrected : 0);
	__u32 zero = 0;

	/* hist_slot() already clamps; these checks (on 64-bit values, so clang
	 * checks the registers it indexes with) are for the verifier */
	asm volatile("" : "+r"(slot));
	asm volatile("" : "+r"(cslot));
	if (slot >= MAX_SLOTS || cslot >= MAX_SLOTS)
		return 0;

	if (ps) {
		__sync_fetch_and_add(&ps->calls, 1);
		__sync_fetch_and_add(&ps->total_ns, delta);
		__sync_fetch_and_add(&ps->nested_hits, nested);
		__sync_fetch_and_add(&ps->corrected_ns, corrected);
		__sync_fetch_and_add(&ps->hist[slot], 1);
		__sync_fetch_and_add(&ps->chist[cslot], 1);
	}
	if (part >= 0) {
		pp = bpf_map_lookup_elem(&part_stats, &pk);
		if (!pp) {
			zero_part = bpf_map_lookup_elem(&empty_part, &zero);
			if (zero_part)
				bpf_map_update_elem(&part_stats, &pk, zero_part, BPF_NOEXIST);
			pp = bpf_map_lookup_elem(&part_stats, &pk);
		}
		if (pp) {
			__sync_fetch_and_add(&pp->calls, 1);
			__sync_fetch_and_add(&pp->total_ns, delta);
			__sync_fetch_and_add(&pp->corrected_ns, corrected);
			__sync_fetch_and_add(&pp->hist[slot], 1);
			__sync_fetch_and_add(&pp->chist[cslot], 1);
		}
	}
	return 0;
}

/* a global function: its map lookup stays out of probe_return's verification */
__noinline int count_preempted(__u32 probe, __u64 waited)
{
	struct probe_stats *ps = bpf_map_lookup_elem(&stats, &probe);

	if (ps) {
		__sync_fetch_and_add(&ps->preempted_ns, waited);
		__sync_fetch_and_add(&ps->preempted_calls, 1);
	}
	return 0;
}

SEC("uretprobe")
int probe_return(struct x86_64_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 probe = cookie & COOKIE_PROBE_MASK;
	__u32 mode = (cookie >> COOKIE_MODE_SHIFT) & 0xff;
	__u32 tid = (__u32)pid_tgid, depth, idx = 0, part_id;
	struct thread_stack *st;
	struct frame *f;
	__u32 cls = (cookie >> COOKIE_CLASS_SHIFT) & 0xff;
	struct probe_cost *cost = bpf_map_lookup_elem(&costs, &cls);
	__u64 nested, delta, waited, inner_cost, own = cost ? cost->own_ns : 0, pair = cost ? cost->pair_ns : 0;
	__s64 corrected;
	__s32 part;
	__u32 parent, stage;
	int i, found = 0;

	int who = wanted(pid_tgid);

	if (who == SKIP)
		return 0;
	if (who == TARGET)
		count(CNT_RETURNS);
	st = thread_stack(tid, false, who);
	if (!st) {
		count(CNT_UNMATCHED_RETURNS);
		return 0;
	}
	depth = st->depth;
	if (depth > MAX_DEPTH)
		depth = MAX_DEPTH;
	if (st->overflow) {
		/* a call past MAX_DEPTH returns before anything recorded below it */
		if (!depth || st->frames[(depth - 1) & (MAX_DEPTH - 1)].probe != probe) {
			st->overflow--;
			st->hits++;
			return 0;
		}
	}
	for (i = 0; i < MAX_DEPTH; i++) {
		if (i >= depth)
			break;
		idx = (depth - 1 - i) & (MAX_DEPTH - 1);
		if (st->frames[idx].probe == probe) {
			st->found = idx;
			found = 1;
			break;
		}
	}
	/* read the index back from the map: the verifier then checks what
	 * follows once, not once for every loop iteration it could come from */
	idx = *(volatile __u32 *)&st->found & (MAX_DEPTH - 1);
	if (!found) {
		st->hits++;
		count(CNT_UNMATCHED_RETURNS);
		return 0;
	}
	if (idx + 1 < depth) /* frames above never saw their return (exception unwinding, longjmp) */
		count_by(CNT_LOST_FRAMES, depth - idx - 1);
	f = &st->frames[idx & (MAX_DEPTH - 1)];
	nested = st->hits - f->hits_at_entry;
	st->hits++;
	delta = now - f->ts;
	/* time it waited for a CPU is the scheduler's, not the function's */
	waited = st->preempted_ns - f->preempted_at_entry;
	if (waited > delta)
		waited = delta;
	delta -= waited;
	if (waited)
		count_preempted(probe, waited);
	/* what the probes cost inside this call: its own share and the full
	 * cost of every probed call nested in it */
	inner_cost = own + (st->cost_ns - f->cost_at_entry);
	st->cost_ns += pair;
	part = f->part;
	if (mode == PART_ARG_OUT_PTR) {
		if (bpf_probe_read_user(&part_id, sizeof(part_id), (void *)f->arg) == 0) {
			part = (__s32)part_id;
			/* the caller is now working on the partition this call chose */
			if (idx > 0)
				st->frames[(idx - 1) & (MAX_DEPTH - 1)].part = part;
		} else {
			count(CNT_PART_READ_ERRORS);
		}
	}
	st->depth = idx;
	stage = f->stage;
	corrected = (__s64)(delta - inner_cost);
	record(probe, delta, corrected, nested, part);
	parent = idx > 0 ? st->frames[(idx - 1) & (MAX_DEPTH - 1)].probe : NO_PARENT;
	record_edge(tid, probe, parent, delta, corrected);
	if (who == TARGET && st->stmt_depth && st->stmt_window == st->window) {
		struct stmt_edge_key sk = { .stmt = st->stmt_key, .probe = probe, .parent = parent, .stage = stage };

		record_stmt_edge(&sk, delta, corrected);
	}
	return 0;
}

/* ---- statement boundaries ---- */

struct norm_ctx {
	__u64 hash;
	__u32 quote;  /* the quote of the string being skipped; 0: none */
	__u32 escape; /* the previous character was a backslash inside it */
	__u32 prev;   /* what came before: 0 space or start, 1 word, 2 number, 3 other */
	__u32 len;
};

static __always_inline void mix(struct norm_ctx *c, char ch)
{
	c->hash = (c->hash ^ (__u8)ch) * 0x100000001b3ULL; /* FNV-1a */
}

/* One character of the text: strings and numbers hash as '?', runs of
 * space as one. Texts that differ only in their literals then share a key;
 * user space merges further (value lists of any length) when it normalizes
 * the kept text, so the kernel's keys only ever split a digest, never merge two. */
static long normalize_step(__u32 i, struct norm_ctx *c)
{
	__u32 zero = 0;
	struct stmt_stats *s = bpf_map_lookup_elem(&stmt_scratch, &zero);
	__u64 at = i;
	char ch;
	bool digit, word;

	/* checked on the register that indexes (see record()) */
	asm volatile("" : "+r"(at));
	if (!s || at >= c->len || at >= STMT_TEXT_LEN)
		return 1;
	ch = s->text[at];
	if (c->quote) {
		if (c->escape)
			c->escape = 0;
		else if (ch == '\\')
			c->escape = 1;
		else if (ch == (char)c->quote)
			c->quote = 0;
		return 0;
	}
	digit = ch >= '0' && ch <= '9';
	word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_' || ch == '$';
	if (ch == '\'' || ch == '"') {
		c->quote = ch;
		mix(c, '?');
		c->prev = 3;
	} else if (c->prev == 2 && (digit || word || ch == '.')) {
		/* the rest of a number: 1.5, 1e3, 0x1f */
	} else if (digit && c->prev != 1) {
		mix(c, '?');
		c->prev = 2;
	} else if (ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r') {
		if (c->prev != 0)
			mix(c, ' ');
		c->prev = 0;
	} else {
		mix(c, ch);
		c->prev = word || digit ? 1 : 3;
	}
	return 0;
}

#define TEXT_UNTIL_NUL 0xffffffffU /* a length not known: the text ends at its NUL */

/* where the statement's text is, and its length; p: the text argument */
static __always_inline unsigned long stmt_text(struct x86_64_regs *ctx, __u64 cookie, unsigned long p, __u32 *len)
{
	struct { unsigned long text; __u32 len; } data = {};

	if ((cookie & STMT_TEXT_INDIRECT) && !(text_arg_of(cookie) & STMT_TEXT_USDT)) {
		bpf_probe_read_user(&data, sizeof(data), (void *)p);
		*len = data.len;
		return data.text;
	}
	if (((cookie >> STMT_LEN_ARG_SHIFT) & 0xff) == STMT_LEN_NONE) {
		*len = TEXT_UNTIL_NUL;
		return p;
	}
	*len = (__u32)arg_value(ctx, (cookie >> STMT_LEN_ARG_SHIFT) & 0xff);
	return p;
}

/* the shape key of the statement starting; its text in the scratch value */
static __always_inline __u64 stmt_key(struct x86_64_regs *ctx, __u64 cookie, __u32 command,
				      struct stmt_stats *scratch)
{
	__u32 text_arg = text_arg_of(cookie);
	unsigned long data = text_arg & STMT_TEXT_USDT ? usdt_text(ctx, cookie) : arg_value(ctx, text_arg);
	struct norm_ctx c = { .hash = 0xcbf29ce484222325ULL };
	__u64 no_text = STMT_KEY_NO_TEXT | ((__u64)command << 32);
	__u32 id = 0, len = 0;
	unsigned long text;
	long n;

	scratch->command = command;
	scratch->text_len = 0;
	if (command == COM_STMT_EXECUTE) {
		/* the statement id: the packet's first 4 bytes, or COM_DATA's first member */
		bpf_probe_read_user(&id, sizeof(id), (void *)data);
		return no_text | id;
	}
	if (command != COM_QUERY)
		return no_text;
	text = stmt_text(ctx, cookie, data, &len);
	if (!len)
		return no_text;
	/* a packet need not end where its text does: the length bounds it */
	n = bpf_probe_read_user_str(scratch->text, STMT_TEXT_LEN, (void *)text);
	if (n <= 1)
		return no_text;
	c.len = n - 1 < len ? n - 1 : len;
	if (len == TEXT_UNTIL_NUL) /* whole if it ended inside the buffer, else cut */
		len = n < STMT_TEXT_LEN ? n - 1 : STMT_TEXT_LEN;
	scratch->text_len = len; /* the whole text's: longer than the kept prefix, it was cut */
	bpf_loop(STMT_TEXT_LEN, normalize_step, &c, 0);
	return c.hash & ~STMT_KEY_NO_TEXT;
}

/* a statement of the target's that is kept: not one of mysqlprobe's own
 * connections; entry and return ask alike, so the engine's counters pair */
static __always_inline bool kept_statement(__u64 pid_tgid)
{
	__u32 tid = (__u32)pid_tgid;

	return wanted(pid_tgid) == TARGET && !bpf_map_lookup_elem(&quiet_threads, &tid);
}

SEC("uprobe")
int stmt_entry(struct x86_64_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 tid = (__u32)pid_tgid, zero = 0, command;
	struct stmt_stats *scratch;
	struct thread_stack *st;
	__u64 key;

	if (!kept_statement(pid_tgid))
		return 0;
	count(CNT_ENTRIES);
	st = thread_stack(tid, true, TARGET);
	if (!st)
		return 0;
	/* USDT query sites that do not nest: a start without its done (an
	 * exit path without the probe) ends with the next start */
	if ((text_arg_of(cookie) & STMT_TEXT_USDT) && (cookie & STMT_USDT_FLAT))
		st->stmt_depth = 0;
	if (st->stmt_depth++ > 0)
		return 0; /* a command run inside another (COM_MULTI) */
	scratch = bpf_map_lookup_elem(&stmt_scratch, &zero);
	if (!scratch)
		return 0;
	command = ((cookie >> STMT_CMD_ARG_SHIFT) & 0xff) == STMT_CMD_QUERY
			  ? COM_QUERY : (__u32)arg_value(ctx, (cookie >> STMT_CMD_ARG_SHIFT) & 0xff);
	key = stmt_key(ctx, cookie, command, scratch);
	if (!bpf_map_lookup_elem(&statements, &key))
		bpf_map_update_elem(&statements, &key, scratch, BPF_NOEXIST);
	st->stmt_key = key;
	st->stmt_window = st->window;
	st->stage = 0;
	st->stmt_hits_at_entry = st->hits;
	st->stmt_cost_at_entry = st->cost_ns;
	st->stmt_ts = bpf_ktime_get_ns();
	return 0;
}

SEC("uretprobe")
int stmt_return(struct x86_64_regs *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 tid = (__u32)pid_tgid, cls = (cookie >> COOKIE_CLASS_SHIFT) & 0xff;
	struct probe_cost *cost = bpf_map_lookup_elem(&costs, &cls);
	struct thread_stack *st;
	struct stmt_stats *s;
	__u64 delta, slot, hits, inner_cost;

	if (!kept_statement(pid_tgid))
		return 0;
	count(CNT_RETURNS);
	st = thread_stack(tid, false, TARGET);
	if (!st || !st->stmt_depth)
		return 0; /* began before the window opened */
	if (--st->stmt_depth > 0 || st->stmt_window != st->window)
		return 0;
	s = bpf_map_lookup_elem(&statements, &st->stmt_key);
	if (!s)
		return 0;
	delta = now - st->stmt_ts;
	hits = st->hits - st->stmt_hits_at_entry;
	inner_cost = (cost ? cost->own_ns : 0) + (st->cost_ns - st->stmt_cost_at_entry);
	record(cookie & COOKIE_PROBE_MASK, delta, (__s64)(delta - inner_cost), hits, -1);
	slot = slot_of(delta);
	asm volatile("" : "+r"(slot));
	if (slot >= MAX_SLOTS)
		return 0;
	__sync_fetch_and_add(&s->executions, 1);
	__sync_fetch_and_add(&s->total_ns, delta);
	__sync_fetch_and_add(&s->probe_hits, hits);
	__sync_fetch_and_add(&s->probe_cost_ns, inner_cost);
	__sync_fetch_and_add(&s->hist[slot], 1);
	return 0;
}

/* ---- the sentinel ----
 * Attached for the whole session at the target's entry point, which a
 * running process never executes: it keeps the kernel's mark that the
 * process has uprobes set while the duty cycles' probes come and go (see
 * UprobeSession._attach_sentinel). It never runs. */

SEC("uprobe")
int sentinel(void *ctx)
{
	return 0;
}

/* ---- stage changes ---- */

SEC("uprobe")
int stage_entry(struct x86_64_regs *ctx)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u64 cookie = bpf_get_attach_cookie(ctx);
	__u32 tid = (__u32)pid_tgid, probe = cookie & COOKIE_PROBE_MASK;
	__u32 cls = (cookie >> COOKIE_CLASS_SHIFT) & 0xff;
	struct probe_cost *cost = bpf_map_lookup_elem(&costs, &cls);
	struct probe_stats *ps;
	struct thread_stack *st;

	if (wanted(pid_tgid) != TARGET)
		return 0;
	count(CNT_ENTRIES);
	ps = bpf_map_lookup_elem(&stats, &probe);
	if (ps)
		__sync_fetch_and_add(&ps->calls, 1);
	st = thread_stack(tid, false, TARGET);
	if (!st)
		return 0;
	/* a hit inside the open probed calls: their corrections count it */
	st->hits++;
	st->cost_ns += cost ? cost->pair_ns / 2 : 0;
	if (st->stmt_depth)
		st->stage = (__u32)ctx->di;
	return 0;
}

/* ---- waits for a CPU ----
 * raw_tp/sched_switch(bool preempt, struct task_struct *prev,
 *                     struct task_struct *next, unsigned int prev_state)
 * A thread of the target switched out still runnable (preempted in the
 * kernel, or its time slice ended) while probed calls are open on it waits
 * for a CPU until it is switched back in: that time is added to its
 * preempted_ns, and probe_return leaves it out of the calls it spans. Under
 * more runnable threads than CPUs such waits made a 285-ns call average
 * 2.7 us. Blocking (a lock, I/O) is the function's own wait and stays in.
 * prev is the current task here; next is known by its task_struct's
 * address, as offcpu.bpf.c does. */
SEC("raw_tp/sched_switch")
int on_switch(__u64 *ctx)
{
	__u64 now, task, *open;
	__u32 zero = 0;
	struct preempted *p;
	struct thread_stack *st;

	open = bpf_map_lookup_elem(&preempted_open, &zero);
	if (!open)
		return 0;
	if (enabled && ((ctx[0] & 1) || (__u32)ctx[3] == 0)) {
		__u64 pid_tgid = bpf_get_current_pid_tgid();
		__u32 tid = (__u32)pid_tgid;

		if ((pid_tgid >> 32) == config.targ_tgid) {
			st = bpf_map_lookup_elem(&stacks, &tid);
			if (st && st->depth && st->window == enabled) {
				struct preempted out = { .ts = bpf_ktime_get_ns(), .tid = tid };

				task = ctx[1];
				if (bpf_map_update_elem(&preempted_threads, &task, &out, BPF_NOEXIST) == 0)
					__sync_fetch_and_add(open, 1);
			}
		}
	}
	if (!*open)
		return 0;
	task = ctx[2];
	p = bpf_map_lookup_elem(&preempted_threads, &task);
	if (!p)
		return 0;
	now = bpf_ktime_get_ns();  /* only for a switch that ends a wait: not on every switch */
	st = bpf_map_lookup_elem(&stacks, &p->tid);
	if (st && now > p->ts)
		st->preempted_ns += now - p->ts;
	if (bpf_map_delete_elem(&preempted_threads, &task) == 0)
		__sync_fetch_and_sub(open, 1);
	return 0;
}
