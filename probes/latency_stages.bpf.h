/* Part of uprobe_latency.bpf.c (one object: it shares its maps and each
 * thread's stack of open calls): stage tracking. */
#include "latency_core.bpf.h"

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
