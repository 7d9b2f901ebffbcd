"""Network namespaces for the cluster partition tests (issue 14 item 5):
every node in a namespace of its own, joined by veth pairs to a bridge in
the root namespace, and links cut and healed with iptables inside a node's
namespace.

    lab = NetLab(3).up()        # namespaces, veths, the bridge, addresses
    lab.gateway                 # the bridge's address (root namespace): the
                                # test bucket binds there, the nodes reach it
    lab.addr[1]                 # node 1's address, reachable from the test
    lab.wrap(1)                 # argv prefix that runs a command in node 1's
    lab.cut(1, 2)               # drop everything between nodes 1 and 2
    lab.isolate(1)              # drop everything between node 1 and its peers
    lab.heal(1)                 # remove every rule node 1's namespace has
    lab.close()                 # namespaces and bridge gone (idempotent)

Only peer traffic is cut: the test process and the bucket, both on the
bridge's address, always reach every node. Names carry a random tag, and a
run records its tag with its pid under /run/queen-netlab/, so a crashed
run's leftovers are removed by the next run (whose own names never clash
with them). The subnet is 10.213.X.0/24 with an X no address of this
machine uses yet. Needs root, `ip netns` and iptables (scripts/setup.sh
installs iproute2 and iptables); `unusable()` says why not."""

import os
import random
import shutil
import subprocess

STATE_DIR = "/run/queen-netlab"
CHAIN = "QCUT"


def _run(argv, check=True):
    r = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("%s: rc %d: %s" % (" ".join(argv), r.returncode,
                                              r.stderr.decode().strip()))
    return r


def unusable():
    """Why namespaces cannot be made here, or None when they can."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return "%s is not installed (scripts/setup.sh installs it)" % tool
    name = "qprobe%d" % os.getpid()
    r = _run(["ip", "netns", "add", name], check=False)
    if r.returncode != 0:
        return "ip netns add fails here: %s" % r.stderr.decode().strip()
    try:
        r = _run(["ip", "netns", "exec", name, "iptables", "-S"], check=False)
        if r.returncode != 0:
            return "iptables fails in a namespace: %s" % \
                r.stderr.decode().strip()
    finally:
        _run(["ip", "netns", "del", name], check=False)
    return None


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _remove(tag, n):
    for i in range(1, n + 1):
        _run(["ip", "netns", "del", "qn%s-%d" % (tag, i)], check=False)
    _run(["ip", "link", "del", "qb%s" % tag], check=False)


def reap_stale():
    """Remove what runs that are gone (their pid dead) left behind."""
    if not os.path.isdir(STATE_DIR):
        return
    for tag in os.listdir(STATE_DIR):
        path = os.path.join(STATE_DIR, tag)
        try:
            with open(path) as f:
                pid, n = (int(x) for x in f.read().split())
        except (OSError, ValueError):
            continue
        if not _alive(pid):
            _remove(tag, n)
            os.unlink(path)


def _used_subnets():
    out = _run(["ip", "-4", "-o", "addr", "show"]).stdout.decode()
    used = set()
    for word in out.split():
        if word.startswith("10.213."):
            used.add(int(word.split(".")[2]))
    return used


class NetLab:
    def __init__(self, n=3):
        self.n = n
        self.tag = "%06x" % random.getrandbits(24)
        self.ns = {i: "qn%s-%d" % (self.tag, i) for i in range(1, n + 1)}
        self.bridge = "qb%s" % self.tag
        self.subnet = None
        self.gateway = None
        self.addr = {}
        self._is_up = False

    def up(self):
        reap_stale()
        os.makedirs(STATE_DIR, exist_ok=True)
        with open(os.path.join(STATE_DIR, self.tag), "w") as f:
            f.write("%d %d\n" % (os.getpid(), self.n))
        self._is_up = True
        try:
            self._build()
        except BaseException:
            self.close()
            raise
        return self

    def _build(self):
        free = sorted(set(range(1, 255)) - _used_subnets())
        assert free, "no free 10.213.X.0/24 subnet"
        x = random.choice(free)
        self.subnet = x
        self.gateway = "10.213.%d.1" % x
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", self.gateway + "/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        for i, ns in self.ns.items():
            self.addr[i] = "10.213.%d.%d" % (x, 10 + i)
            host_end = "qv%s%d" % (self.tag, i)
            ns_end = "qp%s%d" % (self.tag, i)
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", host_end, "type", "veth", "peer",
                  "name", ns_end])
            _run(["ip", "link", "set", ns_end, "netns", ns])
            _run(["ip", "link", "set", host_end, "master", self.bridge])
            _run(["ip", "link", "set", host_end, "up"])
            inside = ["ip", "netns", "exec", ns]
            _run(inside + ["ip", "addr", "add", self.addr[i] + "/24", "dev",
                           ns_end])
            _run(inside + ["ip", "link", "set", ns_end, "up"])
            _run(inside + ["ip", "link", "set", "lo", "up"])
            _run(inside + ["iptables", "-N", CHAIN])
            _run(inside + ["iptables", "-I", "INPUT", "-j", CHAIN])
            _run(inside + ["iptables", "-I", "OUTPUT", "-j", CHAIN])

    def wrap(self, i):
        return ["ip", "netns", "exec", self.ns[i]]

    def _ipt(self, i, *args):
        _run(self.wrap(i) + ["iptables"] + list(args))

    def cut(self, i, j):
        """Drop every packet between nodes i and j (in i's namespace, both
        ways)."""
        self._ipt(i, "-A", CHAIN, "-s", self.addr[j], "-j", "DROP")
        self._ipt(i, "-A", CHAIN, "-d", self.addr[j], "-j", "DROP")

    def isolate(self, i):
        for j in self.ns:
            if j != i:
                self.cut(i, j)

    def heal(self, i):
        """Remove every cut node i's namespace holds."""
        self._ipt(i, "-F", CHAIN)

    def rules(self, i):
        """The DROP rules node i's namespace holds now."""
        out = _run(self.wrap(i) + ["iptables", "-S", CHAIN]).stdout.decode()
        return [ln for ln in out.splitlines() if "DROP" in ln]

    def close(self):
        if not self._is_up:
            return
        self._is_up = False
        _remove(self.tag, self.n)
        try:
            os.unlink(os.path.join(STATE_DIR, self.tag))
        except OSError:
            pass
