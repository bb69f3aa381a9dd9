/* The I/O system calls of one process's threads, from the raw sys_enter and
 * sys_exit tracepoints (no kprobes needed). Raw tracepoints, not tp_btf:
 * they need no kernel BTF, whose 5 MB libbpf would parse at every start.
 *
 * On entry to a call of the I/O families (read/write and their positioned
 * and vectored forms, fsync/fdatasync/sync_file_range/fallocate,
 * io_submit/io_getevents/io_uring_enter; not the socket send/receive
 * calls, a few per statement, which would cost the most under many
 * clients and say least about storage) the
 * thread's user stack, the file descriptor and the time are kept; on exit
 * the call's time, the bytes it moved (its return value) and an error, if
 * any, are added to (thread, user stack, call, fd). A user stack the stack
 * map refuses (its bucket holds another) is copied by its content
 * (kept_stack.h): no call's stack is lost to a collision. The iocbs
 * io_submit hands over are read on entry (up to MAX_IOCBS): each submitted
 * one counts under its own fd and operation with its size; the call's time
 * goes to the first.
 *
 * File names: an open that returns a descriptor inside a phase gives it a
 * new generation number and keeps its path, so a descriptor closed and
 * reused in the window names each file it held. Descriptors opened before
 * (generation 0) are named from /proc/PID/fd by user space. User space
 * clears fd_gen when a phase starts: an open it did not see must not leave
 * an older name on the descriptor.
 *
 * Syscall numbers and argument registers are x86-64's. */

#include <linux/types.h>
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

#include "io.h"
#define DROPPED_KINDS IO_DROPPED_KINDS
#include "tracing.h"

#define MAX_THREADS 16384
#define MAX_KEYS 65536
#define MAX_OPENED 4096

#include "x86_64_regs.h"
#include "user_stack.h"
#define KEPT_STACKS_FULL IO_RECOVERED_MAP_FULL
#include "kept_stack.h"

const volatile __u32 target_tgid = 0;
__u32 enabled = 0;   /* calls are taken */
/* the constants probes/abi.py checks: their enums' names in BTF */
const volatile struct {
	enum tracing_limits tracing;
	enum io_limits limits;
	enum io_dropped dropped;
	enum user_stack_limits user_stack;
	enum kept_stacks kept;
} abi_enums = {};

/* the uapi struct iocb fields read, at their offsets */
#define IOCB_OPCODE 16
#define IOCB_FILDES 20
#define IOCB_NBYTES 32

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_THREADS);
	__type(key, __u32);
	__type(value, struct in_call);
} in_calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_KEYS);
	__type(key, struct io_key);
	__type(value, struct io_value);
} io SEC(".maps");

/* the descriptors opened in the phases: generation, then path */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_OPENED);
	__type(key, __s32);
	__type(value, __u32);
} fd_gen SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_OPENED);
	__type(key, struct opened_key);
	__type(value, struct path);
} opened SEC(".maps");

/* the path of an open in flight, by thread */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct path);
} opening SEC(".maps");

__u32 last_gen = 0;

/* per-CPU scratch: struct in_call is too large for the BPF stack */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct in_call);
} scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct path);
} path_scratch SEC(".maps");

enum family { NOT_IO, FD_FIRST, NO_FD, SUBMIT, OPEN_PATH_FIRST, OPEN_PATH_SECOND };

static __always_inline enum family family_of(long nr)
{
	switch (nr) {
	case 0:   /* read */
	case 1:   /* write */
	case 17:  /* pread64 */
	case 18:  /* pwrite64 */
	case 19:  /* readv */
	case 20:  /* writev */
	case 74:  /* fsync */
	case 75:  /* fdatasync */
	case 277: /* sync_file_range */
	case 285: /* fallocate */
	case 295: /* preadv */
	case 296: /* pwritev */
	case 327: /* preadv2 */
	case 328: /* pwritev2 */
	case 426: /* io_uring_enter */
		return FD_FIRST;
	case 208: /* io_getevents */
	case 333: /* io_pgetevents */
		return NO_FD;
	case 209: /* io_submit */
		return SUBMIT;
	case 2:   /* open */
	case 85:  /* creat */
		return OPEN_PATH_FIRST;
	case 257: /* openat */
	case 437: /* openat2 */
		return OPEN_PATH_SECOND;
	}
	return NOT_IO;
}

static __always_inline void add(struct io_key *k, __u64 bytes, __u64 ns, __u64 error)
{
	struct io_value zero = {};
	struct io_value *v = value_for(&io, k, &zero, IO_CALL_MAP_FULL);

	if (!v)
		return;
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->bytes, bytes);
	__sync_fetch_and_add(&v->ns, ns);
	__sync_fetch_and_add(&v->errors, error);
}

static __always_inline __u32 gen_of(__s32 fd)
{
	__u32 *g = bpf_map_lookup_elem(&fd_gen, &fd);

	return g ? *g : 0;
}

static __always_inline int is_open(__u32 call)
{
	return call == 2 || call == 85 || call == 257 || call == 437;
}

static __always_inline void keep_path(__u32 tid, unsigned long user_path)
{
	__u32 zero = 0;
	struct path *p = bpf_map_lookup_elem(&path_scratch, &zero);

	if (!p)
		return;
	if (bpf_probe_read_user_str(p->name, sizeof(p->name), (void *)user_path) < 0)
		return;
	if (bpf_map_update_elem(&opening, &tid, p, BPF_ANY) != 0)
		count_drop(IO_OPENED_MAP_FULL);
}

/* an open returned fd: a new generation with the path kept at entry */
static __always_inline void name_fd(__u32 tid, __s32 fd)
{
	struct path *p = bpf_map_lookup_elem(&opening, &tid);
	struct opened_key k = { .fd = fd };

	if (!p)
		return;
	/* not atomic: two CPUs may draw one number, but never for one fd */
	k.gen = ++last_gen;
	if (bpf_map_update_elem(&opened, &k, p, BPF_ANY) != 0 ||
	    bpf_map_update_elem(&fd_gen, &fd, &k.gen, BPF_ANY) != 0)
		count_drop(IO_OPENED_MAP_FULL);
	bpf_map_delete_elem(&opening, &tid);
}

static __always_inline void read_iocbs(struct in_call *c, unsigned long nr, unsigned long iocbpp)
{
	for (int i = 0; i < MAX_IOCBS; i++) {
		__u64 iocb = 0;
		__u16 op = 0;

		if (i >= nr)
			break;
		if (bpf_probe_read_user(&iocb, sizeof(iocb), (void *)(iocbpp + i * sizeof(__u64))) || !iocb)
			break;
		bpf_probe_read_user(&op, sizeof(op), (void *)(iocb + IOCB_OPCODE));
		bpf_probe_read_user(&c->iocb[i].fd, sizeof(c->iocb[i].fd), (void *)(iocb + IOCB_FILDES));
		bpf_probe_read_user(&c->iocb[i].bytes, sizeof(c->iocb[i].bytes), (void *)(iocb + IOCB_NBYTES));
		c->iocb[i].op = op;
		c->iocb[i].gen = gen_of(c->iocb[i].fd);
		c->iocbs = i + 1;
	}
}

/* raw_tp/sys_enter(struct pt_regs *regs, long id) */
SEC("raw_tp/sys_enter")
int on_enter(__u64 *ctx)
{
	struct x86_64_regs *regs = (struct x86_64_regs *)ctx[0];
	long nr = (long)ctx[1];
	unsigned long dx_si_di[3] = {}, di, si, dx;
	enum family fam;
	struct in_call *c;
	__u64 pid_tgid;
	__u32 tid, zero = 0;

	if (!enabled)
		return 0;
	pid_tgid = bpf_get_current_pid_tgid();
	if ((pid_tgid >> 32) != target_tgid)
		return 0;
	fam = family_of(nr);
	if (fam == NOT_IO)
		return 0;
	c = bpf_map_lookup_elem(&scratch, &zero);
	if (!c)
		return 0;
	tid = (__u32)pid_tgid;
	/* the first three arguments' registers, which pt_regs lays out as dx, si, di */
	bpf_probe_read_kernel(dx_si_di, sizeof(dx_si_di), &regs->dx);
	dx = dx_si_di[0];
	si = dx_si_di[1];
	di = dx_si_di[2];
	c->ts = bpf_ktime_get_ns();
	c->call = nr;
	c->fd = fam == FD_FIRST ? (__s32)di : -1;
	c->gen = fam == FD_FIRST ? gen_of(c->fd) : 0;
	c->iocbs = 0;
	c->ustack = -1;
	c->ucopied = 0;
	if (fam == SUBMIT)
		read_iocbs(c, si, dx);
	if (fam == OPEN_PATH_FIRST || fam == OPEN_PATH_SECOND)
		keep_path(tid, fam == OPEN_PATH_FIRST ? di : si);
	else if (!take_stack(ctx, &stacks, BPF_F_USER_STACK, &c->ustack, &c->ucopied))
		count_drop(IO_USER_STACK_NOT_TAKEN);
	if (bpf_map_update_elem(&in_calls, &tid, c, BPF_ANY) != 0)
		count_drop(IO_THREAD_MAP_FULL);
	return 0;
}

/* raw_tp/sys_exit(struct pt_regs *regs, long ret) */
SEC("raw_tp/sys_exit")
int on_exit(__u64 *ctx)
{
	long ret = (long)ctx[1];
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)pid_tgid;
	struct in_call *c;
	__u64 now, ns, error;

	if ((pid_tgid >> 32) != target_tgid)
		return 0;
	/* a call still open when its phase ended was counted up to that end
	 * by user space, and its entry taken out */
	c = bpf_map_lookup_elem(&in_calls, &tid);
	if (!c)
		return 0;
	now = bpf_ktime_get_ns();
	ns = now > c->ts ? now - c->ts : 0;
	error = ret < 0 ? 1 : 0;
	if (is_open(c->call)) {
		if (ret >= 0)
			name_fd(tid, (__s32)ret);
		else
			bpf_map_delete_elem(&opening, &tid);
	} else if (c->call == 209 && c->iocbs > 0) {
		for (int i = 0; i < MAX_IOCBS; i++) {
			struct io_key k = { .tid = tid, .ustack = c->ustack, .ucopied = c->ucopied };

			if (i >= c->iocbs || (ret >= 0 && i >= ret))
				break;
			k.call = IOCB_OP_BASE + c->iocb[i].op;
			k.fd = c->iocb[i].fd;
			k.gen = c->iocb[i].gen;
			add(&k, ret > 0 ? c->iocb[i].bytes : 0, i == 0 ? ns : 0, error);
			if (error)
				break;
		}
		if (c->iocbs == MAX_IOCBS && ret > MAX_IOCBS)
			count_drop(IO_IOCBS_LEFT_OUT);
	} else {
		struct io_key k = { .tid = tid, .ustack = c->ustack, .call = c->call, .fd = c->fd, .gen = c->gen,
				     .ucopied = c->ucopied };
		__u64 bytes = 0;

		/* read/write/send/receive families return bytes moved;
		 * io_getevents, io_uring_enter and the syncs return counts */
		if (ret > 0 && c->call != 208 && c->call != 333 && c->call != 426 &&
		    c->call != 74 && c->call != 75 && c->call != 277 && c->call != 285)
			bytes = ret;
		add(&k, bytes, ns, error);
	}
	bpf_map_delete_elem(&in_calls, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
