"""A raft cluster of build/queen processes on 127.0.0.1 for the cluster
tests (issue 14): every node's environment (QUEEN_RAFT_NODE_ID,
QUEEN_RAFT_LISTEN, QUEEN_RAFT_PEERS, QUEEN_RAFT_TOKEN), start, stop,
kill -9, restart and wipe of one node, the leader as the nodes report it on
/health, convergence, and every node's copy of a partition's log.

Each node has a directory of its own (node-<id>/data, its logs beside it in
node-<id>/queen-stderr-<n>.log), ports picked free at run time. Only the
standard library is used."""

import os
import shutil
import socket

from queenproc import Broker, free_ports, wait_until

TOKEN = "cluster-test-token-0123456789"


class Node(Broker):
    """One member: a Broker with a raft id and a data directory that
    survives restarts (and can be wiped)."""

    def __init__(self, node_id, root, port, raft_port, env,
                 host="127.0.0.1", wrap=None):
        self.id = node_id
        self.root = root
        os.makedirs(root, exist_ok=True)
        super().__init__(os.path.join(root, "data"), env=env, port=port,
                         raft_port=raft_port, host=host, wrap=wrap)

    @property
    def http_addr(self):
        return "%s:%d" % (self.host, self.port)

    @property
    def raft_addr(self):
        return "%s:%d" % (self.host, self.raft_port)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def logs(self):
        """Every log this node wrote, all its starts in order."""
        out = []
        for n in range(1, self.starts + 1):
            p = os.path.join(self.root, "queen-stderr-%d.log" % n)
            if os.path.exists(p):
                with open(p, "rb") as f:
                    out.append(f.read().decode("utf-8", "replace"))
        return "".join(out)

    def health(self, timeout=5):
        """(status, body) of GET /health, or None when nothing answers."""
        try:
            r = self.get("/health", timeout=timeout)
        except OSError:
            return None
        try:
            return r.status, r.json()
        except ValueError:
            return r.status, None

    def raft(self):
        """The raft block of /health, or None."""
        h = self.health()
        if h is None or not isinstance(h[1], dict):
            return None
        return h[1].get("raft")


class Cluster:
    """n voters named 1..n. env: extra settings for every node;
    node_env: {id: {...}} for one node; token None leaves
    QUEEN_RAFT_TOKEN unset. hosts: {id: address} when the nodes do not
    all run on 127.0.0.1 (each in a network namespace of its own: every
    node then has the address to itself and the same two ports), wrap:
    {id: argv prefix} that starts the node there."""

    def __init__(self, root, n=3, env=None, token=TOKEN, node_env=None,
                 hosts=None, wrap=None):
        self.root = str(root)
        self.token = token
        ports = free_ports(2) * n if hosts else free_ports(2 * n)
        self.nodes = {}
        for i in range(1, n + 1):
            self.nodes[i] = Node(i, os.path.join(self.root, "node-%d" % i),
                                 ports[2 * (i - 1)], ports[2 * (i - 1) + 1],
                                 {}, host=(hosts or {}).get(i, "127.0.0.1"),
                                 wrap=(wrap or {}).get(i))
        self.base_env = dict(env or {})
        self.node_env = {k: dict(v) for k, v in (node_env or {}).items()}
        for node in self.nodes.values():
            node.extra_env = self.env_of(node.id)

    # -- environment ---------------------------------------------------

    def peers(self, nodes=None):
        nodes = nodes or self.nodes.values()
        return ",".join("%d=%s/%s" % (n.id, n.raft_addr, n.http_addr)
                        for n in sorted(nodes, key=lambda n: n.id))

    def env_of(self, node_id, peers=None, token="default"):
        node = self.nodes[node_id]
        env = {
            "QUEEN_RAFT_NODE_ID": str(node_id),
            "QUEEN_RAFT_LISTEN": node.raft_addr,
            "QUEEN_RAFT_PEERS": peers if peers is not None else self.peers(),
            # Small segments: three are preallocated per node.
            "QUEEN_RAFT_SEGMENT_MB": "8",
        }
        token = self.token if token == "default" else token
        if token is not None:
            env["QUEEN_RAFT_TOKEN"] = token
        env.update(self.base_env)
        env.update(self.node_env.get(node_id, {}))
        return env

    # -- life cycle ----------------------------------------------------

    def __getitem__(self, node_id):
        return self.nodes[node_id]

    def live(self):
        return [n for n in self.nodes.values() if n.alive()]

    def start(self, timeout=60):
        """Start every node and wait for one leader known to all."""
        for node in self.nodes.values():
            node.start(wait=False)
        return self.leader(timeout)

    def start_node(self, node_id):
        node = self.nodes[node_id]
        node.start(wait=False)
        return node

    def stop_node(self, node_id):
        return self.nodes[node_id].stop()

    def kill9(self, node_id):
        self.nodes[node_id].kill9()

    def restart(self, node_id):
        self.stop_node(node_id)
        return self.start_node(node_id)

    def wipe(self, node_id):
        """Remove a stopped node's data directory."""
        node = self.nodes[node_id]
        assert node.proc is None, "wipe a stopped node only"
        shutil.rmtree(node.data_dir, ignore_errors=True)

    def close(self):
        for node in self.nodes.values():
            if node.proc is not None:
                node.proc.kill()
                node.proc.wait(10)
                node._reap()

    def check_alive(self):
        """Fail at once, with its log, if a node that should run died."""
        for node in self.nodes.values():
            if node.proc is not None and node.proc.poll() is not None:
                raise AssertionError(
                    "node %d exited with %d:\n%s" %
                    (node.id, node.proc.returncode, node.logs()[-4000:]))

    # -- who leads -----------------------------------------------------

    def views(self, nodes=None):
        """{id: raft block of /health} of the live nodes that answered."""
        out = {}
        for node in nodes or self.live():
            r = node.raft()
            if r is not None:
                out[node.id] = r
        return out

    def leader(self, timeout=30, nodes=None):
        """The id of the leader every live node (or every one of nodes)
        agrees on: one node reports role leader, every other one follower
        with leaderId naming it."""
        def agreed():
            self.check_alive()
            live = nodes or self.live()
            if not live:
                return None
            v = self.views(live)
            if len(v) != len(live):
                return None
            leaders = [i for i, r in v.items() if r.get("role") == "leader"]
            if len(leaders) != 1:
                return None
            lid = leaders[0]
            for i, r in v.items():
                if r.get("leaderId") != lid:
                    return None
                if i != lid and r.get("role") != "follower":
                    return None
            return lid
        return wait_until(agreed, timeout, "one leader agreed by %s" %
                          [n.id for n in (nodes or self.live())],
                          interval=0.05)

    def leader_node(self, timeout=30):
        return self.nodes[self.leader(timeout)]

    def followers(self, timeout=30):
        lid = self.leader(timeout)
        return [n for n in self.live() if n.id != lid]

    def wait_converged(self, timeout=30, min_applied=None):
        """Every live node has one leader and the same applied index,
        at least min_applied (default: the highest applied index any node
        reports now, so every node has what any node applied). Returns
        that index."""
        if min_applied is None:
            min_applied = max([r.get("applied", 0)
                               for r in self.views().values()] or [0])

        def same():
            self.check_alive()
            live = self.live()
            v = self.views(live)
            if len(v) != len(live) or not v:
                return None
            lids = {r.get("leaderId") for r in v.values()}
            applied = {r.get("applied") for r in v.values()}
            if len(lids) != 1 or None in lids or len(applied) != 1:
                return None
            a = applied.pop()
            return a if a is not None and a >= min_applied else None
        return wait_until(same, timeout,
                          "nodes %s to agree on a leader and an applied "
                          "index >= %d" % ([n.id for n in self.live()],
                                           min_applied), interval=0.05)

    # -- data ----------------------------------------------------------

    @staticmethod
    def records(node, queue, partition="Default"):
        """Every record of one partition on node, offset 0 to the end, as
        (offset, transactionId, payload); [] when the queue is unknown."""
        out = []
        offset = 0
        while True:
            e = node.fetch_one(queue, partition, offset,
                               maxBytes=8 * 1024 * 1024)
            if e.get("error") == "UNKNOWN_TOPIC_OR_PARTITION":
                return out
            assert "error" not in e, (node.id, e)
            recs = e["records"]
            for r in recs:
                out.append((r["offset"], r["transactionId"], r["payload"]))
            if not recs or recs[-1]["offset"] + 1 >= e["highWatermark"]:
                return out
            offset = recs[-1]["offset"] + 1

    def all_records(self, queue, partition="Default", nodes=None):
        """{id: records} for every live node (or every one of nodes)."""
        return {n.id: self.records(n, queue, partition)
                for n in (nodes or self.live())}


def raw_connect(addr, timeout=5):
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=timeout)
