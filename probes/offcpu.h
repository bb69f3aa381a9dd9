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
	OFFCPU_USER_STACK_NOT_TAKEN,   /* its bucket in `stacks` held another stack, and none was recovered */
	OFFCPU_DROPPED_KINDS,
};

struct offcpu_config {
	__u32 target_tgid;
	__u32 pad;
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
	__u64 urecovered;   /* a recovered user stack's key in `recovered` (ustack -1 then); 0: none */
	__u64 caller;       /* stopped in a library's frameless function: its caller in the binary
			     * (user_stack.h's leaf_caller), which the walk of ustack skipped; 0: none */
};

struct offcpu_key {
	__u32 tid;
	__s32 ustack;   /* stack ids; negative: the stack could not be taken */
	__s32 kstack;
	__u32 preempted;
	__u64 urecovered;   /* as in struct away: the user stack, recovered, in place of ustack */
	__u64 caller;       /* as in struct away */
};

struct offcpu_value {
	__u64 ns;
	__u64 count;
};


#endif
