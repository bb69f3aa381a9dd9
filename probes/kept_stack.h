/* Stacks kept by their content, in `recovered`, where a stack map cannot
 * keep them: bpf_get_stackid() refuses, for good, a stack whose bucket holds
 * another (-EEXIST), so a hot stack that collides would be lost at every
 * walk. Such a stack is walked again with bpf_get_stack() and kept under
 * its hash, odd (COPIED_STACK set); offcpu.bpf.c keeps the user stacks it
 * recovers by scanning (user_stack.h) there too, even. What offcpu.bpf.c,
 * io.bpf.c and cpu_sample.bpf.c share. Include after tracing.h and
 * user_stack.h, with KEPT_STACKS_FULL defined to the program's drop kind
 * for a full `recovered`. */
#ifndef MYSQLPROBE_KEPT_STACK_H
#define MYSQLPROBE_KEPT_STACK_H

#define EEXIST 17   /* bpf_get_stackid(): the stack's bucket holds another */

enum kept_stacks {
	COPIED_STACK = 1,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_scan);
} scan SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, RECOVERED_STACKS);
	__type(key, __u64);
	__uint(value_size, STACK_DEPTH * sizeof(__u64));
} recovered SEC(".maps");

/* s->ips kept in `recovered` by their key h: h, else 0 (the map full) */
static __always_inline __u64 keep_stack(__u64 h, struct stack_scan *s)
{
	if (bpf_map_update_elem(&recovered, &h, s->ips, BPF_NOEXIST) != 0 && !bpf_map_lookup_elem(&recovered, &h)) {
		count_drop(KEPT_STACKS_FULL);
		return 0;
	}
	return h;
}

/* The thread's stack (user: BPF_F_USER_STACK, else kernel) walked as
 * bpf_get_stackid() walks it, whose bucket in its map held another: its key
 * in `recovered` (odd), else 0. */
static __always_inline __u64 copied_stack(void *ctx, __u64 flags)
{
	__u32 zero = 0;
	struct stack_scan *s = bpf_map_lookup_elem(&scan, &zero);
	long bytes;

	if (!s)
		return 0;
	bytes = bpf_get_stack(ctx, s->ips, STACK_DEPTH * sizeof(__u64), flags);
	if (bytes <= 0)
		return 0;
	return keep_stack(stack_hash(s, (int)(bytes / sizeof(__u64))) | COPIED_STACK, s);
}

/* The thread's stack (flags as bpf_get_stackid()'s) walked into map: its id
 * in *id; where the map refused it, *id negative and the stack copied, its
 * key in *copied (else 0). 0 where neither kept it: the caller counts that. */
static __always_inline int take_stack(void *ctx, void *map, __u64 flags, __s32 *id, __u64 *copied)
{
	*id = bpf_get_stackid(ctx, map, flags);
	*copied = *id == -EEXIST ? copied_stack(ctx, flags) : 0;
	return *id >= 0 || *copied;
}

#endif
