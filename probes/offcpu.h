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
	OFFCPU_DROPPED_KINDS,
};

struct away {
	__u64 ts;
	__s32 ustack;
	__s32 kstack;
	__u32 preempted;
	__u32 tid;
};

struct offcpu_key {
	__u32 tid;
	__s32 ustack;   /* stack ids; negative: the stack could not be taken */
	__s32 kstack;
	__u32 preempted;
};

struct offcpu_value {
	__u64 ns;
	__u64 count;
};


#endif
