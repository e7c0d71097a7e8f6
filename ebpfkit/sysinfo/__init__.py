"""Facts about the running system that several tools need and no BPF program gives:
block devices and their /proc/diskstats counters (``diskstats``), cgroups and the container
a cgroup belongs to (``containers``). Plain file reading; no engine, no output."""
