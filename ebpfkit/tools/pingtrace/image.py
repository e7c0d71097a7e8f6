"""`pingtrace --image FILE.png`: each stage's latency over the run, one line per stage (the
slowest ones), the round trip on top, lost probes marked: the picture a person reads faster
than a table. Needs matplotlib (`pip install 'ebpfkit[notebook]'`)."""

from __future__ import annotations

from collections import deque

MAX_PROBES = 100_000  # the last ones are drawn (a run may last for days)
MAX_STAGES = 8        # stages drawn besides the round trip: those with the highest p99
DRAWN = "lines: "     # the PNG's Description: DRAWN + the lines' labels, "; "-separated


class MissingMatplotlib(Exception):
    pass


def require_matplotlib() -> None:
    """Before the run starts: a missing matplotlib is said at once, not after an hour."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingMatplotlib("--image needs matplotlib: pip install 'ebpfkit[notebook]'") from None


class Timeline:
    """The probes' stage latencies over time, as they come."""

    def __init__(self, limit: int = MAX_PROBES):
        self.probes: deque = deque(maxlen=limit)
        self.start: float | None = None

    def add(self, probe) -> None:
        if self.start is None:
            self.start = probe.time
        stages = {} if probe.lost else {s.name: s.us for s in probe.stages}
        self.probes.append((probe.time - self.start, probe.rtt_us, stages))

    def write(self, path: str, title: str) -> None:
        import matplotlib

        matplotlib.use("Agg")  # a file, no display
        from matplotlib import pyplot as plt

        times = [t for t, _, _ in self.probes]
        fig, ax = plt.subplots(figsize=(12, 6), dpi=100)
        answered = [(t, rtt) for t, rtt, _ in self.probes if rtt is not None]
        if answered:
            ax.plot(*zip(*answered), color="black", linewidth=1.2, label="round trip")
        for name in self._slowest_stages():
            points = [(t, stages[name]) for t, _, stages in self.probes if name in stages]
            ax.plot(*zip(*points), linewidth=0.8, label=name)
        lost = [t for t, rtt, _ in self.probes if rtt is None]
        if lost:
            ax.scatter(lost, [0] * len(lost), marker="x", color="red", label=f"lost ({len(lost)})", zorder=3)
        ax.set_xlabel("seconds since the first probe")
        ax.set_ylabel("µs")
        ax.set_yscale("symlog", linthresh=10)
        ax.set_xlim(0, max(times) if times else 1)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(loc="upper left", fontsize="small")
        fig.tight_layout()
        # what is drawn, in the file's own text chunk: a reader (or a test) can tell without eyes
        drawn = [line.get_label() for line in ax.get_lines()]
        fig.savefig(path, metadata={"Title": title, "Description": f"{DRAWN}{'; '.join(drawn)}"})
        plt.close(fig)

    def _slowest_stages(self) -> list[str]:
        values: dict[str, list] = {}
        for _, _, stages in self.probes:
            for name, us in stages.items():
                values.setdefault(name, []).append(us)
        p99 = {name: sorted(v)[int(0.99 * (len(v) - 1))] for name, v in values.items()}
        return sorted(p99, key=p99.get, reverse=True)[:MAX_STAGES]
