"""Start one ebpfkit program and keep it attached: print ATTACHED, then wait for SIGINT/SIGTERM.

    python launch_ebpfkit.py PROGRAM.bpf.c [--timings] [--children] [--typed-or-raw TYPED_MAPS:RAW_MAPS]

--timings appends in-process phase times to the ATTACHED line: `import ebpfkit`, the engine
modules that compile()/load() import lazily (imported up front here only to time them
apart: the total work is the same), compile() (a cache lookup when warm, clang when cold),
load() and attach(). --children appends the peak RSS of waited-for children (clang).
--typed-or-raw loads one set of a program that has each hook twice (tp_btf/X and raw_tp/X), as
its tool does (ebpfkit.tools.session.choose_typed_tracepoints, done here with the engine's
feature probes alone, so the launcher imports nothing the engine does not): the typed set
where the kernel has BTF and task storage, else the raw one; the comma-separated maps only
the other set uses are not created.
Nothing else is imported before ATTACHED: what is timed is what a tool would pay.
"""
import os
import signal
import sys
import time

t0 = time.perf_counter()
# block the stop signals first: a stop that arrives while starting is handled after ATTACHED
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
args = sys.argv[1:]
typed_or_raw = args[args.index("--typed-or-raw") + 1] if "--typed-or-raw" in args else None
path = next(a for a in args if not a.startswith("--") and a != typed_or_raw)
timings = "--timings" in args

import ebpfkit  # noqa: E402

t1 = time.perf_counter()
if timings:
    import ebpfkit.engine.btf  # noqa: E401,F401
    import ebpfkit.engine.compiler  # noqa: F401
    import ebpfkit.engine.object  # noqa: F401
t2 = time.perf_counter()
spec = ebpfkit.compile(path)
if typed_or_raw is not None:
    from ebpfkit.engine import features

    typed_maps, _, raw_maps = (part.split(",") for part in typed_or_raw.partition(":"))
    typed = features.probe("kernel_btf").supported and features.probe("task_storage").supported
    for prog in spec.programs.values():
        if prog.section.startswith(("tp_btf/", "raw_tp/")):
            prog.autoload = prog.section.startswith("tp_btf/") == typed
    for name in (raw_maps if typed else typed_maps):
        if name:
            spec.maps[name].autocreate = False
t3 = time.perf_counter()
obj = spec.load()
t4 = time.perf_counter()
obj.attach()
t5 = time.perf_counter()

extra = []
if timings:
    extra.append(f"import={t1 - t0:.4f} engine_import={t2 - t1:.4f} compile={t3 - t2:.4f} "
                 f"load={t4 - t3:.4f} attach={t5 - t4:.4f}")
if "--children" in args:
    import resource

    extra.append(f"children_maxrss_kib={resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss}")
os.write(1, " ".join(["ATTACHED"] + extra).encode() + b"\n")

signal.sigwait({signal.SIGINT, signal.SIGTERM})
obj.close()
