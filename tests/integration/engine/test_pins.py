"""What must outlive a process is pinned in a PinSet under /sys/fs/bpf/ebpfkit/<sub-path>/:
made, locked, reopened, judged (complete, partial, stale) and removed in one place."""

import contextlib
import os
import signal
import subprocess
import sys

import pytest

import ebpfkit
from ebpfkit.engine import pinned
from ebpfkit.engine.mounts import PIN_ROOT
from ebpfkit.engine.pinned import FdMap, prog_exists
from ebpfkit.engine.pinset import COMPLETE, NONE, PARTIAL, STALE, PinSet, PinSetBusy
from helpers import wait_for

pytestmark = pytest.mark.integration

COUNTER = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

const volatile u32 targ_tgid = 0;
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, u32);
	__type(value, u64);
} calls SEC(".maps");

SEC("tp/syscalls/sys_enter_getppid")
int count_getppid(void *ctx)
{
	u32 zero = 0;
	u64 *n;

	if ((bpf_get_current_pid_tgid() >> 32) != targ_tgid)
		return 0;
	n = bpf_map_lookup_elem(&calls, &zero);
	if (n)
		__sync_fetch_and_add(n, 1);
	return 0;
}
char LICENSE[] SEC("license") = "GPL";
"""


def _read_pinned_counter(path: str) -> int:
    with FdMap.open_pinned(path) as counter:
        return int.from_bytes(counter.lookup(bytes(4)), sys.byteorder)


XDP_PASS = r"""
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("xdp")
int pass_all(struct xdp_md *ctx)
{
	return XDP_PASS;
}
char LICENSE[] SEC("license") = "GPL";
"""


@pytest.fixture
def pin_set():
    """A PinSet of this test's own (removed after it, whatever happened)."""
    ps = PinSet(f"pytest-pinset-{os.getpid()}/one")
    yield ps
    ps.remove()
    assert not os.path.exists(os.path.dirname(ps.path))


def _counter(obj_text=COUNTER):
    spec = ebpfkit.compile(text=obj_text, name="pincount.bpf.c")
    spec.rodata["targ_tgid"] = os.getpid()
    return spec.load()


def test_pinned_link_outlives_the_object_until_its_set_is_removed(pin_set):
    pin_set.create("counter", persistent=True, purpose="test")
    with _counter() as obj:
        pin_set.pin_link("link", obj.programs["count_getppid"].attach())
        pin_set.pin_maps(obj)
        pin_set.pin("prog", obj.programs["count_getppid"].fd)
        prog_id = obj.programs["count_getppid"].info().id
        pin_set.seal()
    # the object is closed: only the pins keep program, link and map alive
    for _ in range(5):
        os.getppid()
    assert _read_pinned_counter(os.path.join(pin_set.path, "calls")) == 5
    with pin_set.open_map("calls") as calls:  # reopened by name, as a later command would
        assert calls.lookup(bytes(4)) == (5).to_bytes(8, sys.byteorder)
    assert pin_set.state() == COMPLETE and pin_set.prog_id("prog") == prog_id
    record = pin_set.record()
    assert record["kind"] == "counter" and record["purpose"] == "test" and record["owner"]["pid"] == os.getpid()
    assert set(record["pins"]) == {"calls", "link", "prog"} and record["links"] == ["link"]
    assert pin_set.remove() is False  # a tracepoint link cannot be detached, only released
    # nothing is left: directory, parents, program
    assert not os.path.exists(pin_set.path) and not os.path.exists(os.path.dirname(pin_set.path))
    assert wait_for(lambda: not prog_exists(prog_id), 10), "the program outlived its pins"
    for _ in range(3):
        os.getppid()  # nothing counts any more; the leak check confirms the program is gone


def test_a_set_never_sealed_or_missing_a_pin_is_partial(pin_set):
    assert pin_set.state() == NONE
    pin_set.create("counter")
    with _counter() as obj:
        pin_set.pin_maps(obj)
        assert pin_set.state() == PARTIAL  # its maker is still at it, or died before sealing
        pin_set.pin("prog", obj.programs["count_getppid"].fd)
        pin_set.seal()
    assert pin_set.state() == COMPLETE
    os.unlink(os.path.join(pin_set.path, "calls"))
    assert pin_set.state() == PARTIAL


def _pin_xdp_pass(pin_set, veth_pair, obj) -> None:
    """Attach a pass-all XDP program to the veth and seal it, link pinned, in ``pin_set``."""
    from ebpfkit.net import in_netns, xdp_attached

    pin_set.create("xdp pass")
    link = in_netns(veth_pair.a.netns, obj.programs["pass_all"].attach_xdp, veth_pair.a.ifindex, "generic")
    pin_set.pin_link("link", link)
    pin_set.seal()
    assert xdp_attached(veth_pair.a.netns, veth_pair.a.ifname)


def _xdp_pass():
    return ebpfkit.compile(text=XDP_PASS, name="pinpass.bpf.c").load()


def test_a_set_whose_link_was_detached_is_stale(pin_set, veth_pair):
    from ebpfkit.net import xdp_attached

    with _xdp_pass() as obj:
        _pin_xdp_pass(pin_set, veth_pair, obj)
    assert pin_set.state() == COMPLETE  # the object is closed: the pinned link holds it
    assert pinned.detach_pinned_link(os.path.join(pin_set.path, "link")) == 0
    assert xdp_attached(veth_pair.a.netns, veth_pair.a.ifname) == {}
    assert pin_set.state() == STALE  # pinned, but runs nothing


def test_remove_detaches_a_link_someone_else_still_holds(pin_set, veth_pair):
    from ebpfkit.net import xdp_attached

    with _xdp_pass() as obj:
        _pin_xdp_pass(pin_set, veth_pair, obj)
        assert pin_set.remove() is True  # while this object still holds the link's fd
        assert xdp_attached(veth_pair.a.netns, veth_pair.a.ifname) == {}
        assert not os.path.exists(pin_set.path)


@contextlib.contextmanager
def _python(code: str, *args):
    """A Python child running ``code`` (stdin and stdout piped, text), killed if still there."""
    child = subprocess.Popen([sys.executable, "-c", code, *args], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        yield child
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        child.stdin.close()
        child.stdout.close()


HOLD_LOCK = """
import sys
from ebpfkit.engine.pinset import PinSet
with PinSet(sys.argv[1]).locked():
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_the_lock_excludes_another_process_until_it_lets_go(pin_set):
    pin_set.create("lock test")
    with _python(HOLD_LOCK, pin_set.sub_path) as holder:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(PinSetBusy):
            with pin_set.locked(blocking=False):
                pass
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(10) == 0
    with pin_set.locked(blocking=False):  # free again
        pass


KILLED_OWNER = """
import sys
from ebpfkit.engine.pinset import PinSet
PinSet(sys.argv[1]).create("foreground", persistent=False).seal()
print("made", flush=True)
sys.stdin.readline()
"""


def test_a_foreground_set_whose_owner_died_is_stale(pin_set):
    with _python(KILLED_OWNER, pin_set.sub_path) as owner:
        assert owner.stdout.readline().strip() == "made"
        assert pin_set.state() == COMPLETE and pin_set.record()["owner"]["pid"] == owner.pid
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert pin_set.state() == STALE


def test_a_pin_set_path_stays_under_the_pin_root():
    for bad in ("", "/", "a/../b", "./a", "a//b"):
        with pytest.raises(ValueError):
            PinSet(bad)
    assert PinSet("tool/x").path == os.path.join(PIN_ROOT, "tool/x")
