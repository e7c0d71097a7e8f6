"""ebpfkit's tools: one module each, exposing a click command. Tools never import each other.
The registry also lists the commands of consumers of the tools (the exporter, ebpfkit/exporter/),
which tools never import.

The registry below is data the CLI and `ebpfkit doctor` read without importing any tool:
the command's module, a one-line summary, and the hooks it can use, best first (each entry
is a set of features that must all be available for that way of running).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field


@dataclass(frozen=True)
class ToolInfo:
    name: str
    module: str
    summary: str
    hooks: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())  # (label, required features)


TOOLS: dict[str, ToolInfo] = {t.name: t for t in [
    ToolInfo("doctor", "ebpfkit.tools.doctor.cli", "Show what this kernel allows and which tools can run."),
    ToolInfo("bcc", "ebpfkit.tools.bcc.cli",
             "Run BCC's tools and scripts on this kernel's BTF (no kernel headers needed).",
             hooks=(("tracepoints, raw tracepoints, kprobes (what each program asks for)", ("btf", "tracepoint")),)),
    ToolInfo("runqlat", "ebpfkit.tools.runqlat.cli", "Run-queue (scheduler) latency as log2 histograms.",
             hooks=(("tp_btf sched_switch, task storage, the kernel's sched_info",
                     ("btf", "kernel_btf", "tp_btf", "task_storage", "sched_info")),
                    ("raw tracepoint sched_switch, the kernel's sched_info",
                     ("btf", "raw_tp", "lockdown", "sched_info")))),
    ToolInfo("runqlen", "ebpfkit.tools.runqlen.cli", "Run-queue length by sampling, as linear histograms.",
             hooks=(("perf_event cpu-clock sampling", ("btf", "perf_event")),)),
    ToolInfo("runqslower", "ebpfkit.tools.runqslower.cli",
             "Each wakeup that waited in the run queue longer than a threshold, with its waker.",
             hooks=(("tp_btf sched_waking/sched_switch, task storage, the kernel's sched_info",
                     ("btf", "kernel_btf", "tp_btf", "task_storage", "sched_info")),
                    ("raw tracepoints sched_waking/sched_switch, the kernel's sched_info",
                     ("btf", "raw_tp", "lockdown", "sched_info")))),
    ToolInfo("cpudist", "ebpfkit.tools.cpudist.cli",
             "Time on CPU (or off CPU, -O) per scheduling, as log2 histograms.",
             hooks=(("tp_btf sched_switch", ("btf", "kernel_btf", "tp_btf")),
                    ("raw tracepoint sched_switch", ("btf", "raw_tp", "lockdown")))),
    ToolInfo("offcputime", "ebpfkit.tools.offcputime.cli",
             "Off-CPU time by thread and kernel/user stack (folded output for flame graphs).",
             hooks=(("tp_btf sched_switch, task storage", ("btf", "kernel_btf", "tp_btf", "task_storage")),
                    ("raw tracepoint sched_switch", ("btf", "raw_tp", "lockdown")))),
    ToolInfo("memleak", "ebpfkit.tools.memleak.cli",
             "Outstanding allocations by stack: a process's (uprobes) or the kernel's (kmem tracepoints).",
             hooks=(("uprobes/uretprobes on the allocator's functions", ("btf", "uprobe")),
                    ("kernel mode: raw tracepoints kmem and percpu", ("btf", "raw_tp", "lockdown")))),
    ToolInfo("hardirqs", "ebpfkit.tools.hardirqs.cli",
             "Hard interrupt handlers: count and time per IRQ (and CPU), or histograms.",
             hooks=(("tp_btf irq_handler_entry/irq_handler_exit", ("btf", "kernel_btf", "tp_btf")),
                    ("raw tracepoints irq_handler_entry/irq_handler_exit", ("btf", "raw_tp", "lockdown")))),
    ToolInfo("softirqs", "ebpfkit.tools.softirqs.cli",
             "Softirqs: count and time per vector (NET_RX, TIMER, ...) and CPU, or histograms.",
             hooks=(("tp_btf softirq_entry/softirq_exit", ("btf", "kernel_btf", "tp_btf")),
                    ("raw tracepoints softirq_entry/softirq_exit", ("btf", "raw_tp", "lockdown")))),
    ToolInfo("irqoff", "ebpfkit.tools.irqoff.cli",
             "Sections with hard interrupts or softirqs off longer than a threshold, with stacks.",
             hooks=(("exact: preemptirq tracepoints irq_disable/irq_enable",
                     ("btf", "kernel_btf", "tracepoint", "preemptirq", "perf_event")),
                    ("NMI sampling: cycles (hardware PMU) + cpu-clock ticks (culprit stacks)",
                     ("btf", "perf_event", "pmu")),
                    ("hrtimer sampling: cpu-clock ticks (stack when the tick ran)", ("btf", "perf_event")))),
    ToolInfo("iofsstat", "ebpfkit.tools.iofsstat.cli",
             "File IO per process and file (paths, containers) next to disk IO.",
             # both walk a file's path with bpf_loop (5.17; the syscall programs also read the
             # saved registers with bpf_task_pt_regs, 5.15)
             hooks=(("fexit vfs_read/vfs_write", ("btf", "kernel_btf", "fexit", "bpf_loop", "tracepoint", "lockdown")),
                    ("syscall tracepoints", ("btf", "bpf_loop", "tracepoint", "lockdown")))),
    ToolInfo("iotrace", "ebpfkit.tools.iotrace.cli",
             "IO latency at every layer, from the syscall to the block device, per request.",
             hooks=(("tracepoints syscalls/* + block/*, CO-RE reads", ("btf", "tracepoint", "lockdown")),)),
    ToolInfo("tc", "ebpfkit.tools.tc.cli",
             "tc fast paths: endpoint to endpoint and out of the node without its stack.",
             hooks=(("tc (tcx links, clsact before 6.6): redirect, steering, and ratelimit (EDT with fq)",
                     ("btf", "tc", "redirect_peer", "redirect_neigh", "fq")),
                    ("tc (tcx links, clsact before 6.6): redirect and steering; no ratelimit (no fq qdisc)",
                     ("btf", "tc", "redirect_peer", "redirect_neigh")))),
    ToolInfo("pingtrace", "ebpfkit.tools.pingtrace.cli",
             "Network round trips broken down by stage, across namespaces and devices (ICMP probes).",
             hooks=(("tp_btf net_dev_queue/net_dev_start_xmit/netif_receive_skb/... (net, qdisc, skb)",
                     ("btf", "kernel_btf", "tp_btf")),
                    ("raw tracepoints net/qdisc/skb", ("btf", "raw_tp", "lockdown")))),
    ToolInfo("sockmap", "ebpfkit.tools.sockmap.cli",
             "Accelerate TCP between local sockets: sockops + sk_msg redirect (enable/disable/status/bench).",
             hooks=(("sockops on a cgroup v2 + sk_msg on a SOCKHASH", ("btf", "sockops", "sk_msg")),)),
    ToolInfo("xdp", "ebpfkit.tools.xdp.cli",
             "XDP packet filter (CIDR/port rules, atomic updates) and Maglev L4 load balancer.",
             hooks=(("native XDP (driver)", ("btf", "xdp_native", "bpffs")),
                    ("generic XDP (skb)", ("btf", "xdp_generic", "bpffs")))),
    ToolInfo("guard", "ebpfkit.tools.guard.cli",
             "Protect files and processes with BPF-LSM (policy, trust, audit; pinned agent).",
             hooks=(("BPF-LSM, task storage (each task's trust)",
                     ("btf", "kernel_btf", "lsm", "lsm_active", "task_storage")),
                    ("BPF-LSM, each task's trust in a hash by task (before 5.11)",
                     ("btf", "kernel_btf", "lsm", "lsm_active")))),
    ToolInfo("detect", "ebpfkit.tools.detect.cli",
             "Intrusion detection: Falco-format rules over process, network and fd events (reverse shells).",
             hooks=(("raw tracepoint sched_process_exec, syscall tracepoints connect/dup/dup2/dup3/fcntl",
                     ("btf", "raw_tp", "tracepoint", "lockdown")),)),
    ToolInfo("exporter", "ebpfkit.exporter.cli",
             "Serve tool sessions as Prometheus metrics (runqlat, iofsstat; the pinned xdp, sockmap, guard).",
             # each source runs as its tool does (see their rows); one it cannot run is reported
             hooks=(("its sources' hooks (a source the kernel refuses is reported down)", ("btf",)),)),
    ToolInfo("build", "ebpfkit.tools.build.cli", "Compile every BPF program into prebuilt CO-RE objects."),
    ToolInfo("vm", "ebpfkit.tools.vm.cli", "Boot another kernel in a VM and run a command (or tests) inside."),
]}


def lazy_exports(package: str, modules: dict[str, list[str]]):
    """``(__getattr__, __all__)`` for a tool package whose public names (``{module: [names]}``)
    are imported on first use, so `ebpfkit <tool> --help` loads neither the engine nor the
    session::

        __getattr__, __all__ = lazy_exports(__name__, {"session": ["Config", "open"]})
    """
    where = {name: module for module, names in modules.items() for name in names}

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(f".{where[name]}", package), name)

    return __getattr__, sorted(where)
