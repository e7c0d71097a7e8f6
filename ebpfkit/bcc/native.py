"""``engine="bcc"``: a program run by BCC itself (libbcc, its Python module) instead of
ebpfkit's engine, where BCC can run: its module installed (Debian's python3-bpfcc, for the
system's Python) and this kernel's headers, which BCC compiles against. Same script, either
engine: what BCC's API returns is BCC's own objects, with the methods ebpfkit.bcc mirrors."""

from __future__ import annotations

import importlib.util
import os
import sys

from ..errors import NotSupportedError

# where Debian's python3-bpfcc puts the module (for /usr/bin/python3; pure Python over libbcc.so)
SYSTEM_PLACES = ("/usr/lib/python3/dist-packages/bcc", "/usr/local/lib/python3/dist-packages/bcc")
PRIVATE_NAME = "_ebpfkit_native_bcc"  # `import bcc` may already mean ebpfkit.bcc (`bcc run`)


def kernel_headers() -> str | None:
    """Where BCC finds this kernel's headers (its own order of places), or None."""
    release = os.uname().release
    for path in (os.environ.get("BCC_KERNEL_SOURCE", ""), f"/lib/modules/{release}/build",
                 f"/lib/modules/{release}/source", "/sys/kernel/kheaders.tar.xz"):
        if path and os.path.exists(path):
            return path
    return None


def module():
    """BCC's own Python module, loaded under a private name (so it and ebpfkit.bcc coexist);
    NotSupportedError (exit 3) naming what is missing where BCC cannot run."""
    if PRIVATE_NAME in sys.modules:
        return sys.modules[PRIVATE_NAME]
    place = _find()
    if place is None:
        raise NotSupportedError("bcc", "engine='bcc' needs BCC's Python module: none importable here nor in "
                                f"{' or '.join(SYSTEM_PLACES)}", "apt-get install python3-bpfcc")
    if kernel_headers() is None:
        release = os.uname().release
        raise NotSupportedError("kernel headers", "engine='bcc' needs this kernel's headers, which BCC compiles "
                                f"against: none at /lib/modules/{release}/build, $BCC_KERNEL_SOURCE or "
                                "/sys/kernel/kheaders.tar.xz", "ebpfkit's own engine (the default) needs none")
    spec = importlib.util.spec_from_file_location(PRIVATE_NAME, os.path.join(place, "__init__.py"),
                                                  submodule_search_locations=[place])
    loaded = importlib.util.module_from_spec(spec)
    sys.modules[PRIVATE_NAME] = loaded
    try:
        spec.loader.exec_module(loaded)
    except Exception as e:  # its libbcc.so missing or of another version
        del sys.modules[PRIVATE_NAME]
        raise NotSupportedError("bcc", f"BCC's module at {place} does not load: {type(e).__name__}: {e}") from None
    return loaded


def install_as_bcc() -> None:
    """Make ``import bcc`` (and its submodules) BCC's own module, for `bcc run --engine bcc`."""
    real = module()
    sys.modules["bcc"] = real
    for name, loaded in list(sys.modules.items()):
        if name.startswith(PRIVATE_NAME + "."):
            sys.modules["bcc" + name[len(PRIVATE_NAME):]] = loaded


def _find() -> str | None:
    own = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:  # a bcc on this interpreter's path that is not ebpfkit.bcc
        candidate = os.path.join(entry or ".", "bcc")
        if os.path.isfile(os.path.join(candidate, "__init__.py")) and os.path.realpath(candidate) != own:
            return candidate
    return next((p for p in SYSTEM_PLACES if os.path.isfile(os.path.join(p, "__init__.py"))), None)
