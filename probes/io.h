/* Layout shared by io.bpf.c and probes/abi.py (its ctypes mirror): the
 * structures user space reads and the constants it uses, as enums so that
 * the object's BTF carries them (the program's variable `abi_enums`
 * names their types); tests/unit/test_abi.py checks both against the compiled object. */
#ifndef MYSQLPROBE_IO_H
#define MYSQLPROBE_IO_H

enum io_limits {
	MAX_IOCBS = 8,        /* iocbs of one io_submit read */
	IOCB_OP_BASE = 1000,  /* io_key.call of a submitted iocb: this + its aio_lio_opcode */
	PATH_LEN = 256,
};

/* the index of each kind of event the maps' limits cost, in `dropped` */
enum io_dropped {
	IO_THREAD_MAP_FULL,
	IO_CALL_MAP_FULL,
	IO_IOCBS_LEFT_OUT,    /* an io_submit of more than MAX_IOCBS iocbs */
	IO_OPENED_MAP_FULL,
	IO_RECOVERED_MAP_FULL,
	IO_USER_STACK_NOT_TAKEN,   /* neither walked into `stacks` nor copied */
	IO_DROPPED_KINDS,
};

struct iocb_seen {
	__s32 fd;
	__u32 op;
	__u32 gen;
	__u32 pad;
	__u64 bytes;
};

struct in_call {
	__u64 ts;
	__s32 ustack;
	__u32 call;
	__s32 fd;
	__u32 gen;
	__u32 iocbs;
	__u64 ucopied;   /* the user stack's key in `recovered` where `stacks` refused it (kept_stack.h) */
	struct iocb_seen iocb[MAX_IOCBS];
};

struct io_key {
	__u32 tid;
	__s32 ustack;   /* negative: the stack could not be taken */
	__u32 call;     /* syscall number, or IOCB_OP_BASE + opcode */
	__s32 fd;       /* -1: none (io_getevents) */
	__u32 gen;      /* the fd's open generation: 0, opened before the phase */
	__u32 pad;
	__u64 ucopied;  /* the user stack copied where `stacks` refused it (ustack -1 then): its
			 * key in `recovered`; 0: none */
};

struct opened_key {
	__s32 fd;
	__u32 gen;
};

struct path {
	char name[PATH_LEN];
};

struct io_value {
	__u64 calls;
	__u64 bytes;
	__u64 ns;
	__u64 errors;
};


#endif
