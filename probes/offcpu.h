/* Layout shared by offcpu.bpf.c and probes/abi.py (its ctypes mirror):
 * the structures user space reads and the constants it uses, as enums so
 * that the object's BTF carries them (the program's variable `abi_enums`
 * names their types); tests/unit/test_abi.py checks both against the compiled object. */
#ifndef MYSQLPROBE_OFFCPU_H
#define MYSQLPROBE_OFFCPU_H

/* the index of each kind of event the maps' limits cost, in `dropped` */
enum offcpu_dropped {
	OFFCPU_THREAD_MAP_FULL,
	OFFCPU_STACK_MAP_FULL,
	OFFCPU_RECOVERED_MAP_FULL,
	OFFCPU_USER_STACK_NOT_TAKEN,     /* neither walked into `stacks`, nor recovered, nor copied */
	OFFCPU_KERNEL_STACK_NOT_TAKEN,   /* neither walked into `kernel_stacks` nor copied */
	OFFCPU_DROPPED_KINDS,
};

/* Where the stacks are kept. The kernel stacks of switch-outs are few, in a
 * map of their own; a stack refused by its map (user or kernel) is copied
 * into `recovered` (kept_stack.h). */
enum offcpu_stacks {
	KERNEL_STACKS = 4096,
};

/* how often stacks are taken where switches are many */
enum offcpu_pacing {
	PACE_WINDOW_NS = 100000000,   /* a CPU's rate of the target's switch-outs, measured over this */
	/* waits are spread over the stacks of waits of their own length, by decade from this up
	 * (under 0.1 ms, under 1 ms, ... 0.1 s and longer): one idle wait of 40 ms among three
	 * thousand of 45 us would else swell theirs by a third (or, taken, be counted 21 times) */
	SHORTEST_LENGTH_NS = 100000,
	WAIT_LENGTHS = 5,
};

struct offcpu_config {
	__u32 target_tgid;
	__u32 stacks_per_s;   /* stacks a CPU takes a second at most, about: every switch-out is timed
			       * (thread_waits), one in `every` with its stacks (offcpu); 0: all */
	__u64 text_lo;      /* the target binary's code: where a return address */
	__u64 text_hi;      /* of a stack recovered by scanning may point */
	__u64 trampoline;   /* the page of uretprobe trampolines ([uprobes]) */
};

struct away {
	__u64 ts;
	__s32 ustack;
	__s32 kstack;
	__u32 preempted;
	__u32 tid;
	__u64 urecovered;   /* a user stack's key in `recovered` (ustack -1 then), recovered or
			     * copied (odd: COPIED_STACK); 0: none */
	__u64 caller;       /* stopped in a library's frameless function: its caller in the binary
			     * (user_stack.h's leaf_caller), which the walk of ustack skipped; 0: none */
	__u32 taken;        /* its stacks taken: the waits it stands for (the pacing's period); 0: only timed */
	__u32 pad;
	__u64 kcopied;      /* its kernel stack's key in `recovered` where `kernel_stacks` refused it
			     * (kstack -1 then; odd: COPIED_STACK); 0: none */
};

/* every wait of a thread, of one kind (preempted or blocked), timed: the
 * totals user space spreads over the thread's taken stacks of that kind */
struct offcpu_thread_key {
	__u32 tid;
	__u32 preempted;
	__u32 length;      /* the wait's decade of length: wait_length() */
	__u32 pad;
};

struct offcpu_timed {
	__u64 ns;
	__u64 count;
	__u64 walked;   /* of them, those whose stacks were taken */
};

/* a CPU's pacing of the stacks it takes: one switch-out in `every` */
struct offcpu_pace {
	__u64 since;    /* when this measure of the rate began */
	__u32 seen;     /* the target's switch-outs on this CPU since */
	__u32 every;
	__u64 count;    /* the target's switch-outs on this CPU, all window */
};

struct offcpu_key {
	__u32 tid;
	__s32 ustack;   /* stack ids; negative: the stack could not be taken */
	__s32 kstack;
	__u32 preempted;
	__u64 urecovered;   /* as in struct away: the user stack, recovered, in place of ustack */
	__u64 caller;       /* as in struct away */
	__u32 length;       /* as in struct offcpu_thread_key */
	__u32 pad;
	__u64 kcopied;      /* as in struct away */
};

struct offcpu_value {
	__u64 ns;
	__u64 count;
};


#endif
