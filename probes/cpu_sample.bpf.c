/* CPU samples of one process's threads, counted in the kernel.
 *
 * A cpu-clock perf event on each CPU runs this program every period of
 * CPU time; the samples that land in the target's threads are counted by
 * (thread, user stack, kernel stack, or the user address alone). Nothing
 * is copied out per sample: user space reads the counts and the stacks
 * once, at the window's end. With config.slice_ns, each sample is counted
 * a second time under its slice of time, in `slices`: the same samples,
 * by when they were taken (a map of its own, so that a long window that
 * fills it loses the samples' times, counted, never the samples).
 *
 * Stacks are walked by the kernel along the frame pointers; one the stack
 * map refuses (its bucket holds another) is copied by its content
 * (kept_stack.h), so a hot stack is not lost at every sample. A binary
 * built without them gets the sampled user address alone (config.stacks
 * without SAMPLE_USER_STACKS): enough to tell the function on the CPU. */

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

struct task_struct;

#include "cpu_sample.h"
#define DROPPED_KINDS SAMPLE_DROPPED_KINDS
#include "tracing.h"
#include "x86_64_regs.h"
#include "user_stack.h"
#define KEPT_STACKS_FULL SAMPLE_RECOVERED_MAP_FULL
#include "kept_stack.h"

#define MAX_KEYS 65536
#define MAX_SLICED_KEYS 65536
#define LAST_SLICE 65535   /* a slice past it is counted in it */

const volatile struct sample_config config = {};
__u32 enabled = 0;   /* samples are counted */
/* the constants probes/abi.py checks: their enums' names in BTF */
const volatile struct {
	enum tracing_limits tracing;
	enum sample_stacks stacks;
	enum sample_dropped dropped;
	enum user_stack_limits user_stack;
	enum kept_stacks kept;
} abi_enums = {};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_SLICED_KEYS);
	__type(key, struct sample_key);
	__type(value, __u64);
} slices SEC(".maps");

/* one more sample under key k; false when the map is full */
static __always_inline int counted(void *map, struct sample_key *k)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(map, k);

	if (n) {
		__sync_fetch_and_add(n, 1);
		return 1;
	}
	if (bpf_map_update_elem(map, k, &one, BPF_NOEXIST) == 0)
		return 1;
	n = bpf_map_lookup_elem(map, k);   /* another CPU made it meanwhile */
	if (n)
		__sync_fetch_and_add(n, 1);
	return n != 0;
}

/* At a probe's breakpoint, or at a return-probed function's first
 * instructions before `mov %rsp,%rbp`: the function's return slot (there
 * the trampoline) is at the stack's top, not yet on the frame-pointer
 * chain, so the walk skips its caller, and the kernel's fixup of pending
 * returns gives each outer trampoline slot the next one's caller: the
 * user stack names wrong callers. (Once the frame is set up the slot is
 * at bp + 8, on the chain.) */
static __always_inline __u16 at_entry(unsigned long ip, unsigned long sp, unsigned long bp)
{
	unsigned long top[2] = {};
	__u8 insn = 0;

	if (!config.trampoline)
		return 0;
	/* the breakpoint itself, not yet taken: the return address is at the top */
	if (bpf_probe_read_user(&insn, 1, (const void *)ip) == 0 && insn == 0xcc)
		return 1;
	if (bpf_probe_read_user(top, sizeof(top), (const void *)sp) != 0)
		return 0;
	for (int i = 0; i < 2; i++)
		if (top[i] >= config.trampoline && top[i] < config.trampoline + 4096 && sp + 8 * i != bp + 8)
			return 1;
	return 0;
}

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 kernel_pc = 0;

	if (!enabled || (id >> 32) != config.target_tgid)
		return 0;

	struct sample_key k = { .tid = (__u32)id, .ustack = -1, .kstack = -1 };

	/* a kernel frame exists only when the sample interrupted kernel code */
	k.in_kernel = bpf_get_stack(ctx, &kernel_pc, sizeof(kernel_pc), 0) > 0;
	if (config.stacks & SAMPLE_USER_STACKS) {
		/* the thread's user registers: the sample's own, or, in the kernel, those it entered with */
		struct x86_64_regs u = {};

		if (k.in_kernel) {
			bpf_probe_read_kernel(&u, sizeof(u), (const void *)bpf_task_pt_regs(bpf_get_current_task_btf()));
		} else {
			const struct x86_64_regs *r = (const void *)&ctx->regs;

			u.ip = r->ip;
			u.sp = r->sp;
			u.bp = r->bp;
		}
		k.at_entry = u.sp ? at_entry(u.ip, u.sp, u.bp) : 0;
		if (!k.at_entry && u.sp)
			k.caller = leaf_caller(u.sp, config.text_lo, config.text_hi);
	}
	if (config.stacks & SAMPLE_USER_STACKS) {
		if (!take_stack(ctx, &stacks, BPF_F_USER_STACK, &k.ustack, &k.ucopied))
			count_drop(SAMPLE_STACKS_NOT_TAKEN);
	} else {
		bpf_get_stack(ctx, &k.ip, sizeof(k.ip), BPF_F_USER_STACK);
	}
	if ((config.stacks & SAMPLE_KERNEL_STACKS) && k.in_kernel) {
		if (!take_stack(ctx, &stacks, 0, &k.kstack, &k.kcopied))
			count_drop(SAMPLE_STACKS_NOT_TAKEN);
	}

	if (!counted(&samples, &k)) {
		count_drop(SAMPLE_MAP_FULL);
		return 0;
	}
	if (config.slice_ns) {
		__u64 slice = (bpf_ktime_get_ns() - config.origin_ns) / config.slice_ns;

		k.slice = slice < LAST_SLICE ? slice : LAST_SLICE;
		if (!counted(&slices, &k))
			count_drop(SAMPLE_SLICES_FULL);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
