// BCC dialect, opensnoop-style: an event per openat (pid, comm, the path) to user space
// through a perf buffer, as BCC's opensnoop sends them.
#include <linux/sched.h>

struct open_event {
	u32 pid;
	int dfd;
	char comm[TASK_COMM_LEN];
	char path[128];
};

BPF_PERF_OUTPUT(events);

TRACEPOINT_PROBE(syscalls, sys_enter_openat)
{
	struct open_event e = {};

	e.pid = bpf_get_current_pid_tgid() >> 32;
	e.dfd = args->dfd;
	bpf_get_current_comm(&e.comm, sizeof(e.comm));
	bpf_probe_read_user_str(&e.path, sizeof(e.path), args->filename);
	events.perf_submit(args, &e, sizeof(e));
	return 0;
}
