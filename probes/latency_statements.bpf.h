/* Part of uprobe_latency.bpf.c (one object: it shares its maps and each
 * thread's stack of open calls): statement keying. The statement probes
 * (stmt_entry/stmt_return on the server's command dispatcher, or its
 * query__start/done USDT sites) mark where each thread's statements begin
 * and end and key them by their text up to its literals, so that probed
 * calls are kept per statement shape (record_stmt_edge) as well as per
 * thread. probe_return calls record_stmt_edge. */
#include "latency_core.bpf.h"

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
