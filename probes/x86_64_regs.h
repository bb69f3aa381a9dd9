/* x86_64's struct pt_regs as the kernel lays it out (its user-visible
 * layout, fixed by the ABI): a uprobe's context, and what the raw
 * sys_enter tracepoint points to. No kernel BTF is needed to read it. */

struct x86_64_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
