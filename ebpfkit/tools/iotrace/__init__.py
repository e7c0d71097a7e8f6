"""iotrace's pure logic, with no BPF in it: the record file format (``fileformat``), the
"layer mapping table" from file offsets to disk sectors (``fiemap``, ``devices``), the join
of syscalls and block events into per-request lifecycles (``join``) and the latency
statistics of the report (``stats``). The command is ``ebpfkit.tools.iotrace.cli``."""
