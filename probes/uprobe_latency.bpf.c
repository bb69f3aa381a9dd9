// SPDX-License-Identifier: GPL-2.0
/* Entry/return latency of user-space functions, one program pair for any
 * number of probed symbols. User space attaches probe_entry and probe_return
 * to each symbol with a cookie (see uprobe_latency.h) and reads the maps.
 *
 * Each thread keeps a stack of open probed calls, so nested and recursive
 * calls are timed separately, and each call knows how many probe hits
 * happened inside it; per thread, calls are kept by their probed caller
 * (the edges of the call tree). A partition id, when known, is carried down the stack
 * so callees are attributed to the partition their caller chose.
 *
 * This file holds the entry and return programs; what every part shares is
 * in latency_core.bpf.h, and the statement keying, stage tracking and waits
 * for a CPU are in latency_statements.bpf.h, latency_stages.bpf.h and
 * latency_cpu_waits.bpf.h, each standing on the core alone. */
#include "latency_core.bpf.h"
#include "latency_cpu_waits.bpf.h"
#include "latency_statements.bpf.h"
#include "latency_stages.bpf.h"

char LICENSE[] SEC("license") = "GPL";

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

