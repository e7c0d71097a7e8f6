"""Metadata lives in pyproject.toml. This file adds two build steps, both optional:

- compile every BPF program into a CO-RE object in ebpfkit/programs/prebuilt/, so a machine
  without clang can still run the tools: into the wheel, or for an editable install
  (scripts/setup.sh) into the source tree, which is what that install imports. Compiles come
  from ebpfkit's object cache when nothing changed, so reinstalling costs little. Without
  clang or kernel BTF at build time the step is skipped with a warning and the package
  compiles at run time as usual;
- build ebpfkit.engine._btfnames, the C walk over the kernel's BTF that a cold start needs
  (5-10 ms against 30-90 ms in Python). Without a C compiler it is skipped with a warning and
  the engine uses its Python walk."""

import os
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildWithPrebuiltObjects(build_py):
    def run(self):
        super().run()
        if os.environ.get("EBPFKIT_SKIP_PREBUILD"):
            return
        root = Path(__file__).parent
        # an editable install's package is the source tree itself (build_lib is thrown away)
        package_root = root if getattr(self, "editable_mode", False) else Path(self.build_lib)
        out = package_root / "ebpfkit" / "programs" / "prebuilt"
        sys.path.insert(0, str(root))
        try:
            from ebpfkit.engine.prebuilt import build_all

            built = build_all(out)
            print(f"ebpfkit: prebuilt {len(built)} CO-RE objects into {out} "
                  f"({sum(b.written for b in built)} written, the rest current)")
        except Exception as exc:  # no clang, no BTF, no libbpf on the build machine
            print(f"ebpfkit: WARNING: skipping prebuilt CO-RE objects: {exc}", file=sys.stderr)
        finally:
            sys.path.pop(0)


setup(cmdclass={"build_py": BuildWithPrebuiltObjects},
      ext_modules=[Extension("ebpfkit.engine._btfnames", ["ebpfkit/engine/_btfnames.c"],
                             extra_compile_args=["-O2"], optional=True)])
