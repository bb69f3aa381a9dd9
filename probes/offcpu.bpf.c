/* Off-CPU time of one process's threads, from the sched_switch tracepoint.
 *
 * When a thread of the target leaves a CPU its user and kernel stacks are
 * taken; when it is switched back in, the time it was away is added to
 * (thread, user stack, kernel stack, preempted). A preempted thread was
 * runnable and waited for a CPU; any other had blocked (I/O, a lock, a
 * condition variable, sleep). Where the user stack's frame-pointer walk
 * stops in a library that keeps none (glibc's select(), its futex waits),
 * the stack is recovered by scanning for the binary's caller (user_stack.h).
 *
 * Where the target leaves its CPUs more often than stacks are worth taking
 * (an OLTP load: tens of thousands of switches a second), a CPU takes the
 * stacks of one switch-out in `every`, chosen by count, not by time, so that
 * no kind of wait is favoured (`every` follows the CPU's rate over the last
 * PACE_WINDOW_NS), and weighs `every`. Every wait is timed all the same,
 * into the thread's totals by kind (thread_waits), which user space spreads
 * over the thread's taken stacks of that kind by their weighed waits.
 *
 * A raw tracepoint, and no task_struct field read: the thread switched out
 * is still the current one, and the one switched in is known by its
 * task_struct's address, the key its switch-out was kept under; the user
 * registers come from bpf_task_pt_regs(). A recovered stack reads the
 * thread's pending uretprobe returns by CO-RE (user_stack.h), against the
 * kernel's BTF; no kernel headers are needed. */

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

#include "offcpu.h"
#define DROPPED_KINDS OFFCPU_DROPPED_KINDS
#include "tracing.h"
#include "x86_64_regs.h"
#include "user_stack.h"
#define KEPT_STACKS_FULL OFFCPU_RECOVERED_MAP_FULL
#include "kept_stack.h"

struct task_struct;

#define MAX_THREADS 16384
#define MAX_KEYS 65536

#define TASK_DEAD 0x80   /* prev_state of a thread's last switch-out: it never comes back */

const volatile struct offcpu_config config = {};
__u32 enabled = 0;   /* switch-outs are taken */
/* the constants probes/abi.py checks: their enums' names in BTF */
const volatile struct {
	enum tracing_limits tracing;
	enum offcpu_dropped dropped;
	enum user_stack_limits user_stack;
	enum offcpu_stacks kernel;
	enum kept_stacks kept;
} abi_enums = {};

/* the kernel stacks of switch-outs (offcpu.h: enum offcpu_stacks) */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, KERNEL_STACKS);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, STACK_DEPTH * sizeof(__u64));
} kernel_stacks SEC(".maps");

/* The thread's user stack recovered where the frame-pointer walk stopped in
 * a library: its key in `recovered` (even), else 0. u: its user registers. */
static __always_inline __u64 recovered_user_stack(const struct x86_64_regs *u, struct task_struct *task)
{
	struct user_code code = { config.text_lo, config.text_hi, config.trampoline };
	__u32 zero = 0;
	struct stack_scan *s = bpf_map_lookup_elem(&scan, &zero);
	__u64 h;

	if (!s || !config.text_hi)
		return 0;
	h = recover_user_stack(u, &code, (struct task_struct___mp *)task, s);
	if (!h)
		return 0;
	h &= ~(__u64)COPIED_STACK;
	return keep_stack(h ? h : 2, s);
}

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct offcpu_pace);
} pace SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, struct offcpu_thread_key);
	__type(value, struct offcpu_timed);
} thread_waits SEC(".maps");

/* A wait under way when the tracing switched on again after a quiet phase:
 * its switch-out was not seen, so its switch-in finds no `aways` entry. It
 * is timed from the switch-on (`switched_on`, which user space sets before
 * `enabled`; 0 at the window's opening, where the process's snapshot names
 * the blocked threads' stacks instead), into `under_way` by thread; user
 * space read what each thread was blocked in at the switch-on. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} switched_on SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct offcpu_timed);
} under_way SEC(".maps");

/* the ids of the thread switched in, by CO-RE against the kernel's BTF */
struct task_struct___ids {
	int pid;
	int tgid;
} __attribute__((preserve_access_index));

static __always_inline void time_under_way(__u64 next, __u64 now)
{
	struct task_struct___ids *t = (struct task_struct___ids *)next;
	__u32 zero = 0, tid;
	__u64 *on = bpf_map_lookup_elem(&switched_on, &zero);
	struct offcpu_timed first = {}, *w;

	if (!on || !*on || now <= *on || (__u32)BPF_CORE_READ(t, tgid) != config.target_tgid)
		return;
	tid = (__u32)BPF_CORE_READ(t, pid);
	w = value_for(&under_way, &tid, &first, OFFCPU_THREAD_MAP_FULL);
	if (!w)
		return;
	__sync_fetch_and_add(&w->ns, now - *on);
	__sync_fetch_and_add(&w->count, 1);
}

/* Whether this switch-out's stacks are taken, as the waits they stand for:
 * 1 unpaced; else the CPU's `every` if its turn has come, 0 if not (the
 * CPU's first PACE_WINDOW_NS in the window takes every one: no rate yet). */
static __always_inline __u32 stacks_taken(__u64 now)
{
	__u32 zero = 0;
	struct offcpu_pace *p;
	__u32 every;

	if (!config.stacks_per_s || !(p = bpf_map_lookup_elem(&pace, &zero)))
		return 1;
	p->seen++;
	if (now - p->since >= PACE_WINDOW_NS) {
		/* switch-outs a second at the window's rate, over the stacks wanted a second */
		__u64 rate = (__u64)p->seen * (1000000000ULL / PACE_WINDOW_NS);

		p->every = rate > config.stacks_per_s ? (__u32)(rate / config.stacks_per_s) : 1;
		p->seen = 0;
		p->since = now;
	}
	every = p->every ? p->every : 1;
	return (p->count++ % every) == 0 ? every : 0;
}

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

/* ns and waits more on a stack's value */
static __always_inline void add_wait(const struct offcpu_key *k, __u64 ns, __u64 waits)
{
	struct offcpu_value zero = {};
	struct offcpu_value *v = value_for(&offcpu, k, &zero, OFFCPU_STACK_MAP_FULL);

	if (v) {
		__sync_fetch_and_add(&v->ns, ns);
		__sync_fetch_and_add(&v->count, waits);
	}
}

/* A wait's decade of length: 0 under SHORTEST_LENGTH_NS, then one a decade, the last open. */
static __always_inline __u32 wait_length(__u64 ns)
{
	__u64 bound = SHORTEST_LENGTH_NS;
	__u32 i;

	for (i = 0; i < WAIT_LENGTHS - 1; i++, bound *= 10)
		if (ns < bound)
			return i;
	return WAIT_LENGTHS - 1;
}

/* One more wait of a thread of a kind, timed; walked: its stacks were taken. */
static __always_inline void time_wait(const struct offcpu_thread_key *t, __u64 ns, __u32 walked)
{
	struct offcpu_timed zero = {};
	struct offcpu_timed *w = value_for(&thread_waits, t, &zero, OFFCPU_THREAD_MAP_FULL);

	if (!w)
		return;
	__sync_fetch_and_add(&w->ns, ns);
	__sync_fetch_and_add(&w->count, 1);
	if (walked)
		__sync_fetch_and_add(&w->walked, 1);
}

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

		if ((pid_tgid >> 32) == config.target_tgid) {
			struct away out = {
				.ts = now,
				.ustack = -1,
				.kstack = -1,
				/* preempted in the kernel, or switched out still runnable
				 * (its time slice ended): it waits for a CPU, not for an event */
				.preempted = (ctx[0] & 1) || (__u32)ctx[3] == 0,
				.tid = (__u32)pid_tgid,
				.taken = stacks_taken(now),
			};

			if (out.taken) {
				struct task_struct *t = bpf_get_current_task_btf();
				struct x86_64_regs u = {};

				/* the user registers it entered the kernel with, or was interrupted at */
				bpf_probe_read_kernel(&u, sizeof(u), (const void *)bpf_task_pt_regs(t));
				if (!take_stack(ctx, &kernel_stacks, 0, &out.kstack, &out.kcopied))
					count_drop(OFFCPU_KERNEL_STACK_NOT_TAKEN);
				out.urecovered = recovered_user_stack(&u, t);
				/* the kernel's walk only where it is whole: a recovered stack is not
				 * walked again, nor kept in `stacks` where no key would name it */
				if (!out.urecovered) {
					if (!take_stack(ctx, &stacks, BPF_F_USER_STACK, &out.ustack, &out.urecovered))
						count_drop(OFFCPU_USER_STACK_NOT_TAKEN);
					/* in a library's system call wrapper (a frameless leaf): the walk
					 * from %rbp skips the binary's function that called it */
					if (u.ip < config.text_lo || u.ip >= config.text_hi)
						out.caller = leaf_caller(u.sp, config.text_lo, config.text_hi);
				}
			}

			task = ctx[1];
			if (bpf_map_update_elem(&aways, &task, &out, BPF_ANY) != 0)
				count_drop(OFFCPU_THREAD_MAP_FULL);
		}
	}
	/* the thread switched in: one of the target's if its switch-out was kept */
	task = ctx[2];
	a = bpf_map_lookup_elem(&aways, &task);
	if (!a) {
		/* not the target's, or it left before the window opened or in a quiet phase */
		if (enabled)
			time_under_way(task, now);
		return 0;
	}
	if (now > a->ts) {
		__u32 length = wait_length(now - a->ts);
		struct offcpu_thread_key t = { .tid = a->tid, .preempted = a->preempted, .length = length };

		time_wait(&t, now - a->ts, a->taken);
		if (a->taken) {
			struct offcpu_key k = { .tid = a->tid, .ustack = a->ustack, .kstack = a->kstack,
						.preempted = a->preempted, .urecovered = a->urecovered,
						.caller = a->caller, .length = length, .kcopied = a->kcopied };

			/* weighed by the waits it stands for: a CPU's period may change */
			add_wait(&k, (now - a->ts) * a->taken, a->taken);
		}
	}
	bpf_map_delete_elem(&aways, &task);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
