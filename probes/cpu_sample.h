/* Layout shared by cpu_sample.bpf.c and probes/abi.py (its ctypes mirror):
 * the structures user space reads and writes and the constants it uses, as
 * enums so that the object's BTF carries them (the program's variable `abi_enums`
 * names their types); tests/unit/test_abi.py checks both against the
 * compiled object. */
#ifndef MYSQLPROBE_CPU_SAMPLE_H
#define MYSQLPROBE_CPU_SAMPLE_H

/* sample_config.stacks: which stacks are walked */
enum sample_stacks {
	SAMPLE_USER_STACKS = 1,
	SAMPLE_KERNEL_STACKS = 2,
};

/* the index of each kind of sample the maps' limits cost, in `dropped` */
enum sample_dropped {
	SAMPLE_MAP_FULL,
	SAMPLE_STACKS_NOT_TAKEN,   /* neither walked into `stacks` nor copied */
	SAMPLE_SLICES_FULL,     /* counted in `samples`, but not in `slices`: its time is lost */
	SAMPLE_RECOVERED_MAP_FULL,
	SAMPLE_DROPPED_KINDS,
};

struct sample_config {
	__u32 target_tgid;
	__u32 stacks;       /* SAMPLE_* bits */
	__u64 trampoline;   /* the page of uretprobe trampolines ([uprobes]); 0: not checked */
	__u64 text_lo;      /* the target binary's code: where a return address */
	__u64 text_hi;      /* at the stack's top may point */
	__u64 origin_ns;    /* CLOCK_MONOTONIC at the object's load: slice 0 starts there */
	__u64 slice_ns;     /* the length of a slice of time; 0: samples are not sliced */
};

struct sample_key {
	__u32 tid;
	__s32 ustack;     /* stack ids; negative: not taken, or none */
	__s32 kstack;
	__u8 in_kernel;   /* the CPU was in the kernel, on the thread's behalf */
	__u8 at_entry;    /* at a return-probed function's first instructions: see at_entry() */
	__u16 slice;      /* in `slices`: the slice of time, from config.origin_ns (0 in `samples`) */
	__u64 ip;         /* the user address, when user stacks are not taken */
	__u64 caller;     /* a frameless leaf's return address: see leaf_caller() */
	__u64 ucopied;    /* a stack `stacks` refused (its id -1 then), copied: its key in `recovered` */
	__u64 kcopied;    /* (kept_stack.h); 0: none */
};


#endif
