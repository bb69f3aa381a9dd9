/* What the user stack programs (cpu_sample.bpf.c, offcpu.bpf.c) share about
 * a thread's user stack: whether a word on it is a return address into the
 * target binary, and, where the frame-pointer walk stops inside a library
 * that keeps no frame pointers (glibc: its select() holds an argument in
 * %rbp), the stack recovered by scanning for the binary's caller.
 * Include after bpf_helpers.h and x86_64_regs.h. */
#ifndef MYSQLPROBE_USER_STACK_H
#define MYSQLPROBE_USER_STACK_H

#include <bpf/bpf_core_read.h>

enum user_stack_limits {
	SCAN_WORDS = 64,          /* words read from the stack pointer up: a library's frames */
	MAX_FRAME_GAP = 1 << 16,  /* bytes from a frame's return slot to its caller's frame */
	RECOVERED_STACKS = 4096,
};

/* Whether w points into the binary's code [lo, hi) right after a call. */
static __always_inline int after_call(__u64 w, __u64 lo, __u64 hi)
{
	__u8 b[7] = {};

	if (w < lo + 7 || w >= hi || bpf_probe_read_user(b, sizeof(b), (const void *)(w - 7)) != 0)
		return 0;
	if (b[2] == 0xe8)                                       /* call rel32 */
		return 1;
	if (b[5] == 0xff && ((b[6] & 0xf8) == 0xd0 || (b[6] & 0xf8) == 0x10))   /* call *%reg, *(%reg) */
		return 1;
	if (b[4] == 0xff && (b[5] & 0xf8) == 0x50)              /* call *disp8(%reg) */
		return 1;
	if (b[1] == 0xff && (b[2] & 0xf8) == 0x90)              /* call *disp32(%reg) */
		return 1;
	return 0;
}

/* The return address at the stack's top when the thread stopped in a
 * function that keeps no frame (a leaf compiled without one, libc's system
 * call wrappers): the walk along the frame pointers starts at its caller's
 * frame and so skips the caller itself. Taken when the word there points
 * into the binary's code [lo, hi) right after a call; else 0. */
static __always_inline __u64 leaf_caller(__u64 sp, __u64 lo, __u64 hi)
{
	__u64 w = 0;

	if (!hi || bpf_probe_read_user(&w, sizeof(w), (const void *)sp) != 0)
		return 0;
	return after_call(w, lo, hi) ? w : 0;
}

/* The target binary's code, and the page of uretprobe trampolines a
 * return-probed function's return address is replaced with while it runs. */
struct user_code {
	__u64 lo, hi, trampoline;
};

/* A frame record at fp (its caller's fp, then its return address) whose
 * return address is into the binary's code, or a uretprobe trampoline. */
static __always_inline int binary_frame(__u64 fp, const struct user_code *c, __u64 rec[2])
{
	return !(fp & 7) && bpf_probe_read_user(rec, 2 * sizeof(__u64), (const void *)fp) == 0 &&
	       ((c->trampoline && rec[1] == c->trampoline) || after_call(rec[1], c->lo, c->hi));
}

/* The kernel's pending uretprobe returns of the thread (kernel/events/uprobes.c),
 * innermost first, as far as the walk needs them: read by CO-RE, the kernel's
 * BTF giving the offsets. */
struct return_instance___mp {
	unsigned long orig_ret_vaddr;
	struct return_instance___mp *next;
} __attribute__((preserve_access_index));

struct uprobe_task___mp {
	struct return_instance___mp *return_instances;
} __attribute__((preserve_access_index));

struct task_struct___mp {
	struct uprobe_task___mp *utask;
} __attribute__((preserve_access_index));

struct stack_scan {
	__u64 words[SCAN_WORDS];
	__u64 ips[128];   /* leaf first; STACK_DEPTH of them kept, zeros after the last */
};

/* One recovery's state, passed to bpf_loop()'s callbacks: the verifier checks
 * each body once, not each of its iterations. */
struct recovery {
	const struct user_code *c;
	struct stack_scan *s;
	__u64 rec[2];   /* the frame record at fp */
	__u64 fp;
	__u64 slot;     /* where the library's first return address sits */
	struct return_instance___mp *ri;
	int at;         /* that slot's word */
	int n;          /* addresses in s->ips */
	__u64 hash;
};

static long first_return_address(__u32 i, struct recovery *r)
{
	if (!after_call(r->s->words[i & (SCAN_WORDS - 1)], r->c->lo, r->c->hi))
		return 0;
	r->at = i;
	return 1;
}

/* down from the slot: the saved %rbp, pushed last among the library's first
 * frame's registers, so nearest the slot */
static long saved_frame_pointer(__u32 k, struct recovery *r)
{
	int j = r->at - 1 - (int)k;
	__u64 v;

	if (j < 0)
		return 1;
	v = r->s->words[j & (SCAN_WORDS - 1)];
	if (v > r->slot && v - r->slot < MAX_FRAME_GAP && binary_frame(v, r->c, r->rec)) {
		r->fp = v;
		return 1;
	}
	return 0;
}

static long walk_frame(__u32 i, struct recovery *r)
{
	__u64 ret = r->rec[1], next = r->rec[0];
	struct return_instance___mp *ri = r->ri;

	if (!ret || r->n >= STACK_DEPTH)
		return 1;
	if (r->c->trampoline && ret == r->c->trampoline && ri) {
		ret = BPF_CORE_READ(ri, orig_ret_vaddr);
		r->ri = BPF_CORE_READ(ri, next);
	}
	r->s->ips[r->n & 127] = ret;
	r->n++;
	if (next <= r->fp || next - r->fp >= MAX_FRAME_GAP ||
	    bpf_probe_read_user(r->rec, sizeof(r->rec), (const void *)next) != 0)
		return 1;
	r->fp = next;
	return 0;
}

/* FNV-1a over the recovered addresses (their key among the recovered
 * stacks); the unused tail zeroed */
static long hash_frame(__u32 i, struct recovery *r)
{
	if ((int)i >= r->n) {
		r->s->ips[i & 127] = 0;
		return 0;
	}
	r->hash = (r->hash ^ r->s->ips[i & 127]) * 0x100000001b3ULL;
	return 0;
}

/* The hash of s->ips's first n addresses, never 0; the rest zeroed. */
static __always_inline __u64 stack_hash(struct stack_scan *s, int n)
{
	struct recovery r = { .s = s, .n = n, .hash = 0xcbf29ce484222325ULL };

	bpf_loop(128, hash_frame, &r, 0);
	return r.hash ? r.hash : 1;
}

/* A thread stopped in a library whose code keeps no frame pointer: the
 * kernel's walk starts at %rbp, which the library used for something else,
 * and the stack ends in the library. Scanning up from the stack pointer,
 * the first return address into the binary is where the library was called
 * (the call instruction before it checked); the library saved the caller's
 * %rbp below that slot (it is callee-saved), as a word pointing above it at
 * a frame record that returns into the binary. From there the frame
 * pointers are whole again. A trampoline on the way is given the return
 * address it replaced, in order, as the kernel does for its own walks
 * (fixup_uretprobe_trampoline_entries). Fills s->ips (leaf first, zeros
 * after) and returns their hash, never 0; 0 where the walk from %rbp was
 * whole, or nothing could be recovered. */
static __always_inline __u64 recover_user_stack(const struct x86_64_regs *u, const struct user_code *c,
						struct task_struct___mp *task, struct stack_scan *s)
{
	struct recovery r = { .c = c, .s = s, .at = -1 };

	if (!c->hi || (u->ip >= c->lo && u->ip < c->hi))
		return 0;   /* in the binary: its frame pointers are whole */
	if (u->bp > u->sp && u->bp - u->sp < MAX_FRAME_GAP && binary_frame(u->bp, c, r.rec))
		return 0;   /* %rbp still the caller's: the kernel's walk goes on */
	if (bpf_probe_read_user(s->words, sizeof(s->words), (const void *)u->sp) != 0)
		return 0;
	bpf_loop(SCAN_WORDS, first_return_address, &r, 0);
	if (r.at < 0)
		return 0;
	r.slot = u->sp + 8 * (__u64)r.at;
	bpf_loop(SCAN_WORDS, saved_frame_pointer, &r, 0);
	if (!r.fp)
		return 0;
	if (c->trampoline)
		r.ri = BPF_CORE_READ(task, utask, return_instances);
	s->ips[0] = u->ip;
	s->ips[1] = s->words[r.at & (SCAN_WORDS - 1)];
	r.n = 2;
	bpf_loop(STACK_DEPTH, walk_frame, &r, 0);
	return stack_hash(s, r.n);
}

#endif
