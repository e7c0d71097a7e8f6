"""Facts about the running system that several tools need and no BPF program gives, one
implementation each: the mount table (``mounts``), device numbers and what ``--disk`` names
(``devices``), cgroup v2 ids and paths (``cgroups``), the container a cgroup belongs to
(``containers``), /proc/diskstats counters (``diskstats``), open files of a process
(``files``). Plain file reading; no engine, no tools, no output. The engine may use it."""
