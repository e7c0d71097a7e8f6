"""`--btf FILE` / EBPFKIT_BTF values that cannot be this kernel's BTF: a usage error (exit 2)
with a message naming the problem, before any tool runs (no kernel needed)."""

from __future__ import annotations

import lzma
import os
import subprocess
import sys

from ebpfkit.engine.btf import check_btf_file

RAW_BTF_HEADER = (0xEB9F).to_bytes(2, sys.byteorder) + b"\x01\x00" + b"\x18\x00\x00\x00" + b"\x00" * 16


def ebpfkit(*args: str, btf_env: str | None = None) -> subprocess.CompletedProcess:
    """`ebpfkit ARGS runqlat 1 1`, with EBPFKIT_BTF set only to ``btf_env``."""
    env = {k: v for k, v in os.environ.items() if k != "EBPFKIT_BTF"}
    env["NO_COLOR"] = "1"
    if btf_env:
        env["EBPFKIT_BTF"] = btf_env
    return subprocess.run([sys.executable, "-m", "ebpfkit", *args, "runqlat", "1", "1"], capture_output=True,
                          text=True, timeout=60, env=env)


def assert_usage_error(result: subprocess.CompletedProcess, *words: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr
    for word in words:
        assert word in result.stderr, (word, result.stderr)


def test_missing_file(tmp_path):
    missing = tmp_path / "nope.btf"
    assert_usage_error(ebpfkit("--btf", str(missing)), f"BTF file {missing} does not exist", "btfhub")
    assert_usage_error(ebpfkit(btf_env=str(missing)), f"BTF file {missing} does not exist")


def test_not_btf(tmp_path):
    text = tmp_path / "notes.txt"
    text.write_text("not BTF at all\n")
    assert_usage_error(ebpfkit("--btf", str(text)), f"{text} is not a BTF file", "debug package")
    assert_usage_error(ebpfkit("--btf", str(tmp_path)), "is a directory")
    # an ELF file without a .BTF section (the Python interpreter)
    assert_usage_error(ebpfkit("--btf", os.path.realpath(sys.executable)), "is not a BTF file")


def test_compressed_btfhub_download(tmp_path):
    packed = tmp_path / f"{os.uname().release}.btf.tar.xz"
    packed.write_bytes(lzma.compress(RAW_BTF_HEADER))
    assert_usage_error(ebpfkit("--btf", str(packed)), "xz-compressed", "tar xf")


def test_btfhub_file_of_another_release(tmp_path):
    other = tmp_path / "5.4.0-1048-aws.btf"
    other.write_bytes(RAW_BTF_HEADER)
    assert_usage_error(ebpfkit("--btf", str(other)), "describes kernel 5.4.0-1048-aws",
                       f"this kernel is {os.uname().release}")
    mine = tmp_path / f"{os.uname().release}.btf"
    mine.write_bytes(RAW_BTF_HEADER)
    check_btf_file(str(mine))  # this release's name: accepted (its content is libbpf's to judge)


def test_vmlinux_elf_is_judged_by_its_btf_section_and_banner(tmp_path):
    banner = tmp_path / "banner"
    btf = tmp_path / "btf"
    btf.write_bytes(RAW_BTF_HEADER)
    for release, ok in (("5.4.0-1048-aws", False), (os.uname().release, True)):
        banner.write_bytes(f"Linux version {release} (builder@host) #1 SMP\n".encode())
        elf = tmp_path / f"vmlinux-{release}"
        subprocess.run(["objcopy", "--add-section", f".BTF={btf}", "--add-section", f".banner={banner}",
                        os.path.realpath(sys.executable), str(elf)], check=True)
        if ok:
            check_btf_file(str(elf))
        else:
            assert_usage_error(ebpfkit("--btf", str(elf)), f"{elf} describes kernel {release}")


DWARF_SOURCE = "struct ek_dwarf_probe { int first; long second; } ek_dwarf_probe_instance;\n"


def test_a_vmlinux_with_dwarf_and_no_btf_is_encoded_by_pahole_once(tmp_path, monkeypatch):
    """A debug package's vmlinux (DWARF, no .BTF): pahole encodes its BTF into the cache, and
    the next use takes the cached file; without pahole, a usage error says what to install.
    (A small DWARF object stands in for the kernel's: the same sections, a known type.)"""
    from ebpfkit.engine.btf import usable_btf_file
    from ebpfkit.engine.btftypes import BTF
    from ebpfkit.errors import BTFFileError

    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))
    source, obj, banner, elf = tmp_path / "probe.c", tmp_path / "probe.o", tmp_path / "banner", tmp_path / "vmlinux"
    source.write_text(DWARF_SOURCE)
    subprocess.run(["clang", "-g", "-c", "-o", str(obj), str(source)], check=True)
    banner.write_bytes(f"Linux version {os.uname().release} (builder@host) #1 SMP\n".encode())
    subprocess.run(["objcopy", "--add-section", f".banner={banner}", str(obj), str(elf)], check=True)
    assert_usage_error(ebpfkit("--btf", str(obj)), "is not a BTF file")  # DWARF, but no kernel's

    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))  # no pahole
    try:
        usable_btf_file(str(elf))
        raise AssertionError("no error without pahole")
    except BTFFileError as error:
        assert "has DWARF but no .BTF" in str(error) and "dwarves" in error.hint
    monkeypatch.undo()
    monkeypatch.setenv("EBPFKIT_CACHE_DIR", str(tmp_path / "cache"))

    encoded = usable_btf_file(str(elf))
    assert encoded != str(elf) and encoded.startswith(str(tmp_path / "cache"))
    with open(encoded, "rb") as f:
        assert BTF.from_bytes(f.read()).find("ek_dwarf_probe") > 0  # the DWARF's struct, as BTF
    stamp = os.stat(encoded).st_mtime_ns
    assert usable_btf_file(str(elf)) == encoded and os.stat(encoded).st_mtime_ns == stamp  # cached
