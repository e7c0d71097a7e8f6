/* Registers read without the kernel's BTF. With vmlinux.h, struct pt_regs carries
 * preserve_access_index, so each PT_REGS_PARMn()/PT_REGS_RC() is a CO-RE relocation, and a
 * single relocation makes libbpf read and parse the kernel's whole BTF at load (10-17 ms of a
 * start on this host). On x86-64 the layout is ABI (ptrace's user_regs_struct is the same), so
 * an object that includes this after <bpf/bpf_tracing.h> reads the registers at fixed offsets.
 * Elsewhere it changes nothing. Not for PT_REGS_*_CORE or BPF_KSYSCALL, which read through
 * bpf_core_read. */
#ifndef __EK_USER_REGS_H
#define __EK_USER_REGS_H

#if defined(__TARGET_ARCH_x86)
struct ek_x86_64_regs {
	unsigned long r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	unsigned long ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};
#undef __PT_REGS_CAST
#define __PT_REGS_CAST(x) ((const struct ek_x86_64_regs *)(x))
#endif

#endif /* __EK_USER_REGS_H */
