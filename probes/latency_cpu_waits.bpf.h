/* Part of uprobe_latency.bpf.c (one object: it shares its maps and each
 * thread's stack of open calls): the waits for a CPU left out of the
 * calls' times. probe_return calls count_preempted. */
#include "latency_core.bpf.h"

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
