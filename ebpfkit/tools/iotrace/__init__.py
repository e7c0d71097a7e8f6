"""iotrace: IO latency at every layer, from the syscall to the block device, per request.

``session`` is the tool: ``open(Config)`` -> ``Session.record()`` writes a record file,
``report(ReportConfig)`` joins one into lifecycles. Its pure logic, with no BPF in it: the
record file format (``fileformat``), the "layer mapping table" from file offsets to disk
sectors (``fiemap``, ``devices``), the join of syscalls and block events into per-request
lifecycles (``join``) and the latency statistics of the report (``stats``). ``cli`` is
`ebpfkit iotrace`; ``iotrace.bpf.c`` and ``iotrace.h`` its kernel side."""

from .. import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "session": ["Config", "RecordSummary", "Report", "ReportConfig", "Session", "open", "report"],
})
