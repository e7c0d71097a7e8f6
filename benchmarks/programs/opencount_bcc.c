// BCC dialect: the same per-process openat counter as opencount.bpf.c.
BPF_HASH(counts, u32, u64, 10240);

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
	u32 tgid = bpf_get_current_pid_tgid() >> 32;
	u64 one = 1, *n;

	n = counts.lookup(&tgid);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		counts.update(&tgid, &one);
	return 0;
}
