/* CPU samples of one process's threads, counted in the kernel.
 *
 * A cpu-clock perf event on each CPU runs this program every period of
 * CPU time; the samples that land in the target's threads are counted by
 * (thread, user stack, kernel stack, or the user address alone). Nothing
 * is copied out per sample: user space reads the counts and the stacks
 * once, at the window's end.
 *
 * Stacks are walked by the kernel along the frame pointers. A binary
 * built without them gets the sampled user address alone (config.stacks
 * without SAMPLE_USER_STACKS): enough to tell the function on the CPU. */

#include <linux/types.h>
#include <linux/bpf.h>
#include <linux/bpf_perf_event.h>
#include <bpf/bpf_helpers.h>

#define DROPPED_KINDS 2
#include "tracing.h"

#define MAX_KEYS 65536
#define SAMPLE_USER_STACKS 1
#define SAMPLE_KERNEL_STACKS 2

struct sample_config {
	__u32 target_tgid;
	__u32 stacks;   /* SAMPLE_* bits */
};

const volatile struct sample_config config = {};
__u32 enabled = 0;   /* samples are counted */

struct sample_key {
	__u32 tid;
	__s32 ustack;     /* stack ids; negative: not taken, or none */
	__s32 kstack;
	__u32 in_kernel;  /* the CPU was in the kernel, on the thread's behalf */
	__u64 ip;         /* the user address, when user stacks are not taken */
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct sample_key);
	__type(value, __u64);
} samples SEC(".maps");

SEC("perf_event")
int on_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u64 kernel_pc = 0, *n;

	if (!enabled || (id >> 32) != config.target_tgid)
		return 0;

	struct sample_key k = { .tid = (__u32)id, .ustack = -1, .kstack = -1 };

	/* a kernel frame exists only when the sample interrupted kernel code */
	k.in_kernel = bpf_get_stack(ctx, &kernel_pc, sizeof(kernel_pc), 0) > 0;
	if (config.stacks & SAMPLE_USER_STACKS) {
		k.ustack = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
		if (k.ustack < 0)
			count_drop(1);   /* its bucket held another stack, or none could be walked */
	} else {
		bpf_get_stack(ctx, &k.ip, sizeof(k.ip), BPF_F_USER_STACK);
	}
	if ((config.stacks & SAMPLE_KERNEL_STACKS) && k.in_kernel) {
		k.kstack = bpf_get_stackid(ctx, &stacks, 0);
		if (k.kstack < 0)
			count_drop(1);
	}

	n = bpf_map_lookup_elem(&samples, &k);
	if (n) {
		__sync_fetch_and_add(n, 1);
	} else {
		__u64 one = 1;

		if (bpf_map_update_elem(&samples, &k, &one, BPF_NOEXIST) != 0) {
			n = bpf_map_lookup_elem(&samples, &k);   /* another CPU made it meanwhile */
			if (n)
				__sync_fetch_and_add(n, 1);
			else
				count_drop(0);   /* the map is full */
		}
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
