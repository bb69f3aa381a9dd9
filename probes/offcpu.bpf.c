/* Off-CPU time of one process's threads, from the sched_switch tracepoint.
 *
 * When a thread of the target leaves a CPU its user and kernel stacks are
 * taken; when it is switched back in, the time it was away is added to
 * (thread, user stack, kernel stack, preempted). A preempted thread was
 * runnable and waited for a CPU; any other had blocked (I/O, a lock, a
 * condition variable, sleep).
 *
 * A raw tracepoint, and no task_struct field read: the thread switched out
 * is still the current one, and the one switched in is known by its
 * task_struct's address, the key its switch-out was kept under. So libbpf
 * needs no kernel BTF (5 MB to parse at every start) and no kernel headers. */

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "offcpu.h"
#define DROPPED_KINDS OFFCPU_DROPPED_KINDS
#include "tracing.h"

#define MAX_THREADS 16384
#define MAX_KEYS 65536

#define TASK_DEAD 0x80   /* prev_state of a thread's last switch-out: it never comes back */

const volatile __u32 target_tgid = 0;
__u32 enabled = 0;   /* switch-outs are taken */
/* the constants probes/abi.py checks: their enums' names in BTF */
const volatile struct {
	enum tracing_limits tracing;
	enum offcpu_dropped dropped;
} abi_enums = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u64);   /* the thread's task_struct, by address */
	__type(value, struct away);
} aways SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct offcpu_key);
	__type(value, struct offcpu_value);
} offcpu SEC(".maps");

/* raw_tp/sched_switch(bool preempt, struct task_struct *prev,
 *                     struct task_struct *next, unsigned int prev_state) */
SEC("raw_tp/sched_switch")
int on_switch(__u64 *ctx)
{
	__u64 now = bpf_ktime_get_ns();
	__u64 task;
	struct away *a;

	/* switch-outs are taken while enabled; each is timed to its switch-in.
	 * Duty cycles attach the program in their on-phases only; user space
	 * counts the waits still open when a phase ends up to its end. */
	if (enabled && !((__u32)ctx[3] & TASK_DEAD)) {
		/* prev is still the current task here: its ids and its stacks */
		__u64 pid_tgid = bpf_get_current_pid_tgid();

		if ((pid_tgid >> 32) == target_tgid) {
			struct away out = {
				.ts = now,
				.ustack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK),
				.kstack = bpf_get_stackid(ctx, &stacks, 0),
				/* preempted in the kernel, or switched out still runnable
				 * (its time slice ended): it waits for a CPU, not for an event */
				.preempted = (ctx[0] & 1) || (__u32)ctx[3] == 0,
				.tid = (__u32)pid_tgid,
			};

			task = ctx[1];
			if (bpf_map_update_elem(&aways, &task, &out, BPF_ANY) != 0)
				count_drop(OFFCPU_THREAD_MAP_FULL);
		}
	}
	/* the thread switched in: one of the target's if its switch-out was kept */
	task = ctx[2];
	a = bpf_map_lookup_elem(&aways, &task);
	if (!a)
		return 0;   /* not the target's, or it left before the window opened */
	if (now > a->ts) {
		struct offcpu_key k = { .tid = a->tid, .ustack = a->ustack, .kstack = a->kstack,
					.preempted = a->preempted };
		struct offcpu_value *v = bpf_map_lookup_elem(&offcpu, &k);

		if (v) {
			__sync_fetch_and_add(&v->ns, now - a->ts);
			__sync_fetch_and_add(&v->count, 1);
		} else {
			struct offcpu_value first = { .ns = now - a->ts, .count = 1 };

			if (bpf_map_update_elem(&offcpu, &k, &first, BPF_NOEXIST) != 0) {
				/* another CPU made it meanwhile, or the map is full */
				v = bpf_map_lookup_elem(&offcpu, &k);
				if (v) {
					__sync_fetch_and_add(&v->ns, now - a->ts);
					__sync_fetch_and_add(&v->count, 1);
				} else {
					count_drop(OFFCPU_STACK_MAP_FULL);
				}
			}
		}
	}
	bpf_map_delete_elem(&aways, &task);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
