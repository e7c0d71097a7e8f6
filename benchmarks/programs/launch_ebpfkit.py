"""Start one ebpfkit program and keep it attached: print ATTACHED, then wait for SIGINT/SIGTERM.

    python launch_ebpfkit.py PROGRAM.bpf.c [--timings] [--children]

--timings appends in-process phase times to the ATTACHED line: `import ebpfkit`, the engine
modules that compile()/load() import lazily (imported up front here only to time them
apart: the total work is the same), compile() (a cache lookup when warm, clang when cold),
load() and attach(). --children appends the peak RSS of waited-for children (clang).
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
path = next(a for a in args if not a.startswith("--"))
timings = "--timings" in args

import ebpfkit  # noqa: E402

t1 = time.perf_counter()
if timings:
    import ebpfkit.engine.btf  # noqa: E401,F401
    import ebpfkit.engine.compiler  # noqa: F401
    import ebpfkit.engine.object  # noqa: F401
t2 = time.perf_counter()
spec = ebpfkit.compile(path)
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
