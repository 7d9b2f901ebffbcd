"""queen's failover for bench/cluster.sh: kill -9 of the leader to the first
push answered 201 by a survivor.

  cluster_failover.py PORTS PIDS PAYLOAD
PORTS and PIDS are comma-separated, node i listening on PORTS[i] and running
as PIDS[i]. Finds the leader from /health, starts two push loops (one item
a request, 500 ms timeout, a new connection after an error) on each other
node (1 ms pause after an error), kill -9s the leader once every loop has
had a 201, and prints
"ms=T errors=E": T from the kill to the first 201 for a push sent after
it, E the answers that were not 201 (or timed out) in between. Also
"elected=T2": from the kill to the first /health of a survivor (polled every
10 ms) that says it is the leader, to tell the election from what follows.
"""
import http.client
import json
import os
import signal
import sys
import threading
import time

ports = [int(p) for p in sys.argv[1].split(",")]
pids = [int(p) for p in sys.argv[2].split(",")]
body = ('{"items":[{"queue":"failover","partition":"p0","payload":%s}]}'
        % sys.argv[3]).encode()
DEADLINE = time.monotonic() + 60


def role(port):
    try:
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=1)
        c.request("GET", "/health")
        h = json.loads(c.getresponse().read())
        c.close()
        return h.get("raft", {}).get("role")
    except (OSError, ValueError, http.client.HTTPException):
        return None


leader = None
while leader is None:
    if time.monotonic() > DEADLINE:
        sys.exit("bench/cluster_failover: no leader")
    for i, p in enumerate(ports):
        if role(p) == "leader":
            leader = i
    time.sleep(0.02)

lock = threading.Lock()
state = {"killed": None, "first": None, "errors": 0, "elected": None}
warm = set()


def loop(port, tag):
    conn = None
    while state["first"] is None and time.monotonic() < DEADLINE:
        sent = time.monotonic()
        try:
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=0.5)
            conn.request("POST", "/api/v1/push", body,
                         {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.read()
            ok = resp.status == 201
        except (OSError, http.client.HTTPException):
            ok = False
            if conn is not None:
                conn.close()
            conn = None
        got = time.monotonic()
        with lock:
            killed = state["killed"]
            if ok:
                warm.add(tag)
                if killed is not None and sent >= killed and state["first"] is None:
                    state["first"] = got
            elif killed is not None:
                state["errors"] += 1
        if not ok:
            time.sleep(0.001)  # a refusal is immediate: do not spin the CPU the cluster needs


threads = []
for i, p in enumerate(ports):
    if i != leader:
        for tag in ("a", "b"):
            t = threading.Thread(target=loop, args=(p, "%d%s" % (i, tag)), daemon=True)
            threads.append(t)
            t.start()
while len(warm) < len(threads):
    if time.monotonic() > DEADLINE:
        sys.exit("bench/cluster_failover: the survivors never answered 201")
    time.sleep(0.005)
time.sleep(0.2)
with lock:
    state["killed"] = time.monotonic()
os.kill(pids[leader], signal.SIGKILL)
others = [p for i, p in enumerate(ports) if i != leader]
while state["elected"] is None and time.monotonic() < DEADLINE:
    for p in others:
        if role(p) == "leader":
            state["elected"] = time.monotonic()
            break
    else:
        time.sleep(0.01)
for t in threads:
    t.join()
if state["first"] is None:
    sys.exit("bench/cluster_failover: no 201 within 60 s of the kill")
elected = -1.0 if state["elected"] is None else (state["elected"] - state["killed"]) * 1000
print("ms=%.1f errors=%d elected=%.1f leader=%d" % (
    (state["first"] - state["killed"]) * 1000, state["errors"], elected, leader + 1))
