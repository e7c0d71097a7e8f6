"""The maps of one XDP program as a set, typed through their BTF: the live object's (duplicated fds, so they outlive
it), those pinned in its directory by an earlier command, or those of a foreground run
found by its program's id. A program's tables class names its maps; opening is all or
nothing."""

from __future__ import annotations

from ...engine import pinned, pinset
from ...engine.maps import KernelMap
from ...errors import EbpfkitError
from . import pins


class Tables:
    MAP_NAMES: tuple[str, ...] = ()
    KIND = "XDP program"  # what the maps belong to, for messages
    COMMAND = ""          # its `ebpfkit xdp` subcommand, for hints
    PROGRAM = ""          # its XDP program's name
    prog_id: int | None = None  # the program open_attached() found them through

    def __init__(self, maps: dict[str, KernelMap], path: str | None = None):
        missing = [n for n in self.MAP_NAMES if n not in maps]
        if missing:
            for m in maps.values():
                m.close()
            raise EbpfkitError(f"{path or 'object'} is not an ebpfkit {self.KIND} (no map {missing[0]})")
        self.maps, self.path = maps, path

    @classmethod
    def of_object(cls, obj, **extra):
        return cls({n: KernelMap.of(obj.maps[n]) for n in cls.MAP_NAMES}, **extra)

    @classmethod
    def open_set(cls, pins, **extra):
        """The maps pinned in a PinSet."""
        maps = {}
        try:
            for n in cls.MAP_NAMES:
                if n in pins.names():
                    maps[n] = KernelMap.owning(pins.open_map(n))
        except BaseException:
            for m in maps.values():
                m.close()
            raise
        return cls(maps, pins.path, **extra)

    @classmethod
    def open_attached(cls, iface_name: str, netns: str | None = None):
        """The tables of the program another process attached to the interface: pinned, or
        a foreground run's (which pins nothing), through the program the interface runs."""
        found = pins.pin_set(iface_name, netns)
        if found.exists():
            prog = found.prog_id("prog")
            tables = cls.open_set(found, **cls.context(netns))
            tables.prog_id = prog
            return tables
        iface = pins.lookup_iface(iface_name, netns)  # a clearer error if the iface is wrong
        prog = pins.unpinned_program(iface, (cls.PROGRAM,))
        if prog is None:
            raise pins.NotAttachedError(f"no ebpfkit {cls.KIND} is attached to {iface.where} "
                                        f"(nothing pinned at {found.path}, no foreground run)",
                                        hint=f"attach one with `ebpfkit xdp {cls.COMMAND} attach`")
        raw = pinned.program_maps(prog)
        for name in set(raw) - set(cls.MAP_NAMES):
            raw.pop(name).close()
        tables = cls({name: KernelMap.owning(m) for name, m in raw.items()}, None, **cls.context(netns))
        tables.prog_id = prog
        return tables

    def current(self) -> bool:
        """Whether the program open_attached() found these maps through still runs: not
        detached, not replaced by a new attach. Cheap (no netlink), for a reader that keeps
        them open between reads."""
        if self.path:
            return pins.pinned_prog_id(self.path) == self.prog_id
        if self.prog_id is None:
            return True  # our own object's: it runs as long as we hold it
        return pinned.prog_exists(self.prog_id)

    def locked(self):
        """Serialise changes: on the pin set, or for a foreground run's maps on bpffs."""
        return pinset.lock(self.path) if self.path else pinset.unpinned_lock()

    @classmethod
    def context(cls, netns: str | None) -> dict:
        """Constructor arguments that depend on the interface's namespace."""
        return {}

    def close(self) -> None:
        for m in self.maps.values():
            m.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
