#!/usr/bin/python3
"""A throw-away Ceph cell with the RADOS Gateway (RGW), the suite's second
real S3 server (tests/bucket/README.md, "The RGW bucket").

One monitor, one OSD on memstore (RAM, nothing on disk but its small
metadata) and radosgw with its beast frontend, all on 127.0.0.1 with ports
picked free at start, a private conf and private data, run and log
directories under one work directory, `auth ... required = none` (with
`ms mon client mode = crc`, without which radosgw loops on
"get_initial_auth_request returned -13"), and `paxos propose interval`
lowered so the cell is up in seconds.  No systemd, no path outside the work
directory; it runs as root or as any user.

    cell = Cell(workdir).start()          # about 5 s
    cell.endpoint                          # "127.0.0.1:<port>"
    cell.add_user("t1", "queen", ak, sk)   # tenant t1, user queen
    cell.stop()                            # every daemon, by PID

shared() starts one cell for the whole process (the pytest session) and
stops it at exit; a watchdog process kills the daemons should this process
die without stopping them.

CLI:  rgw.py start DIR [--access-key K --secret-key S --buckets lake,...]
      rgw.py stop DIR
`start` leaves the daemons running and writes DIR/cell.json (endpoint and
PIDs); `stop` ends them by those PIDs.
"""

import argparse
import base64
import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "integration"))
from queenproc import free_ports  # noqa: E402

PYTHON = "/usr/bin/python3"
BINARIES = ("monmaptool", "ceph-mon", "ceph-osd", "ceph", "radosgw",
            "radosgw-admin")


def available():
    """None when the Ceph binaries are installed, else what is missing."""
    missing = [b for b in BINARIES if shutil.which(b) is None]
    return None if not missing else \
        "Ceph is not installed (scripts/setup.sh): no %s" % " ".join(missing)


CONF = """[global]
fsid = {fsid}
mon host = v2:127.0.0.1:{mon_port}
auth cluster required = none
auth service required = none
auth client required = none
ms mon client mode = crc
ms bind msgr1 = false
keyring = /dev/null
run dir = {d}/run
admin socket = {d}/run/$name.asok
pid file = {d}/run/$name.pid
log file = {d}/log/$name.log
log to stderr = false
err to stderr = true
mon data = {d}/mon/$id
osd data = {d}/osd/$id
osd objectstore = memstore
memstore device bytes = {mem_bytes}
osd pool default size = 1
osd pool default min size = 1
osd pool default pg num = 8
osd pool default pgp num = 8
osd pool default pg autoscale mode = off
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
mon max pg per osd = 1000
osd crush chooseleaf type = 0
paxos propose interval = 0.1
paxos min wait = 0.01
mon osd report timeout = 30

[client.rgw]
rgw data = {d}/rgw
rgw frontends = beast endpoint=127.0.0.1:{rgw_port} tcp_nodelay=1
rgw dns name = localhost
rgw enable usage log = false
rgw thread pool size = 64
rgw crypt require ssl = false
rgw crypt s3 kms backend = testing
rgw crypt s3 kms encryption keys = key-1={kms_key}
"""


class CellError(RuntimeError):
    pass


class Cell:
    def __init__(self, workdir=None, mem_bytes=2 << 30):
        self.own = workdir is None
        self.workdir = workdir
        self.mem_bytes = mem_bytes
        self.procs = {}  # name -> Popen (or a pid, from cell.json)
        self.watchdog = None
        self.rgw_port = None

    # -- commands --

    def _cmd(self, *args, timeout=60, check=True):
        r = subprocess.run([args[0], "-c", self.conf] + list(args[1:]),
                           stdin=subprocess.DEVNULL, capture_output=True,
                           timeout=timeout)
        if check and r.returncode != 0:
            raise CellError("%s failed (%d): %s" % (
                " ".join(args[:3]), r.returncode,
                (r.stderr or r.stdout)[-1500:].decode(errors="replace")))
        return r.stdout.decode(errors="replace")

    def _daemon(self, name, *args):
        log = open(os.path.join(self.workdir, "log", name + ".out"), "ab")
        with log:
            p = subprocess.Popen([args[0], "-c", self.conf] + list(args[1:]),
                                 stdin=subprocess.DEVNULL, stdout=log,
                                 stderr=log, start_new_session=True)
        self.procs[name] = p
        return p

    def _alive(self, name):
        p = self.procs[name]
        if p.poll() is not None:
            raise CellError("%s exited (%s); see %s/log" % (
                name, p.returncode, self.workdir))

    # -- life cycle --

    def start(self, timeout=90.0):
        why = available()
        if why:
            raise CellError(why)
        if self.workdir is None:
            self.workdir = tempfile.mkdtemp(prefix="queen-rgw-")
        d = self.workdir
        for sub in ("run", "log", "mon/a", "osd/0", "rgw"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        self.mon_port, self.rgw_port = free_ports(2)
        self.conf = os.path.join(d, "ceph.conf")
        fsid = str(uuid.uuid4())
        with open(self.conf, "w", encoding="utf-8") as f:
            f.write(CONF.format(fsid=fsid, mon_port=self.mon_port, d=d,
                                rgw_port=self.rgw_port,
                                mem_bytes=self.mem_bytes,
                                kms_key=base64.b64encode(
                                    os.urandom(32)).decode()))
        deadline = time.monotonic() + timeout
        try:
            monmap = os.path.join(d, "monmap")
            subprocess.run(["monmaptool", "--create", "--fsid", fsid,
                            "--addv", "a",
                            "[v2:127.0.0.1:%d]" % self.mon_port, monmap],
                           check=True, capture_output=True)
            self._cmd("ceph-mon", "--mkfs", "-i", "a", "--monmap", monmap)
            self._daemon("mon", "ceph-mon", "-f", "-i", "a")
            self._start_watchdog()
            osd_uuid = str(uuid.uuid4())
            osd_id = self._cmd("ceph", "--connect-timeout", "30", "osd",
                               "new", osd_uuid).strip()
            if osd_id != "0":
                raise CellError("ceph osd new gave id %r" % osd_id)
            self._cmd("ceph-osd", "-i", "0", "--mkfs", "--osd-uuid",
                      osd_uuid)
            self._daemon("osd", "ceph-osd", "-f", "-i", "0")
            self._start_watchdog()
            self._wait(deadline, self._osd_up, "the OSD to come up")
            self._daemon("rgw", "radosgw", "-f", "-n", "client.rgw")
            self._start_watchdog()
            self._wait(deadline, self._rgw_answers, "radosgw to answer")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, deadline, pred, what):
        while not pred():
            for name in self.procs:
                self._alive(name)
            if time.monotonic() > deadline:
                raise CellError("timed out waiting for %s (logs in %s/log)"
                                % (what, self.workdir))
            time.sleep(0.1)

    def _osd_up(self):
        out = self._cmd("ceph", "--connect-timeout", "10", "osd", "stat",
                        "-f", "json", check=False)
        try:
            return json.loads(out).get("num_up_osds", 0) >= 1
        except ValueError:
            return False

    def _rgw_answers(self):
        try:
            with urllib.request.urlopen("http://%s/" % self.endpoint,
                                        timeout=2):
                return True
        except urllib.error.HTTPError:
            return True  # any S3 answer (403 for anonymous) will do
        except OSError:
            return False

    def _start_watchdog(self):
        """A process that kills the daemons when we die without stop()."""
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
        pids = [str(p.pid) for p in self.procs.values()]
        code = ("import os,signal,sys,time\n"
                "parent=int(sys.argv[1])\n"
                "while True:\n"
                "    try: os.kill(parent,0)\n"
                "    except ProcessLookupError: break\n"
                "    time.sleep(1)\n"
                "for p in sys.argv[2:]:\n"
                "    try: os.kill(int(p),signal.SIGKILL)\n"
                "    except ProcessLookupError: pass\n")
        self.watchdog = subprocess.Popen(
            [PYTHON, "-c", code, str(os.getpid())] + pids,
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, start_new_session=True)

    def stop(self):
        """rgw, then the OSD, then the monitor: SIGTERM, SIGKILL after 3 s.
        Only the PIDs this cell started are signalled."""
        for name in ("rgw", "osd", "mon"):
            p = self.procs.pop(name, None)
            if p is None:
                continue
            for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):
                try:
                    p.send_signal(sig)
                except ProcessLookupError:
                    break
                try:
                    p.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self.watchdog is not None:
            self.watchdog.kill()
            self.watchdog.wait()
            self.watchdog = None
        if self.own and self.workdir and \
                os.environ.get("QUEEN_KEEP_BUCKET") != "1":
            shutil.rmtree(self.workdir, ignore_errors=True)

    # -- users and buckets --

    @property
    def endpoint(self):
        return "127.0.0.1:%d" % self.rgw_port

    def add_user(self, tenant, uid, access_key, secret_key):
        """A user of its own tenant: its buckets are named apart from every
        other tenant's, so several test buckets called "lake" coexist."""
        args = ["radosgw-admin", "-n", "client.rgw", "user", "create",
                "--uid", uid, "--display-name", uid,
                "--access-key", access_key, "--secret-key", secret_key]
        if tenant:
            args += ["--tenant", tenant]
        self._cmd(*args)

    def client(self, access_key, secret_key, region="us-east-1"):
        import boto3
        from botocore.config import Config
        return boto3.client(
            "s3", endpoint_url="http://" + self.endpoint,
            region_name=region, aws_access_key_id=access_key,
            aws_secret_access_key=secret_key,
            config=Config(s3={"addressing_style": "path"},
                          signature_version="s3v4",
                          retries={"total_max_attempts": 3,
                                   "mode": "standard"}))


_shared = None
_shared_lock = threading.Lock()


def shared():
    """The process's one cell, started on first use, stopped at exit."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Cell().start()
        return _shared


def stop_shared():
    global _shared
    with _shared_lock:
        cell, _shared = _shared, None
    if cell is not None:
        cell.stop()


atexit.register(stop_shared)


def main(argv):
    ap = argparse.ArgumentParser(prog="rgw.py")
    ap.add_argument("action", choices=("start", "stop"))
    ap.add_argument("dir")
    ap.add_argument("--access-key", default="queen")
    ap.add_argument("--secret-key", default="queen-secret-key")
    ap.add_argument("--buckets", default="lake")
    a = ap.parse_args(argv)
    state = os.path.join(a.dir, "cell.json")
    if a.action == "stop":
        with open(state, encoding="utf-8") as f:
            pids = json.load(f)["pids"]
        for name in ("rgw", "osd", "mon"):
            pid = pids.get(name)
            for sig, wait in ((signal.SIGTERM, 3), (signal.SIGKILL, 5)):
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    break
                end = time.monotonic() + wait
                while time.monotonic() < end:
                    try:
                        os.kill(pid, 0)
                    except ProcessLookupError:
                        break
                    time.sleep(0.05)
                else:
                    continue
                break
        os.unlink(state)
        return 0
    os.makedirs(a.dir, exist_ok=True)
    cell = Cell(os.path.abspath(a.dir)).start()
    cell.watchdog.kill()  # the CLI's daemons outlive it until `stop`
    cell.watchdog.wait()
    cell.add_user(None, "queen", a.access_key, a.secret_key)
    s3 = cell.client(a.access_key, a.secret_key)
    for b in [x for x in a.buckets.split(",") if x]:
        s3.create_bucket(Bucket=b)
    with open(state, "w", encoding="utf-8") as f:
        json.dump({"endpoint": "http://" + cell.endpoint,
                   "pids": {n: p.pid for n, p in cell.procs.items()}}, f)
    print(json.dumps({"endpoint": "http://" + cell.endpoint}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
